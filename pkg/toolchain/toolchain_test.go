package toolchain

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/failure"
)

// baseEnv is the process environment without the variables that would
// override the toolchain a directory selects.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "RUSTUP_TOOLCHAIN" || k == "RUSTC" || k == "RUSTUP_AUTO_INSTALL" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func requireCargo(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("cargo"); err != nil {
		t.Skip("cargo is not on PATH:", err)
	}
}

// nightlyInstalled reports whether rustup has a nightly toolchain.
func nightlyInstalled(t *testing.T) bool {
	t.Helper()
	out, err := exec.Command("rustup", "toolchain", "list").Output()
	if err != nil {
		t.Logf("rustup toolchain list: %v", err)
		return false
	}
	for line := range strings.Lines(string(out)) {
		if strings.HasPrefix(line, "nightly") {
			return true
		}
	}
	return false
}

func TestDetect(t *testing.T) {
	requireCargo(t)
	tc, err := Detect(t.TempDir(), baseEnv())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tc.RustcVerbose, "release: "+tc.RustcVersion+"\n") {
		t.Errorf("RustcVersion %q not the release line of %q", tc.RustcVersion, tc.RustcVerbose)
	}
	if !strings.Contains(tc.RustcVerbose, "host: "+tc.Host+"\n") || tc.Host == "" {
		t.Errorf("Host %q", tc.Host)
	}
	if !strings.HasPrefix(tc.Cargo, "cargo "+tc.CargoVersion+" ") || strings.Contains(tc.Cargo, "\n") {
		t.Errorf("Cargo %q, CargoVersion %q", tc.Cargo, tc.CargoVersion)
	}
	if !tc.AtLeast(1, 0) || tc.AtLeast(2, 0) {
		t.Errorf("AtLeast wrong for %q", tc.CargoVersion)
	}
	t.Logf("%s; rustc %s on %s; clippy %v", tc.Cargo, tc.RustcVersion, tc.Host, tc.Clippy)

	// nil means the process environment.
	tc2, err := Detect(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("RUSTUP_TOOLCHAIN") == "" && os.Getenv("RUSTC") == "" && tc2.RustcVerbose != tc.RustcVerbose {
		t.Errorf("nil env detected %q, want %q", tc2.Cargo, tc.Cargo)
	}
}

