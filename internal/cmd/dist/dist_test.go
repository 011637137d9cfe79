package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

var epoch = time.Unix(1796189564, 0).UTC()

// sources writes a small tree to archive and returns its files, in an
// order that is not the archive's.
func sources(t *testing.T) []file {
	t.Helper()
	dir := t.TempDir()
	write := func(rel, content string, mode os.FileMode) string {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return []file{
		{name: "docs/sub/z.md", src: write("docs/sub/z.md", "z\n", 0o600), mode: 0o644},
		{name: "bin/ferry", src: write("bin/ferry", "#!/bin/sh\necho ferry\n", 0o700), mode: 0o755},
		{name: "README.md", src: write("README.md", "# Ferry\n", 0o664), mode: 0o644},
		{name: "docs/a.md", src: write("docs/a.md", "a\n", 0o644), mode: 0o644},
		{name: "bin/ferry-shim", src: write("bin/ferry-shim", "shim", 0o755), mode: 0o755},
	}
}

func archive(t *testing.T, files []file) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := writeArchive(&b, "ferry-v1.2.3-linux-amd64", files, epoch); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Two archives of the same files are the same bytes, whatever order the
// files come in and whatever the source files' times and modes.
func TestArchiveIsDeterministic(t *testing.T) {
	files := sources(t)
	first := archive(t, files)
	reversed := slices.Clone(files)
	slices.Reverse(reversed)
	for _, f := range files {
		os.Chtimes(f.src, time.Now(), time.Now().Add(time.Hour))
		os.Chmod(f.src, 0o777)
	}
	if second := archive(t, reversed); !bytes.Equal(first, second) {
		t.Fatalf("two archives of the same files differ (%d and %d bytes)", len(first), len(second))
	}
}

// The archive's members are sorted, under one top directory, owned by
// root without names, dated epoch, with the modes given; the gzip header
// has no name and is dated epoch too.
func TestArchiveMembers(t *testing.T) {
	files := sources(t)
	zr, err := gzip.NewReader(bytes.NewReader(archive(t, files)))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || zr.Comment != "" || !zr.ModTime.Equal(epoch) {
		t.Errorf("gzip header: name %q comment %q time %v, want none, none, %v", zr.Name, zr.Comment, zr.ModTime, epoch)
	}
	top := "ferry-v1.2.3-linux-amd64/"
	want := []string{top, top + "README.md", top + "bin/", top + "bin/ferry", top + "bin/ferry-shim",
		top + "docs/", top + "docs/a.md", top + "docs/sub/", top + "docs/sub/z.md"}
	content := map[string]string{}
	for _, f := range files {
		data, _ := os.ReadFile(f.src)
		content[top+f.name] = string(data)
	}
	var got []string
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, h.Name)
		wantMode := int64(0o644)
		switch {
		case strings.HasSuffix(h.Name, "/"):
			wantMode = 0o755
			if h.Typeflag != tar.TypeDir {
				t.Errorf("%s: type %c, want a directory", h.Name, h.Typeflag)
			}
		case strings.Contains(h.Name, "/bin/"):
			wantMode = 0o755
			fallthrough
		default:
			if h.Typeflag != tar.TypeReg {
				t.Errorf("%s: type %c, want a regular file", h.Name, h.Typeflag)
			}
			data, _ := io.ReadAll(tr)
			if string(data) != content[h.Name] {
				t.Errorf("%s: content %q, want %q", h.Name, data, content[h.Name])
			}
		}
		if h.Mode != wantMode {
			t.Errorf("%s: mode %o, want %o", h.Name, h.Mode, wantMode)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner %d:%d (%q:%q), want 0:0 without names", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if !h.ModTime.Equal(epoch) || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("%s: times %v %v %v, want %v only", h.Name, h.ModTime, h.AccessTime, h.ChangeTime, epoch)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("members:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestArchiveRefusesBadNames(t *testing.T) {
	src := filepath.Join(t.TempDir(), "f")
	os.WriteFile(src, nil, 0o644)
	for _, name := range []string{"", "../x", "/etc/passwd", "a//b", "a/./b", "a/"} {
		if _, err := entries("top", []file{{name: name, src: src, mode: 0o644}}); err == nil {
			t.Errorf("entries accepted the member name %q", name)
		}
	}
	twice := []file{{name: "a", src: src, mode: 0o644}, {name: "a", src: src, mode: 0o644}}
	if _, err := entries("top", twice); err == nil {
		t.Error("entries accepted a member named twice")
	}
}

// SHA256SUMS is what sha256sum writes: "<hex>  <name>", sorted, and the
// digests are the files'.
func TestSums(t *testing.T) {
	dir := t.TempDir()
	names := []string{"ferry-v1-linux-arm64.tar.gz", "ferry-v1.cdx.json", "ferry-v1-darwin-amd64.tar.gz"}
	for i, n := range names {
		os.WriteFile(filepath.Join(dir, n), bytes.Repeat([]byte{byte(i)}, 100*i), 0o644)
	}
	if err := writeSumsFile(dir, names); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(dir, sumsName))
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`^([0-9a-f]{64})  (\S+)$`)
	var listed []string
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Fatalf("line %q is not \"<hex>  <name>\"", sc.Text())
		}
		data, _ := os.ReadFile(filepath.Join(dir, m[2]))
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != m[1] {
			t.Errorf("%s: digest %s is not the file's", m[2], m[1])
		}
		listed = append(listed, m[2])
	}
	sorted := slices.Clone(names)
	sort.Strings(sorted)
	if !slices.Equal(listed, sorted) {
		t.Errorf("listed %v, want %v", listed, sorted)
	}
	if !bytes.HasSuffix(text, []byte("\n")) {
		t.Error("SHA256SUMS does not end in a newline")
	}
	// The tool the docs tell users to run agrees, where there is one.
	if _, err := exec.LookPath("sha256sum"); err == nil {
		c := exec.Command("sha256sum", "--check", "--strict", sumsName)
		c.Dir = dir
		if out, err := c.CombinedOutput(); err != nil {
			t.Errorf("sha256sum --check: %v\n%s", err, out)
		}
	}
}

