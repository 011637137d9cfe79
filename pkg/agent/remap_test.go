package agent_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/agenttest"
	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/toolchain"
)

// remapBase is what ferry base --json says of a remap base.
type remapBase struct {
	ID     string `json:"id"`
	Src    string `json:"src"`
	Target string `json:"target"`
	Modes  struct {
		Isolation string `json:"isolation"`
		Remap     bool   `json:"remap"`
	} `json:"modes"`
}

// rustcLogger writes a rustc that appends its working directory and
// arguments (as ferry-rustc made them) to log, one call a line, and runs
// the real rustc.
func rustcLogger(t *testing.T, dir, log string) string {
	t.Helper()
	rustc, err := exec.LookPath("rustc")
	if err != nil {
		t.Skip("no rustc on PATH")
	}
	script := filepath.Join(dir, "rustc-logged")
	body := "#!/bin/sh\necho \"$PWD $*\" >> " + log + "\nexec " + rustc + " \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

// compileOf returns the logged line compiling crate (a workspace member,
// so through ferry-rustc) with its working directory cut off, or "".
func compileOf(t *testing.T, log, crate string) string {
	t.Helper()
	b, _ := os.ReadFile(log)
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, " --crate-name "+strings.ReplaceAll(crate, "-", "_")+" ") && strings.Contains(line, "-Zremap-cwd-prefix=.") &&
			strings.Contains(line, "--crate-type lib") {
			_, args, _ := strings.Cut(strings.TrimSpace(line), " ")
			return args
		}
	}
	return ""
}

