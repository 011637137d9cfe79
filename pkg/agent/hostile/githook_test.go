package hostile_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/agenttest"
)

// With the git hook installed, a plain `git worktree add` makes a warm
// agent whose first build compiles nothing and runs its own code; a branch
// switch makes none; uninstalling leaves new worktrees alone.
func TestGitHookMakesWorktreesAgents(t *testing.T) {
	w := agenttest.Shared(t)
	w.MustFerry(t, "hook", "git", "install")
	defer w.Ferry(w.Repo.Dir, nil, "hook", "git", "uninstall")
	before := len(w.AgentsByWorktree(t))

	path := filepath.Join(t.TempDir(), "hooked")
	c := exec.Command("git", "-C", w.Repo.Dir, "worktree", "add", "-q", "-b", "tool/hooked", path)
	c.Env = w.Env([]string{w.ShimPath()})
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("git worktree add: %v\n%s", err, stderr.String())
	}
	path, _ = filepath.EvalSymlinks(path)
	a, ok := w.AgentsByWorktree(t)[path]
	if !ok || a.Tool != "git" || !a.Adopted || a.State != "ready" {
		t.Fatalf("no agent for the new worktree (%+v); the hook said:\n%s", a, stderr.String())
	}
	if !strings.Contains(stderr.String(), "its first build is warm") {
		t.Fatalf("the hook said:\n%s", stderr.String())
	}
	if fi, err := os.Lstat(filepath.Join(path, "target")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("no ./target link to the agent's build output: %v", err)
	}
	_, out, code := w.Cargo(path, nil, "build", "--workspace", "--all-targets")
	if code != 0 || strings.Contains(out, "Compiling") {
		t.Fatalf("first build in a worktree the git hook adopted (exit %d):\n%s", code, out)
	}
	w.CheckMarker(t, path)

	// A branch switch in the main checkout makes no agent.
	if out, err := w.Repo.Git("checkout", "-q", "-b", "hook-switch"); err != nil {
		t.Fatalf("checkout: %v\n%s", err, out)
	}
	if out, err := w.Repo.Git("checkout", "-q", "-"); err != nil {
		t.Fatalf("checkout -: %v\n%s", err, out)
	}
	if n := len(w.AgentsByWorktree(t)); n != before+1 {
		t.Fatalf("%d agents after a branch switch, want %d", n, before+1)
	}
	w.MustFerry(t, "rm", a.Name, "--worktree")

	w.MustFerry(t, "hook", "git", "uninstall")
	plain := w.AddWorktree(t, "unhooked", "--detach")
	if _, ok := w.AgentsByWorktree(t)[plain]; ok {
		t.Fatal("a worktree added after uninstall became an agent")
	}
}