// testBinaries are two "binaries" for the SBOM: this test binary, with the
// build info the toolchain recorded in it, and a made-up one with a
// replaced module and a module without an h1 hash.
func testBinaries(t *testing.T) []binary {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	info, err := buildinfo.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(t.TempDir(), "ferry-shim")
	os.WriteFile(fake, []byte("shim"), 0o755)
	sum := sha256.Sum256([]byte("module"))
	made := &debug.BuildInfo{
		GoVersion: info.GoVersion,
		Path:      "github.com/ferrydev/ferry/cmd/ferry-shim",
		Main:      info.Main,
		Deps: []*debug.Module{
			{Path: "golang.org/x/sys", Version: "v0.50.0", Sum: "h1:" + base64.StdEncoding.EncodeToString(sum[:])},
			{Path: "example.com/old", Version: "v1.0.0", Replace: &debug.Module{Path: "example.com/new", Version: "v1.0.1+incompatible", Sum: "h1:bad"}},
		},
		Settings: []debug.BuildSetting{{Key: "GOOS", Value: "darwin"}, {Key: "CGO_ENABLED", Value: "0"}},
	}
	return []binary{
		{name: "ferry-dist-test", platform: platform{runtime.GOOS, runtime.GOARCH}, path: exe, info: info},
		{name: "ferry-shim", platform: platform{"darwin", "arm64"}, path: fake, info: made},
	}
}

// The SBOM is CycloneDX 1.5 JSON: every reference is to a component it
// lists, every module has a package URL, digests are hex SHA-256, and the
// bytes do not depend on the order the binaries came in.
func TestSBOM(t *testing.T) {
	bins := testBinaries(t)
	cc := []tool{{name: "aarch64-linux-gnu-gcc", version: "12.2.0"}}
	data, err := sbomJSON("v1.2.3", epoch, bins, cc)
	if err != nil {
		t.Fatal(err)
	}
	again, err := sbomJSON("v1.2.3", epoch, []binary{bins[1], bins[0]}, cc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, again) {
		t.Error("the SBOM depends on the order of the binaries")
	}
	var b bom
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		t.Fatalf("SBOM does not decode: %v\n%s", err, data)
	}
	if b.BOMFormat != "CycloneDX" || b.SpecVersion != "1.5" || b.Version != 1 {
		t.Errorf("SBOM is %s %s version %d, want CycloneDX 1.5 version 1", b.BOMFormat, b.SpecVersion, b.Version)
	}
	if b.Metadata.Timestamp != epoch.Format(time.RFC3339) {
		t.Errorf("timestamp %s, want the commit's, %s", b.Metadata.Timestamp, epoch.Format(time.RFC3339))
	}
	if !strings.HasPrefix(b.Metadata.Component.PURL, "pkg:golang/github.com/ferrydev/ferry") {
		t.Errorf("the release is %q, want Ferry's module", b.Metadata.Component.PURL)
	}
	refs := map[string]bool{b.Metadata.Component.BOMRef: true}
	hexSHA := regexp.MustCompile(`^[0-9a-f]{64}$`)
	var libs []string
	for _, c := range b.Components {
		if c.Type == "" || c.Name == "" || c.BOMRef == "" {
			t.Errorf("component %+v lacks a type, name or reference", c)
		}
		if refs[c.BOMRef] {
			t.Errorf("reference %s is not unique", c.BOMRef)
		}
		refs[c.BOMRef] = true
		for _, h := range c.Hashes {
			if h.Alg != "SHA-256" || !hexSHA.MatchString(h.Content) {
				t.Errorf("%s: hash %+v is not a hex SHA-256", c.BOMRef, h)
			}
		}
		if c.Type == "library" {
			libs = append(libs, c.BOMRef)
			if c.PURL != c.BOMRef || !strings.HasPrefix(c.PURL, "pkg:golang/") {
				t.Errorf("%s: package URL %q", c.Name, c.PURL)
			}
		}
	}
	if !sort.StringsAreSorted(libs) {
		t.Errorf("modules are not sorted: %v", libs)
	}
	for _, want := range []string{"pkg:golang/golang.org/x/sys@v0.50.0", "pkg:golang/example.com/new@v1.0.1%2Bincompatible",
		"pkg:golang/stdlib@" + strings.TrimPrefix(runtime.Version(), "go")} {
		if !refs[want] {
			t.Errorf("no component %s among %v", want, libs)
		}
	}
	for _, d := range b.Dependencies {
		if !refs[d.Ref] {
			t.Errorf("dependency of unknown %s", d.Ref)
		}
		for _, r := range d.DependsOn {
			if !refs[r] {
				t.Errorf("%s depends on unknown %s", d.Ref, r)
			}
		}
	}
	if len(b.Dependencies) != 1+len(bins) {
		t.Errorf("%d dependency entries, want the release's and one per binary", len(b.Dependencies))
	}
}