// Remap mode, wired: on this machine's toolchain the probe refuses it
// (before Rust 1.98), so ferry base says so and builds nothing; with the
// probe skipped (knobs.RemapNoProbe) the base builds through the link in
// its checkout with rustc run by ferry-rustc, an agent spawned from it
// gets its own link to its fork, neither link counts as anyone's change,
// and the agent's build goes through the wrapper with the very command
// lines the base's had, builds what its sources say, and reuses the rest.
func TestRemapModeBaseAndAgent(t *testing.T) {
	fixture.RequireTools(t)
	w := agenttest.NewRegistryWorld(t, false)
	// The agent builds what the base warmed, so their compile lines can
	// be compared (the fixture's dev-dependency gives a build of every
	// target other features).
	if err := os.WriteFile(filepath.Join(w.Repo.Dir, "ferry.toml"), []byte("[base]\nwarm = [\"cargo build --workspace\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	scratch := t.TempDir()
	log := filepath.Join(scratch, "rustc.log")
	env := []string{"FERRY_SANDBOX=off", "FERRY_REMAP_PATHS=true", "RUSTC=" + rustcLogger(t, scratch, log)}
	noProbe := append(env[:len(env):len(env)], knobs.RemapNoProbe+"=1")

	// Without the knob: refused, with the versions it needs, unless this
	// toolchain passes the probe.
	tc, err := toolchain.Detect(w.Repo.Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if perr := tc.ProbeRemap(w.Repo.Dir, nil); perr == nil {
		t.Logf("rustc %s keeps its incremental state across directories: the refusal is not tested here", tc.RustcVersion)
	} else {
		_, stderr, err := w.Ferry(w.Repo.Dir, env, "base")
		var ee *exec.ExitError
		if err == nil || !errors.As(err, &ee) || ee.ExitCode() != failure.Prereq.ExitCode() {
			t.Fatalf("ferry base in remap mode on rustc %s: %v, want exit %d\n%s", tc.RustcVersion, err, failure.Prereq.ExitCode(), stderr)
		}
		for _, want := range []string{"remap mode ([sandbox] remap-paths) needs Rust " + toolchain.RemapVersion, "rustc " + tc.RustcVersion,
			"ignoring cache because of differing commandline arguments", "hint: use a toolchain from Rust " + toolchain.RemapVersion} {
			if !strings.Contains(stderr, want) {
				t.Errorf("the refusal does not say %q:\n%s", want, stderr)
			}
		}
		if left, _ := filepath.Glob(filepath.Join(w.Home, "*", "bases", "*")); len(left) > 0 {
			t.Errorf("the refused base left %q", left)
		}
	}

	out, stderr, err := w.Ferry(w.Repo.Dir, noProbe, "base", "--json")
	if err != nil {
		t.Fatalf("ferry base in remap mode: %v\n%s", err, stderr)
	}
	var b remapBase
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		t.Fatalf("base output %q: %v", out, err)
	}
	br := b
	if !br.Modes.Remap || br.Modes.Isolation != "off" {
		t.Fatalf("base modes %+v: want remap at host paths", br.Modes)
	}
	if dest, err := os.Readlink(filepath.Join(br.Src, ".ferry-target")); err != nil || dest != br.Target {
		t.Errorf("the base's .ferry-target leads to %q (%v), want its target %s", dest, err, br.Target)
	}
	if wrapper, err := filepath.EvalSymlinks(filepath.Join(w.Home, "bin", "ferry-rustc")); err != nil || wrapper != filepath.Join(w.Bin, "ferry-rustc") {
		t.Errorf("bin/ferry-rustc is %q (%v), want a link to %s", wrapper, err, filepath.Join(w.Bin, "ferry-rustc"))
	}
	if st, err := exec.Command("git", "-C", br.Src, "status", "--porcelain").Output(); err != nil || len(st) != 0 {
		t.Errorf("git status in the base's checkout: %q %v", st, err)
	}
	baseLine := compileOf(t, log, fixture.ManifestCrate)
	if baseLine == "" {
		b, _ := os.ReadFile(log)
		t.Fatalf("no compile of %s through ferry-rustc in the base's warm build:\n%s", fixture.ManifestCrate, b)
	}
	if strings.Contains(baseLine, br.Src) || !strings.Contains(baseLine, "--out-dir .ferry-target/debug/deps") {
		t.Errorf("the base's compile of %s names its checkout, or not the target through the link: %s", fixture.ManifestCrate, baseLine)
	}
	// #![feature] stays an error on stable and beta, as without the
	// wrapper; a nightly allows it.
	if nightly := toolchain.Channel(tc.RustcVersion) == "nightly"; strings.Contains(baseLine, "-Zallow-features=") == nightly {
		t.Errorf("rustc %s: -Zallow-features= in the compile line is %t, want %t: %s", tc.RustcVersion, !nightly, nightly, baseLine)
	}
	baseApp, err := exec.Command(filepath.Join(br.Target, "debug", fixture.BinName)).Output()
	if want, _ := fixture.ExpectedMarker(br.Src); err != nil || strings.TrimSpace(string(baseApp)) != want {
		t.Errorf("the base's app prints %q (%v), want %q", baseApp, err, want)
	}

	// The agent: its own link to its fork, ignored, not its work.
	os.Remove(log)
	out, stderr, err = w.Ferry(w.Repo.Dir, env, "spawn", "rm1", "--json")
	if err != nil {
		t.Fatalf("spawn: %v\n%s", err, stderr)
	}
	var a agent.Record
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatalf("spawn output %q: %v", out, err)
	}
	fork := filepath.Join(w.StoreDir(t), "agents", "rm1", "target")
	if a.Remap == nil || a.Remap.Link != fork || a.Remap.Wrapper != filepath.Join(w.Home, "bin", "ferry-rustc") || a.Remap.Channel != toolchain.Channel(tc.RustcVersion) {
		t.Fatalf("agent remap record %+v: want the link to %s", a.Remap, fork)
	}
	if dest, err := os.Readlink(filepath.Join(a.Worktree, ".ferry-target")); err != nil || dest != fork {
		t.Errorf("the agent's .ferry-target leads to %q (%v), want its fork %s", dest, err, fork)
	}
	repo, err := git.Open(w.Repo.Dir)
	if err != nil {
		t.Fatal(err)
	}
	work, err := agent.WorktreeWork(repo, &a)
	if err != nil {
		t.Fatal(err)
	}
	if len(work.Changed) > 0 || len(work.Ignored) > 0 {
		t.Errorf("a fresh remap agent holds work: changed %q, ignored %q", work.Changed, work.Ignored)
	}

	// Its build: through the link and the wrapper, the same command line
	// as the base's for a crate the relocation plan rebuilds, the app
	// built from the agent's sources.
	_, target := workspaceRoot(w, t, a.Worktree, nil)
	if target != filepath.Join(a.Worktree, ".ferry-target") {
		t.Errorf("cargo's target dir in the agent is %s, want its link", target)
	}
	_, stderr, code := w.Cargo(a.Worktree, env, "build", "--workspace")
	if code != 0 {
		t.Fatalf("agent build: %s", stderr)
	}
	if strings.Contains(stderr, "Compiling serde ") || strings.Contains(stderr, "Compiling regex ") {
		t.Errorf("the agent's first build recompiled registry crates:\n%s", stderr)
	}
	// It compiles what the relocation plan removed, no more.
	if a.Fork.Relocated == nil {
		t.Fatal("spawn applied no relocation plan")
	}
	if n := strings.Count(stderr, "Compiling "); n == 0 || n > a.Fork.Relocated.Rebuilds {
		t.Errorf("the agent's first build compiled %d crates; the plan rebuilds %d units:\n%s", n, a.Fork.Relocated.Rebuilds, stderr)
	}
	agentLine := compileOf(t, log, fixture.ManifestCrate)
	if agentLine != baseLine {
		t.Errorf("the agent's compile of %s differs from the base's:\nagent %s\nbase  %s", fixture.ManifestCrate, agentLine, baseLine)
	}
	app := filepath.Join(a.Worktree, ".ferry-target", "debug", fixture.BinName)
	md, err := exec.Command(app, fixture.ManifestDirFlag).Output()
	if want := filepath.Join(a.Worktree, fixture.CrateDir(fixture.ManifestCrate)); err != nil || strings.TrimSpace(string(md)) != want {
		t.Errorf("the agent's app reports %q (%v), want %q", md, err, want)
	}

	// An edit shows in the next build, made with a workspace wrapper
	// inherited from the caller, which remap mode's replaces.
	if err := os.WriteFile(filepath.Join(a.Worktree, fixture.SharedData), []byte("edited in remap mode\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(log)
	inherited := append(env[:len(env):len(env)], "RUSTC_WORKSPACE_WRAPPER=/nonexistent/wrapper")
	if _, stderr, code := w.Cargo(a.Worktree, inherited, "build", "--workspace"); code != 0 {
		t.Fatalf("agent build after the edit: %s", stderr)
	}
	if compileOf(t, log, fixture.ChainC) == "" {
		t.Errorf("the build after the edit did not compile %s through ferry-rustc", fixture.ChainC)
	}
	marker, err := exec.Command(app).Output()
	if want, _ := fixture.ExpectedMarker(a.Worktree); err != nil || strings.TrimSpace(string(marker)) != want {
		t.Errorf("after the edit the agent's app prints %q (%v), want %q", marker, err, want)
	}

	// A removed link is put back by the next cargo call; one the user
	// pointed elsewhere refuses the build.
	link := filepath.Join(a.Worktree, ".ferry-target")
	os.Remove(link)
	if _, stderr, code := w.Cargo(a.Worktree, env, "build", "--workspace"); code != 0 {
		t.Fatalf("build after removing the link: %s", stderr)
	}
	if dest, _ := os.Readlink(link); dest != fork {
		t.Errorf("the link was not put back: %q", dest)
	}
	os.Remove(link)
	os.Symlink(scratch, link)
	if _, stderr, code := w.Cargo(a.Worktree, env, "build"); code != failure.Refused.ExitCode() || !strings.Contains(stderr, "is not the link to its fork") {
		t.Errorf("a retargeted link: exit %d, want %d\n%s", code, failure.Refused.ExitCode(), stderr)
	}
	os.Remove(link)
	os.Symlink(fork, link)
	w.MustFerry(t, "rm", "--force", "rm1")
}
