package warming_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/agenttest"
	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/testenv"
)

// The generated warm commands keep going past a bench that needs nightly
// and a test today's rustc denies, as real workspaces have on stable: ferry
// base leaves a ready base whose incomplete names both, and an agent's
// first cargo build compiles nothing.
func TestDefaultWarmKeepsGoingPastBenchesAndTests(t *testing.T) {
	if out, err := exec.Command("rustc", "-V").Output(); err != nil || strings.Contains(string(out), "nightly") {
		t.Skipf("needs a stable rustc, where the fixture's nightly bench does not compile (rustc -V: %q, %v)", out, err)
	}
	w := &agenttest.World{Repo: testenv.Repo(t, fixture.Options{NightlyBench: true, DeniedLintTest: true, NoRegistry: true}), Bin: testenv.Binaries(t)}
	root := t.TempDir()
	w.Home, w.Worktrees = filepath.Join(root, "home"), filepath.Join(root, "worktrees")
	// No ferry.toml: the generated warm commands.
	out := w.MustFerry(t, "base", "--json")
	var r struct {
		Warm []struct {
			Command  string   `json:"command"`
			ExitCode int      `json:"exit_code"`
			Failed   []string `json:"failed"`
		} `json:"warm"`
		Incomplete []string `json:"incomplete"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("ferry base --json: %v\n%s", err, out)
	}
	build := "cargo build --workspace --all-targets --keep-going"
	if len(r.Warm) < 2 || r.Warm[0].ExitCode != 0 || r.Warm[1].Command != build || r.Warm[1].ExitCode == 0 {
		t.Fatalf("warm = %+v, want the plain build passed and the build of every target failed", r.Warm)
	}
	for _, want := range []string{
		`bench "` + fixture.NightlyBench + `" of crate ` + fixture.ChainC + ` did not compile (` + build + `)`,
		`test "` + fixture.DeniedLintTest + `" of crate ` + fixture.ChainC + ` did not compile (` + build + `)`,
	} {
		if !slices.Contains(r.Incomplete, want) {
			t.Errorf("incomplete lacks %q: %q", want, r.Incomplete)
		}
	}
	// ferry base list marks it.
	if list := w.MustFerry(t, "base", "list"); !strings.Contains(list, "INCOMPLETE") {
		t.Errorf("ferry base list:\n%s", list)
	}

	a := w.Spawn(t, "warm")
	_, stderr, code := w.Cargo(a.Worktree, nil, "build", "--workspace")
	if code != 0 {
		t.Fatalf("first build failed:\n%s", stderr)
	}
	if strings.Contains(stderr, "Compiling") {
		t.Fatalf("the first build of an agent on a base that kept going compiled something:\n%s", stderr)
	}
}

// The fixture's manifest crate has a feature only app's dev-dependency
// turns on, so a build of every target and a plain build compile it (and
// app) as other units. With no ferry.toml, the generated warm commands
// cover what agents commonly run: in a fresh agent, each of these compiles
// nothing (before the plain build and check joined the defaults, cargo
// build compiled 2 crates here and cargo check 12).
func TestDefaultWarmCoversWhatAgentsRun(t *testing.T) {
	w := &agenttest.World{Repo: testenv.Repo(t, fixture.Options{NoRegistry: true}), Bin: testenv.Binaries(t)}
	root := t.TempDir()
	w.Home, w.Worktrees = filepath.Join(root, "home"), filepath.Join(root, "worktrees")
	w.MustFerry(t, "base")
	clippy := exec.Command("cargo", "clippy", "--version").Run() == nil
	for _, args := range [][]string{
		{"build"}, {"test", "--no-run"}, {"check"}, {"clippy"}, {"build", "--workspace", "--all-targets"},
	} {
		if args[0] == "clippy" && !clippy {
			t.Logf("cargo clippy is not installed: not checked")
			continue
		}
		// An agent of its own for each: its first build of that command.
		name := "first-" + strings.Join(args, "")
		name = strings.NewReplacer("-", "", " ", "").Replace(name)
		a := w.Spawn(t, name)
		_, stderr, code := w.Cargo(a.Worktree, nil, args...)
		if code != 0 {
			t.Fatalf("cargo %s failed:\n%s", strings.Join(args, " "), stderr)
		}
		if got := builtIn(stderr); len(got) > 0 {
			t.Errorf("a fresh agent's first cargo %s compiled %s:\n%s", strings.Join(args, " "), got, stderr)
		}
	}
}

// builtIn lists the crates Cargo's output says it compiled, checked or
// documented.
func builtIn(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && (f[0] == "Compiling" || f[0] == "Checking" || f[0] == "Documenting") {
			out = append(out, f[1])
		}
	}
	return out
}