// Hooks never block the tool: with no base yet, git worktree add (through
// the git hook) and Claude Code's WorktreeCreate both get their worktree,
// cold, exit 0 and say why; a base build starts in the background, and
// once it is ready both worktrees are agents whose first build compiles
// nothing.
func TestHooksWithoutBase(t *testing.T) {
	w := agenttest.NewWorld(t, false)
	w.MustFerry(t, "hook", "git", "install")
	// With no build running, spawn --wait has nothing to wait for.
	start := time.Now()
	_, stderr0, err := w.Ferry(w.Repo.Dir, nil, "spawn", "nowait", "--wait")
	agenttest.ExpectRefusal(t, stderr0, err, "no base to spawn from")
	if time.Since(start) > 30*time.Second {
		t.Fatalf("spawn --wait with no build running took %s", time.Since(start))
	}

	gitWT := filepath.Join(t.TempDir(), "early")
	c := exec.Command("git", "-C", w.Repo.Dir, "worktree", "add", "-q", "-b", "tool/early", gitWT)
	c.Env = w.Env(nil)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("git worktree add without a base: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "builds cold: no base is ready yet") || !strings.Contains(stderr.String(), "in the background") {
		t.Fatalf("the git hook said:\n%s", stderr.String())
	}
	gitWT, _ = filepath.EvalSymlinks(gitWT)

	payload := `{"hook_event_name":"WorktreeCreate","session_id":"s-early","cwd":"` + w.Repo.Dir + `","name":"early-claude"}`
	hc := exec.Command(filepath.Join(w.Bin, "ferry"), "hook", "claude-code", "WorktreeCreate")
	hc.Dir, hc.Env, hc.Stdin = w.Repo.Dir, w.Env(nil), strings.NewReader(payload)
	var hout, herr bytes.Buffer
	hc.Stdout, hc.Stderr = &hout, &herr
	if err := hc.Run(); err != nil {
		t.Fatalf("WorktreeCreate without a base: %v\n%s", err, herr.String())
	}
	claudeWT := strings.TrimSpace(hout.String())
	if claudeWT != filepath.Join(w.Repo.Dir, ".claude", "worktrees", "early-claude") || !strings.Contains(herr.String(), "builds cold") {
		t.Fatalf("WorktreeCreate printed %q; said:\n%s", claudeWT, herr.String())
	}
	if st, _ := w.Repo.Git("status", "--porcelain"); strings.Contains(st, ".claude") {
		t.Fatalf("the cold worktree shows in the main checkout's status:\n%s", st)
	}

	// spawn --wait waits for the base being built.
	waitBuildRunning(t, w.StoreDir(t))
	waited := w.Spawn(t, "waited", "--wait=5m")
	if waited.State != "ready" {
		t.Fatalf("spawn --wait: %+v", waited)
	}

	// The background build adopts both once the base is ready.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		agents := w.AgentsByWorktree(t)
		_, g := agents[gitWT]
		_, cl := agents[claudeWT]
		if g && cl {
			break
		}
		if time.Now().After(deadline) {
			logs, _ := filepath.Glob(filepath.Join(w.StoreDir(t), "tmp", "base-*.log"))
			var all []byte
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				all = append(all, b...)
			}
			t.Fatalf("not adopted after 5 minutes (git %v, claude %v); the background build's log:\n%s", g, cl, all)
		}
		time.Sleep(time.Second)
	}
	waitBackgroundBuilds(t, w.StoreDir(t))
	for _, wt := range []string{gitWT, claudeWT} {
		_, out, code := w.Cargo(wt, nil, "build", "--workspace", "--all-targets")
		if code != 0 || strings.Contains(out, "Compiling") {
			t.Fatalf("first build in %s, adopted once the base was ready (exit %d):\n%s", wt, code, out)
		}
	}
	if a := w.AgentsByWorktree(t)[claudeWT]; a.Tool != "claude-code" {
		t.Fatalf("the Claude Code worktree's agent: %+v", a)
	}
	if ents, _ := os.ReadDir(filepath.Join(w.StoreDir(t), "pending")); len(ents) != 0 {
		t.Fatalf("%d pending records left", len(ents))
	}
}

// waitBackgroundBuilds waits until no background base build of the store
// holds its log's lock.
func waitBackgroundBuilds(t *testing.T, store string) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(store, "tmp", "base-*.log"))
	for _, l := range logs {
		f, err := os.Open(l)
		if err != nil {
			continue
		}
		syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		f.Close()
	}
}

// waitBuildRunning waits until a builder holds one of the store's base
// locks (or a base is ready: the build was quicker than the look).
func waitBuildRunning(t *testing.T, store string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if ready, _ := filepath.Glob(filepath.Join(store, "bases", "*", "base.json")); len(ready) > 0 {
			return
		}
		locks, _ := filepath.Glob(filepath.Join(store, "bases", "*.lock"))
		for _, l := range locks {
			f, err := os.Open(l)
			if err != nil {
				continue
			}
			err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			f.Close()
			if err == syscall.EWOULDBLOCK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no base build started within a minute")
}
