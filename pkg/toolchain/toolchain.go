// Package toolchain identifies the Rust toolchain Cargo will use in a
// directory.
//
// The answer depends on where you stand: rustup's cargo and rustc proxies
// pick a toolchain from RUSTUP_TOOLCHAIN, then from a rust-toolchain or
// rust-toolchain.toml file in the working directory or above it, then from
// the default. So Detect runs the real tools in the directory a build will
// run in, with the environment it will run with, instead of asking rustup.
// Its result feeds the base fingerprint (RustcVerbose names the exact
// compiler build) and version-gated behaviour (AtLeast).
//
// Detect never installs anything: unless the environment says otherwise it
// sets RUSTUP_AUTO_INSTALL=0, so a toolchain file naming a missing toolchain
// is a prerequisite error with a hint, not a download.
package toolchain

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ferrydev/ferry/pkg/failure"
)

// Toolchain describes the cargo and rustc found for a directory.
type Toolchain struct {
	RustcVerbose string // full `rustc -vV` output
	RustcVersion string // the "release:" line, e.g. "1.95.0" or "1.97.0-nightly"
	Host         string // the "host:" line, e.g. "x86_64-unknown-linux-gnu"
	Cargo        string // `cargo -V` output line, e.g. "cargo 1.95.0 (f2d3ce0bd 2026-03-21)"
	CargoVersion string // e.g. "1.95.0" or "1.97.0-nightly"
	Clippy       bool   // `cargo clippy --version` succeeded (false when not probed: DetectWith)
}

const installHint = "install Rust with rustup (https://rustup.rs), or add the directory holding cargo and rustc to PATH"

// Detect runs `rustc -vV`, `cargo -V` and `cargo clippy --version` with
// working directory dir and environment env (nil means os.Environ()), so
// rustup proxies honour RUSTUP_TOOLCHAIN and the toolchain files found from
// dir upward. The tools are looked up in env's PATH. rustc is $RUSTC when env
// sets it, as Cargo does.
//
// cargo or rustc missing from PATH is a failure.Prereq error with a hint; so
// is a toolchain that rustup reports as not installed. Any other failure of
// cargo or rustc is an error carrying the tool's standard error. A failing
// clippy only sets Clippy to false.
func Detect(dir string, env []string) (*Toolchain, error) {
	return DetectWith(dir, env, Probe{Clippy: true})
}

// Probe says which of Detect's optional calls to make.
type Probe struct {
	// Clippy runs `cargo clippy --version` (through rustup's proxies the
	// slowest of the calls). Without it, Toolchain.Clippy is false.
	Clippy bool
}

// DetectWith is Detect making probe's optional calls only.
func DetectWith(dir string, env []string, probe Probe) (*Toolchain, error) {
	if env == nil {
		env = os.Environ()
	}
	if _, set := lookupEnv(env, "RUSTUP_AUTO_INSTALL"); !set {
		env = append(env[:len(env):len(env)], "RUSTUP_AUTO_INSTALL=0")
	}
	path, _ := lookupEnv(env, "PATH")

	cargo, err := lookPath("cargo", path)
	if err != nil {
		return nil, failure.Wrap(failure.Prereq, err, installHint, "cargo not found on PATH")
	}
	rustc, err := findRustc(dir, env, path)
	if err != nil {
		return nil, err
	}

	// The three calls are independent: run them at once (each goes through
	// rustup's proxy, and a base refresh waits for all of them).
	type result struct {
		out string
		err error
	}
	calls := [][]string{{rustc, "-vV"}, {cargo, "-V"}}
	if probe.Clippy {
		calls = append(calls, []string{cargo, "clippy", "--version"})
	}
	results := make([]chan result, len(calls))
	for i, c := range calls {
		results[i] = make(chan result, 1)
		go func() {
			out, err := runTool(dir, env, c[0], c[1:]...)
			results[i] <- result{out, err}
		}()
	}
	rustcV, cargoV := <-results[0], <-results[1]

	t := &Toolchain{}
	out, err := rustcV.out, rustcV.err
	if err != nil {
		return nil, err
	}
	t.RustcVerbose = out
	for line := range strings.Lines(out) {
		key, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch key {
		case "release":
			t.RustcVersion = strings.TrimSpace(val)
		case "host":
			t.Host = strings.TrimSpace(val)
		}
	}
	if t.RustcVersion == "" || t.Host == "" {
		return nil, fmt.Errorf("detect toolchain in %s: `%s -vV` printed no release or host line: %q", dir, rustc, out)
	}

	out, err = cargoV.out, cargoV.err
	if err != nil {
		return nil, err
	}
	t.Cargo, _, _ = strings.Cut(strings.TrimSpace(out), "\n")
	f := strings.Fields(t.Cargo)
	if len(f) < 2 || f[0] != "cargo" {
		return nil, fmt.Errorf("detect toolchain in %s: unexpected `cargo -V` output %q", dir, out)
	}
	t.CargoVersion = f[1]

	if probe.Clippy {
		t.Clippy = (<-results[2]).err == nil
	}
	return t, nil
}

