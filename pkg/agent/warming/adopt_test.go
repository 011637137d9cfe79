package warming_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/agenttest"
	"github.com/ferrydev/ferry/internal/fixture"
)

// A worktree made with plain `git worktree add` and adopted builds nothing
// on its first build, runs its own code, and adopting it again changes
// nothing; ferry rm then removes only what adoption added, and --worktree
// the worktree too.
func TestAdoptCleanWorktree(t *testing.T) {
	w := agenttest.Shared(t)
	path := w.AddWorktree(t, "tool-clean", "-b", "tool/clean")
	a := w.Adopt(t, path, "--tool", "codex")
	if a.State != "ready" || !a.Adopted || a.Already || a.Tool != "codex" || a.Branch != "tool/clean" || a.Worktree != path {
		t.Fatalf("adoption: %+v", a)
	}
	_, stderr, code := w.Cargo(path, nil, "build", "--workspace", "--all-targets")
	if code != 0 || strings.Contains(stderr, "Compiling") {
		t.Fatalf("first build of an adopted worktree (exit %d) compiled something:\n%s", code, stderr)
	}
	w.CheckMarker(t, path)

	if fi, err := os.Lstat(filepath.Join(path, "target")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("no ./target link in the adopted worktree: %v", err)
	}
	again := w.Adopt(t, path)
	if !again.Already || again.Name != a.Name {
		t.Fatalf("adopting again: %+v", again)
	}
	// From inside the worktree, without a path.
	out, stderr, err := w.Ferry(filepath.Join(path, "crates"), nil, "adopt", "--json")
	if err != nil || !strings.Contains(out, `"already": true`) {
		t.Fatalf("ferry adopt inside the worktree: %v\n%s%s", err, out, stderr)
	}

	// rm keeps the tool's worktree and branch, with the worktree's files.
	if err := os.WriteFile(filepath.Join(path, "notes.txt"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out = w.MustFerry(t, "rm", a.Name, "--json")
	if !strings.Contains(out, `"worktree_kept": true`) {
		t.Fatalf("rm of an adopted agent: %s", out)
	}
	if _, err := os.Stat(filepath.Join(path, "notes.txt")); err != nil {
		t.Fatalf("rm touched the adopted worktree: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(path, "target")); err == nil {
		t.Fatal("rm left the target link in the adopted worktree")
	}
	if !w.BranchExists("tool/clean") || !w.WorktreeRegistered(path) {
		t.Fatal("rm removed the tool's branch or worktree")
	}
	if _, err := os.Stat(filepath.Join(w.StoreDir(t), "agents", a.Name)); err == nil {
		t.Fatal("rm left the agent's directory")
	}

	// Adopted again, rm --worktree refuses the untracked file without
	// --force, and with it removes the worktree and keeps the branch.
	b := w.Adopt(t, path)
	_, stderr, err = w.Ferry(w.Repo.Dir, nil, "rm", b.Name, "--worktree")
	agenttest.ExpectRefusal(t, stderr, err, "uncommitted changes")
	w.MustFerry(t, "rm", b.Name, "--worktree", "--force")
	if _, err := os.Stat(path); err == nil || w.WorktreeRegistered(path) {
		t.Fatal("rm --worktree left the worktree")
	}
	if !w.BranchExists("tool/clean") {
		t.Fatal("rm --worktree deleted the tool's branch")
	}
}

// The worktree's own edits are never stamped: an edit made before the
// base was built (its mtime older than every unit of the base) and a
// staged one rebuild, on a detached HEAD, and the binary is the
// worktree's code.
func TestAdoptKeepsLocalEditsNewer(t *testing.T) {
	w := agenttest.Shared(t)
	path := w.AddWorktree(t, "tool-edited", "--detach")
	lib := filepath.Join(path, fixture.LibPath(fixture.ChainC))
	if err := os.WriteFile(lib, append(agenttest.Must(os.ReadFile(lib)), []byte("\n// edited before adoption\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(lib, old, old); err != nil {
		t.Fatal(err)
	}
	a := w.Adopt(t, path)
	if a.Branch != "" || !a.Adopted {
		t.Fatalf("adoption of a detached worktree: %+v", a)
	}
	_, stderr, code := w.Cargo(path, nil, "build", "--workspace", "--all-targets")
	if code != 0 || !strings.Contains(stderr, "Compiling chain-c") || strings.Contains(stderr, "Compiling diamond") {
		t.Fatalf("first build after adopting an edit of chain-c: want chain-c and its dependents, nothing else:\n%s", stderr)
	}
	if out, err := exec.Command("git", "-C", path, "status", "--porcelain").Output(); err != nil || !strings.Contains(string(out), fixture.LibPath(fixture.ChainC)) {
		t.Fatalf("the edit is gone from the worktree: %v %q", err, out)
	}
	w.CheckMarker(t, path)
	w.MustFerry(t, "rm", a.Name)
	if _, err := os.Stat(lib); err != nil {
		t.Fatal("rm removed the edited worktree")
	}
}

// Bad input changes nothing: the main checkout, a directory that is no
// worktree, a directory inside a worktree, another repository's worktree,
// and a worktree whose target holds build output Ferry did not make.
func TestAdoptRefusals(t *testing.T) {
	w := agenttest.Shared(t)
	agents := func() int {
		ents, _ := os.ReadDir(filepath.Join(w.StoreDir(t), "agents"))
		return len(ents)
	}
	before := agents()

	_, stderr, err := w.Ferry(w.Repo.Dir, nil, "adopt", w.Repo.Dir)
	expectUsage(t, stderr, err, "main checkout")

	plain := t.TempDir()
	_, stderr, err = w.Ferry(w.Repo.Dir, nil, "adopt", plain)
	expectUsage(t, stderr, err, "is not a worktree of the repository")

	path := w.AddWorktree(t, "tool-refused", "--detach")
	_, stderr, err = w.Ferry(w.Repo.Dir, nil, "adopt", filepath.Join(path, "crates"))
	expectUsage(t, stderr, err, "not its top")

	other := t.TempDir()
	for _, args := range [][]string{{"init", "-q", other}, {"-C", other, "commit", "-q", "--allow-empty", "-m", "x"}, {"-C", other, "worktree", "add", "-q", "--detach", other + "-wt"}} {
		if out, err := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	defer os.RemoveAll(other + "-wt")
	_, stderr, err = w.Ferry(w.Repo.Dir, nil, "adopt", other+"-wt")
	expectUsage(t, stderr, err, "is not a worktree of the repository")

	stale := filepath.Join(path, "target", "debug", "stale")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, err = w.Ferry(w.Repo.Dir, nil, "adopt", path)
	agenttest.ExpectRefusal(t, stderr, err, "that Ferry did not make")
	if !strings.Contains(stderr, "mv "+filepath.Join(path, "target")) {
		t.Fatalf("the refusal names no way out:\n%s", stderr)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatal("the refused adoption touched target/")
	}
	if n := agents(); n != before {
		t.Fatalf("refusals left %d agents, want %d", n, before)
	}
	// Moved aside, it adopts.
	if err := os.Rename(filepath.Join(path, "target"), filepath.Join(path, "target.keep")); err != nil {
		t.Fatal(err)
	}
	a := w.Adopt(t, path)
	w.MustFerry(t, "rm", a.Name)
}

// An adoption killed at any step leaves no ready agent, and the next
// adoption of the worktree (or gc) undoes what it left and succeeds.
func TestKilledAdoptionRollsBack(t *testing.T) {
	w := agenttest.Shared(t)
	for i, fp := range []string{"adopt/reserved", "spawn/after-stamp", "furnish/after-link"} {
		path := w.AddWorktree(t, "tool-killed", "--detach")
		_, _, err := w.Ferry(w.Repo.Dir, []string{"FERRY_FAILPOINT=" + fp}, "adopt", path)
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("%s: adopt was not killed: %v", fp, err)
		}
		if i%2 == 1 {
			w.MustFerry(t, "ferry-gc")
			if _, err := os.Lstat(filepath.Join(path, "target")); err == nil && fp != "furnish/after-link" {
				t.Fatalf("%s: gc left a target link", fp)
			}
		}
		a := w.Adopt(t, path)
		if a.State != "ready" || a.Already {
			t.Fatalf("%s: adoption after the kill: %+v", fp, a)
		}
		_, stderr, code := w.Cargo(path, nil, "build", "--workspace", "--all-targets")
		if code != 0 || strings.Contains(stderr, "Compiling") {
			t.Fatalf("%s: first build after the re-adoption (exit %d):\n%s", fp, code, stderr)
		}
		w.MustFerry(t, "rm", a.Name)
		if !w.WorktreeRegistered(path) {
			t.Fatalf("%s: the worktree went", fp)
		}
	}
}

// expectUsage checks for bad input's exit (2) with msg and a hint.
func expectUsage(t *testing.T, stderr string, err error, msg string) {
	t.Helper()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("want bad input (exit 2), got %v:\n%s", err, stderr)
	}
	if !strings.Contains(stderr, msg) || !strings.Contains(stderr, "hint:") {
		t.Fatalf("want %q with a hint, got:\n%s", msg, stderr)
	}
}

// With [paths] worktrees = "repo" an agent's worktree is
// <repo>/.claude/worktrees/<name>, out of the main checkout's status, and
// builds warm like any other.
func TestWorktreesInRepo(t *testing.T) {
	w := agenttest.Shared(t)
	toml := filepath.Join(w.Repo.Dir, "ferry.toml")
	orig := agenttest.Must(os.ReadFile(toml))
	if err := os.WriteFile(toml, append(append([]byte{}, orig...), "\n[paths]\nworktrees = \"repo\"\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile(toml, orig, 0o644)
	a := w.Spawn(t, "inrepo")
	want := filepath.Join(w.Repo.Dir, ".claude", "worktrees", "inrepo")
	if real, _ := filepath.EvalSymlinks(w.Repo.Dir); a.Worktree != want && a.Worktree != filepath.Join(real, ".claude", "worktrees", "inrepo") {
		t.Fatalf("worktree at %s, want %s", a.Worktree, want)
	}
	if st, err := w.Repo.Git("status", "--porcelain", "--untracked-files=all"); err != nil || strings.Contains(st, ".claude") {
		t.Fatalf("the main checkout's status shows the agent: %v\n%s", err, st)
	}
	_, out, code := w.Cargo(a.Worktree, nil, "build", "--workspace", "--all-targets")
	if code != 0 || strings.Contains(out, "Compiling") {
		t.Fatalf("first build in a worktree under the repository (exit %d):\n%s", code, out)
	}
	w.CheckMarker(t, a.Worktree)
	w.MustFerry(t, "rm", a.Name)
	if _, err := os.Stat(a.Worktree); err == nil {
		t.Fatal("rm left the worktree")
	}
}

// Adopted where cargo is not Ferry's shim, an overlay agent's worktree gets
// no ./target link (a plain cargo could not write through it), and the
// tool's own cargo still builds there; a reflink or copy agent's link
// leads to a directory plain cargo can use. Ferry never breaks the tool.
func TestAdoptWithoutShimKeepsPlainCargoWorking(t *testing.T) {
	w := agenttest.Shared(t)
	path := w.AddWorktree(t, "tool-noshim", "--detach")
	out, stderr, err := w.Ferry(w.Repo.Dir, nil, "adopt", "--json", path)
	if err != nil {
		t.Fatalf("ferry adopt: %v\n%s", err, stderr)
	}
	var a struct {
		Name              string `json:"name"`
		Backend           string `json:"backend"`
		TargetLinkSkipped string `json:"target_link_skipped"`
	}
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatal(err)
	}
	_, lerr := os.Lstat(filepath.Join(path, "target"))
	if a.Backend == "overlay" && (lerr == nil || !strings.Contains(a.TargetLinkSkipped, "not Ferry's shim")) {
		t.Fatalf("overlay agent adopted without the shim on PATH: link %v, skipped %q", lerr, a.TargetLinkSkipped)
	}
	c := exec.Command("cargo", "check", "-p", "chain-c")
	c.Dir = path
	c.Env = w.Env(nil)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("plain cargo in the adopted worktree (backend %s): %v\n%s", a.Backend, err, out)
	}
	w.MustFerry(t, "rm", a.Name)
}

// With Ferry's shim off PATH (an agent tool whose shells never got it),
// plain cargo in a spawned agent's worktree builds, whatever the backend:
// an overlay agent's ./target leads to a directory of its own on the host
// while no namespace lives (cold, at host paths, leaving the fork alone),
// never to a link that leads nowhere; a copy agent's to its fork.
func TestPlainCargoBuildsInEveryBackend(t *testing.T) {
	w := agenttest.Shared(t)
	for _, backend := range []string{"overlay", "copy"} {
		t.Run(backend, func(t *testing.T) {
			a := w.Spawn(t, "plain-"+backend, "--backend", backend)
			defer w.MustFerry(t, "rm", "--force", a.Name)
			c := exec.Command("cargo", "build", "-p", "chain-c")
			c.Dir = a.Worktree
			c.Env = w.Env(nil) // PATH as the test's: no shim
			out, err := c.CombinedOutput()
			if err != nil {
				t.Fatalf("plain cargo build in a %s agent: %v\n%s", backend, err, out)
			}
			if backend != "overlay" {
				return
			}
			if !strings.Contains(string(out), "Compiling chain-c") {
				t.Errorf("plain cargo in an overlay agent did not build cold:\n%s", out)
			}
			plain := filepath.Join(w.StoreDir(t), "agents", a.Name, "plain")
			if _, err := os.Stat(filepath.Join(plain, "debug", ".fingerprint")); err != nil {
				t.Errorf("plain cargo did not build in the agent's plain directory: %v", err)
			}
			// The fork is untouched, and the agent's own build through the
			// shim is still warm.
			if ents, _ := os.ReadDir(filepath.Join(w.StoreDir(t), "agents", a.Name, "upper")); len(ents) > 0 {
				t.Errorf("plain cargo wrote into the fork's upper layer: %v", ents)
			}
			if _, stderr, code := w.Cargo(a.Worktree, nil, "build", "-p", "chain-c"); code != 0 || strings.Contains(stderr, "Compiling") {
				t.Errorf("the agent's build through the shim after plain cargo (exit %d):\n%s", code, stderr)
			}
			// ferry list says what happened, and how to fix it.
			_, stderr, err := w.Ferry(w.Repo.Dir, nil, "list")
			if err != nil || !strings.Contains(stderr, "agent "+a.Name+": cargo ran in its worktree without Ferry's shim") {
				t.Errorf("ferry list does not say plain cargo built cold in %s (%v):\n%s", a.Name, err, stderr)
			}
		})
	}
}