func TestDetectToolchainFile(t *testing.T) {
	requireCargo(t)
	if !nightlyInstalled(t) {
		t.Skip("no rustup nightly toolchain installed (`rustup toolchain list`); cannot show a toolchain file selecting another version")
	}
	plain, err := Detect(t.TempDir(), baseEnv())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.RustcVersion, "nightly") {
		t.Skip("the default toolchain is nightly already")
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rust-toolchain.toml"), []byte("[toolchain]\nchannel = \"nightly\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "crates", "a")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	// The file is found from a subdirectory, as rustup searches upward.
	nightly, err := Detect(sub, baseEnv())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(nightly.CargoVersion, "nightly") || !strings.Contains(nightly.RustcVersion, "nightly") {
		t.Errorf("toolchain file ignored: %s / rustc %s", nightly.Cargo, nightly.RustcVersion)
	}
	if nightly.RustcVerbose == plain.RustcVerbose {
		t.Error("same rustc with and without the toolchain file")
	}
	t.Logf("with the toolchain file: %s; without: %s", nightly.Cargo, plain.Cargo)

	// RUSTUP_TOOLCHAIN wins over the file.
	stable, err := Detect(sub, append(baseEnv(), "RUSTUP_TOOLCHAIN=stable"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stable.CargoVersion, "nightly") {
		t.Errorf("RUSTUP_TOOLCHAIN=stable ignored: %s", stable.Cargo)
	}
}

// A toolchain file naming a toolchain that is not installed is a
// prerequisite error, and Detect does not try to download it.
func TestDetectToolchainNotInstalled(t *testing.T) {
	requireCargo(t)
	if _, err := exec.LookPath("rustup"); err != nil {
		t.Skip("rustup is not on PATH; toolchain files need its proxies")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rust-toolchain.toml"), []byte("[toolchain]\nchannel = \"1.2.3\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Detect(dir, append(baseEnv(), "RUST_BACKTRACE=0"))
	if err == nil {
		t.Fatal("Detect succeeded with an uninstalled toolchain")
	}
	if failure.KindOf(err) != failure.Prereq || failure.HintOf(err) == "" {
		t.Errorf("error %q: kind %v, hint %q", err, failure.KindOf(err), failure.HintOf(err))
	}
	t.Logf("error: %v\nhint: %s", err, failure.HintOf(err))
	if strings.Contains(err.Error(), "download") {
		t.Errorf("Detect tried to install the toolchain: %v", err)
	}
}

func TestDetectNoCargo(t *testing.T) {
	env := append(baseEnv(), "PATH="+t.TempDir())
	_, err := Detect(t.TempDir(), env)
	if failure.KindOf(err) != failure.Prereq {
		t.Fatalf("error %v, want a prerequisite error", err)
	}
	if !strings.Contains(err.Error(), "cargo not found on PATH") || !strings.Contains(failure.HintOf(err), "rustup") {
		t.Errorf("error %q, hint %q", err, failure.HintOf(err))
	}
}

// fakeTools writes cargo and rustc shell scripts (an empty body leaves the
// tool out) into a new directory and returns it.
func fakeTools(t *testing.T, rustc, cargo string) string {
	t.Helper()
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh for fake tools")
	}
	bin := t.TempDir()
	for name, body := range map[string]string{"rustc": rustc, "cargo": cargo} {
		if body == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

const fakeRustcOutput = `rustc 1.97.0-nightly (e50aa6fba 2026-05-19)
binary: rustc
commit-hash: e50aa6fba4
commit-date: 2026-05-19
host: aarch64-unknown-linux-gnu
release: 1.97.0-nightly
LLVM version: 22.1.2
`

// fakeRustc is a script printing output with shell builtins only (the fake
// PATH holds nothing else).
func fakeRustc(output string) string {
	return "printf '%s' '" + output + "'\n"
}

const fakeCargo = `if [ "$1" = clippy ]; then echo "no clippy" >&2; exit 1; fi
echo "cargo 1.97.0-nightly (4d1f98451 2026-05-15)"
`

func TestDetectParsesFakeTools(t *testing.T) {
	bin := fakeTools(t, fakeRustc(fakeRustcOutput), fakeCargo)
	tc, err := Detect(t.TempDir(), []string{"PATH=" + bin})
	if err != nil {
		t.Fatal(err)
	}
	want := Toolchain{
		RustcVerbose: fakeRustcOutput,
		RustcVersion: "1.97.0-nightly",
		Host:         "aarch64-unknown-linux-gnu",
		Cargo:        "cargo 1.97.0-nightly (4d1f98451 2026-05-15)",
		CargoVersion: "1.97.0-nightly",
		Clippy:       false,
	}
	if *tc != want {
		t.Errorf("Detect =\n%+v\nwant\n%+v", *tc, want)
	}

	// $RUSTC replaces the rustc on PATH, as it does for Cargo.
	other := fakeTools(t, fakeRustc(strings.ReplaceAll(fakeRustcOutput, "aarch64", "riscv64")), "")
	tc, err = Detect(t.TempDir(), []string{"PATH=" + bin, "RUSTC=" + filepath.Join(other, "rustc")})
	if err != nil {
		t.Fatal(err)
	}
	if tc.Host != "riscv64-unknown-linux-gnu" {
		t.Errorf("RUSTC ignored: host %q", tc.Host)
	}
}

func TestDetectToolFails(t *testing.T) {
	bin := fakeTools(t, "echo 'rustc exploded' >&2; exit 3\n", fakeCargo)
	_, err := Detect(t.TempDir(), []string{"PATH=" + bin})
	if err == nil || !strings.Contains(err.Error(), "rustc exploded") {
		t.Fatalf("error %v lacks rustc's stderr", err)
	}
	if failure.KindOf(err) != failure.Internal {
		t.Errorf("kind %v", failure.KindOf(err))
	}

	bin = fakeTools(t, fakeRustc(fakeRustcOutput), "")
	_, err = Detect(t.TempDir(), []string{"PATH=" + bin})
	if failure.KindOf(err) != failure.Prereq {
		t.Errorf("no cargo: %v", err)
	}
	bin = fakeTools(t, "", fakeCargo)
	_, err = Detect(t.TempDir(), []string{"PATH=" + bin})
	if failure.KindOf(err) != failure.Prereq || !strings.Contains(err.Error(), "rustc not found") {
		t.Errorf("no rustc: %v", err)
	}
}

func TestAtLeast(t *testing.T) {
	for _, c := range []struct {
		version      string
		major, minor int
		want         bool
	}{
		{"1.95.0", 1, 95, true},
		{"1.95.0", 1, 94, true},
		{"1.95.0", 1, 96, false},
		{"1.95.0", 1, 99, false},
		{"1.97.0-nightly", 1, 97, true},
		{"1.97.0-nightly", 1, 98, false},
		{"1.99.0-beta.3", 1, 99, true},
		{"1.100.1", 1, 99, true},
		{"2.0.0", 1, 99, true},
		{"0.99.0", 1, 0, false},
		{"1.95", 1, 95, true},
		{"1.95.0+abc", 1, 95, true},
		{"", 0, 0, false},
		{"nightly", 0, 0, false},
		{"1.x.0", 0, 0, false},
		{"1.95.0.1", 0, 0, false},
	} {
		tc := &Toolchain{CargoVersion: c.version}
		if got := tc.AtLeast(c.major, c.minor); got != c.want {
			t.Errorf("%q.AtLeast(%d, %d) = %v, want %v", c.version, c.major, c.minor, got, c.want)
		}
	}
}

// The remap probe asks each toolchain here whether it keeps its
// incremental state across working directories: one older than Rust 1.98
// never does (the fix landed in 1.98), and is refused as a prerequisite
// with the version to get; a stable 1.98 or later always does. A 1.98
// nightly may predate the fix, so its answer is only logged.
func TestProbeRemap(t *testing.T) {
	requireCargo(t)
	toolchains := []string{""}
	if nightlyInstalled(t) {
		toolchains = append(toolchains, "nightly")
	}
	for _, name := range toolchains {
		env := baseEnv()
		if name != "" {
			env = append(env, "RUSTUP_TOOLCHAIN="+name)
		}
		tc, err := Detect(t.TempDir(), env)
		if err != nil {
			t.Fatal(err)
		}
		err = tc.ProbeRemap(t.TempDir(), env)
		t.Logf("rustc %s: %v", tc.RustcVersion, err)
		maj, min, _ := parseVersion(tc.RustcVersion)
		switch old := maj == 1 && min < 98; {
		case old && (failure.KindOf(err) != failure.Prereq || !strings.Contains(err.Error(), ignoringCache) || !strings.Contains(failure.HintOf(err), RemapVersion)):
			t.Errorf("rustc %s: %v, want a refusal naming what rustc printed and Rust %s", tc.RustcVersion, err, RemapVersion)
		case !old && !strings.Contains(tc.RustcVersion, "nightly") && err != nil:
			t.Errorf("rustc %s: %v", tc.RustcVersion, err)
		}
	}
}

func TestChannel(t *testing.T) {
	for v, want := range map[string]string{
		"1.95.0": "stable", "1.97.0-nightly": "nightly", "1.98.0-dev": "nightly", "1.96.0-beta.3": "beta",
	} {
		if got := Channel(v); got != want {
			t.Errorf("Channel(%q) = %q, want %q", v, got, want)
		}
	}
}