// findRustc returns the rustc Cargo would run: $RUSTC if set, else rustc
// from PATH.
func findRustc(dir string, env []string, path string) (string, error) {
	if r, ok := lookupEnv(env, "RUSTC"); ok && r != "" {
		if strings.ContainsRune(r, filepath.Separator) {
			if !filepath.IsAbs(r) {
				r = filepath.Join(dir, r)
			}
			if err := checkExecutable(r); err != nil {
				return "", failure.Wrap(failure.Prereq, err,
					"point RUSTC at an installed rustc, or unset it", "RUSTC=%s is not an executable", r)
			}
			return r, nil
		}
		p, err := lookPath(r, path)
		if err != nil {
			return "", failure.Wrap(failure.Prereq, err,
				"point RUSTC at an installed rustc, or unset it", "RUSTC=%s not found on PATH", r)
		}
		return p, nil
	}
	p, err := lookPath("rustc", path)
	if err != nil {
		return "", failure.Wrap(failure.Prereq, err, installHint, "rustc not found on PATH")
	}
	return p, nil
}

// runTool runs name args... in dir with env and returns its standard output.
func runTool(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		call := strings.Join(append([]string{filepath.Base(name)}, args...), " ")
		if msg != "" {
			err = fmt.Errorf("%s: %w: %s", call, err, msg)
		} else {
			err = fmt.Errorf("%s: %w", call, err)
		}
		// rustup: "error: toolchain 'x' is not installed".
		if strings.Contains(msg, "is not installed") {
			return "", failure.Wrap(failure.Prereq, err,
				fmt.Sprintf("install the toolchain with `rustup toolchain install` run in %s, or change the rust-toolchain file or RUSTUP_TOOLCHAIN that selects it", dir),
				"the Rust toolchain selected in %s is not installed", dir)
		}
		return "", fmt.Errorf("detect toolchain in %s: %w", dir, err)
	}
	return stdout.String(), nil
}

// lookupEnv returns the last value of name in env, as the exec'd program
// would see it.
func lookupEnv(env []string, name string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// lookPath finds an executable called name in the directories of path
// (which may differ from this process's PATH). Relative entries, including
// the empty one that means ".", are skipped: a tool found through them would
// depend on the working directory.
func lookPath(name, path string) (string, error) {
	for _, d := range filepath.SplitList(path) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, name)
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}

// AtLeast reports whether the cargo version is major.minor or later. A
// pre-release (1.99.0-nightly, 1.99.0-beta.2) counts as its version number:
// a nightly carries the changes merged so far in that cycle, so code gated
// on a change that landed mid-cycle should probe rather than trust the
// number. An unparsable version is never at least anything.
func (t *Toolchain) AtLeast(major, minor int) bool {
	return VersionAtLeast(t.CargoVersion, major, minor)
}

// VersionAtLeast is AtLeast for a version string a base recorded.
func VersionAtLeast(v string, major, minor int) bool {
	maj, min, ok := parseVersion(v)
	if !ok {
		return false
	}
	return maj > major || (maj == major && min >= minor)
}

// parseVersion reads the major and minor numbers of "1.95.0",
// "1.97.0-nightly" or "1.95.0+build".
func parseVersion(v string) (major, minor int, ok bool) {
	v, _, _ = strings.Cut(v, "-")
	v, _, _ = strings.Cut(v, "+")
	parts := strings.Split(v, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, 0, false
	}
	nums := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p) // signs were cut off above
		if err != nil {
			return 0, 0, false
		}
		nums[i] = n
	}
	return nums[0], nums[1], true
}

// Channel is the release channel of a rustc version ("1.95.0",
// "1.97.0-nightly", "1.96.0-beta.3"): "nightly" for a nightly or a local
// "-dev" build, where #![feature] is allowed, "beta" or "stable" otherwise.
func Channel(version string) string {
	_, pre, _ := strings.Cut(version, "-")
	switch {
	case strings.HasPrefix(pre, "nightly"), strings.HasPrefix(pre, "dev"):
		return "nightly"
	case strings.HasPrefix(pre, "beta"):
		return "beta"
	}
	return "stable"
}