func TestH1SHA256(t *testing.T) {
	sum := sha256.Sum256([]byte("x"))
	if got, ok := h1SHA256("h1:" + base64.StdEncoding.EncodeToString(sum[:])); !ok || got != hex.EncodeToString(sum[:]) {
		t.Errorf("h1SHA256 = %s, %v, want %x", got, ok, sum)
	}
	for _, bad := range []string{"", "h1:", "h1:bad", "h2:" + base64.StdEncoding.EncodeToString(sum[:])} {
		if _, ok := h1SHA256(bad); ok {
			t.Errorf("h1SHA256 accepted %q", bad)
		}
	}
}

func TestCheckVersion(t *testing.T) {
	for _, v := range []string{"v0.4.0", "f17a370-dirty", "v0.4.0-3-gf17a370"} {
		if err := checkVersion(v); err != nil {
			t.Errorf("checkVersion(%q): %v", v, err)
		}
	}
	for _, v := range []string{"", "unknown", "a/b", "a b", ".."} {
		if checkVersion(v) == nil {
			t.Errorf("checkVersion accepted %q", v)
		}
	}
}

// The hint for a missing cross compiler names Debian's packages.
func TestCrossPackages(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the names are for a linux/amd64 host")
	}
	p := platform{"linux", "arm64"}
	t.Setenv("CC_FOR_linux_arm64", "")
	if cc, pkgs := cCompiler(p), cPackages(p); cc != "aarch64-linux-gnu-gcc" || pkgs != "gcc-aarch64-linux-gnu libc6-dev-arm64-cross" {
		t.Errorf("linux/arm64: compiler %s, packages %s", cc, pkgs)
	}
	t.Setenv("CC_FOR_linux_arm64", "/nonexistent/cc")
	if _, err := p.target(true); err == nil || !strings.Contains(err.Error(), "apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross") {
		t.Errorf("a missing compiler: %v, want a hint naming the packages", err)
	}
}

// An archive carries the repository's pages and deployment files, and no
// Go source; every page's link to another file of the repository but a Go
// source lands on a file the archive carries too (deploy/README.md, which
// docs/ links to, was once left out).
func TestExtraFilesKeepLinksWhole(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	files, err := extraFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	packed := map[string]bool{}
	for _, f := range files {
		packed[f.name] = true
		if strings.HasSuffix(f.name, ".go") {
			t.Errorf("the archive carries Go source %s", f.name)
		}
	}
	for _, must := range []string{"README.md", "docs/usage.md", "deploy/README.md", "deploy/systemd/ferry-base@.service", "deploy/nats/sharing.conf"} {
		if !packed[must] {
			t.Errorf("the archive does not carry %s", must)
		}
	}
	link := regexp.MustCompile(`\]\(([^)\s#]+)(#[^)\s]*)?\)`)
	links := 0
	for _, f := range files {
		if !strings.HasSuffix(f.name, ".md") {
			continue
		}
		text, err := os.ReadFile(f.src)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			to := m[1]
			if strings.Contains(to, "://") || strings.HasPrefix(to, "mailto:") || strings.HasSuffix(to, ".go") {
				continue // the web, or the source that checks a page
			}
			target := path.Clean(path.Join(path.Dir(f.name), to))
			if packed[target] || packed[target+"/README.md"] || strings.HasPrefix(target, "../") {
				links++
				continue
			}
			if fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(target))); err == nil && fi.IsDir() {
				links++ // a directory: the pages name folders of the source tree
				continue
			}
			t.Errorf("%s links to %s, which the archive does not carry", f.name, to)
		}
	}
	if links == 0 {
		t.Fatal("no page links to another file: the check found nothing to check")
	}
}
