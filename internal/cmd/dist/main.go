// Command dist writes Ferry's release files into one directory: for each
// platform a ferry-<version>-<os>-<arch>.tar.gz of every binary with
// README.md, the license, docs/ and deploy/, a CycloneDX SBOM of the Go modules the
// binaries link (ferry-<version>.cdx.json), and SHA256SUMS over all of them.
// `make dist` runs it.
//
// Two runs on the same commit with the same toolchains write the same bytes:
// the builds are trimmed of paths and build IDs, the build environment is
// set here rather than inherited, and every time written is the commit's
// (SOURCE_DATE_EPOCH when set). docs/releases.md says how to check.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	out := flag.String("out", "dist", "directory to write; it must be absent or empty")
	version := flag.String("version", "", "the version to stamp into the binaries and name the files by (make passes git describe's)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: dist -version VERSION [-out DIR] BINARY...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*out, *version, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "dist: error:", err)
		os.Exit(1)
	}
}

func run(out, version string, binaries []string) error {
	if err := checkVersion(version); err != nil {
		return err
	}
	if len(binaries) == 0 {
		return errors.New("no binaries named: pass the commands under cmd/ to build (make dist passes them)")
	}
	if strings.HasSuffix(version, "-dirty") {
		fmt.Fprintln(os.Stderr, "dist: warning: the checkout has uncommitted changes; these files are no release")
	}
	epoch, err := sourceDate()
	if err != nil {
		return err
	}
	// Every C cross compiler is checked before the first build, so a
	// missing one fails in a second, not after minutes of building.
	targets, err := findTargets(slices.Contains(binaries, shim))
	if err != nil {
		return err
	}
	if err := emptyDir(out); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "ferry-dist-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	extra, err := extraFiles(".")
	if err != nil {
		return err
	}
	var written []string
	var built []binary
	for _, t := range targets {
		bins, err := t.build(filepath.Join(work, t.dirName()), version, binaries)
		if err != nil {
			return err
		}
		name, err := writePlatform(out, version, t.platform, append(binFiles(bins), extra...), epoch)
		if err != nil {
			return err
		}
		written = append(written, name)
		built = append(built, bins...)
	}
	sbomName := "ferry-" + version + ".cdx.json"
	if err := writeSBOMFile(filepath.Join(out, sbomName), version, epoch, built, toolchains(targets)); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "dist: wrote %s\n", filepath.Join(out, sbomName))
	written = append(written, sbomName)
	if err := writeSumsFile(out, written); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "dist: wrote %s\n", filepath.Join(out, sumsName))
	return nil
}

func findTargets(withShim bool) ([]target, error) {
	var targets []target
	for _, p := range platforms {
		t, err := p.target(withShim)
		if err != nil {
			return nil, err
		}
		targets = append(targets, t)
	}
	return targets, nil
}

// writePlatform writes p's archive of files into out and returns its name.
func writePlatform(out, version string, p platform, files []file, epoch time.Time) (string, error) {
	top := archiveName(version, p)
	name := top + ".tar.gz"
	if err := writeArchiveFile(filepath.Join(out, name), top, files, epoch); err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "dist: wrote %s\n", filepath.Join(out, name))
	return name, nil
}

// checkVersion refuses a version that cannot be part of a file name, or
// none at all: the archives are named by it.
func checkVersion(v string) error {
	if v == "" || v == "unknown" {
		return errors.New("no version: run it through make dist, which passes git describe's name of the checkout (or set VERSION)")
	}
	if strings.ContainsAny(v, "/\\ \t\n") || strings.HasPrefix(v, ".") {
		return fmt.Errorf("version %q cannot name a file", v)
	}
	return nil
}

// sourceDate is the time every file in the archives is dated:
// SOURCE_DATE_EPOCH when set (the convention reproducible builds share),
// else the commit's time, so the bytes do not depend on when they were
// written.
func sourceDate() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		out, err := exec.Command("git", "log", "-1", "--format=%ct").Output()
		if err != nil {
			return time.Time{}, fmt.Errorf("reading the commit time (git log -1 --format=%%ct): %v: set SOURCE_DATE_EPOCH outside a git checkout", err)
		}
		s = strings.TrimSpace(string(out))
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q is not a count of seconds", s)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// emptyDir makes dir, or checks that it is empty: SHA256SUMS must cover
// what is there, and a stale archive of another version is not ours to
// delete.
func emptyDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return fmt.Errorf("%s is not empty: remove it first (make dist does)", dir)
	}
	return nil
}

// extraFiles are the files every archive carries besides the binaries,
// found under the repository root: README.md, the license, every Markdown
// page under docs/, and deploy/ but its Go sources (the systemd units, the
// NATS and Kubernetes configurations and their README, which the pages
// link to).
func extraFiles(root string) ([]file, error) {
	var files []file
	for _, name := range []string{"README.md", "LICENSE", "LICENSE.md", "LICENSE.txt", "COPYING", "NOTICE"} {
		if fi, err := os.Stat(filepath.Join(root, name)); err == nil && fi.Mode().IsRegular() {
			files = append(files, file{name: name, src: filepath.Join(root, name), mode: 0o644})
		}
	}
	for _, tree := range []struct {
		dir  string
		keep func(name string) bool
	}{
		{"docs", func(name string) bool { return filepath.Ext(name) == ".md" }},
		{"deploy", func(name string) bool { return filepath.Ext(name) != ".go" }},
	} {
		top := filepath.Join(root, tree.dir)
		err := filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if errors.Is(err, os.ErrNotExist) && p == top {
				return filepath.SkipDir
			}
			if err != nil || !d.Type().IsRegular() || !tree.keep(d.Name()) {
				return err
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			mode := int64(0o644)
			if fi, err := d.Info(); err == nil && fi.Mode()&0o111 != 0 {
				mode = 0o755 // a script stays one
			}
			files = append(files, file{name: filepath.ToSlash(rel), src: p, mode: mode})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

// binFiles are the archive's bin/ entries for bins.
func binFiles(bins []binary) []file {
	var files []file
	for _, b := range bins {
		files = append(files, file{name: "bin/" + b.name, src: b.path, mode: 0o755})
	}
	return files
}

// archiveName is an archive's name without its extension, and the name of
// the directory at its top.
func archiveName(version string, p platform) string {
	return "ferry-" + version + "-" + p.goos + "-" + p.goarch
}
