package hostile_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/agenttest"
	"github.com/ferrydev/ferry/pkg/store"
)

// Every kill is recovered: ferry spawn, rm, adopt, gc and a base build of
// a new commit, each killed (SIGKILL, the process alone, as a crash or an
// OOM kill leaves its children) at random instants over its run, leave a
// state that the next run of the same command, or ferry gc, completes or
// rolls back: no orphan worktree, branch, lock or agent directory, and the
// name spawns again. The failpoint tests kill at named steps; this one
// kills between them too. The seed is logged: FERRY_KILL_SEED=N replays it.
func TestKilledAtRandomInstants(t *testing.T) {
	w := agenttest.Shared(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FERRY_KILL_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("FERRY_KILL_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	// How long each command takes here, to spread the kills over it.
	took := func(args ...string) time.Duration {
		t.Helper()
		start := time.Now()
		w.MustFerry(t, args...)
		return time.Since(start)
	}
	spawnTime := took("spawn", "kill-probe")
	rmTime := took("rm", "kill-probe")
	const rounds = 8

	t.Run("spawn", func(t *testing.T) {
		for i := range rounds {
			name := fmt.Sprintf("kill-spawn-%d", i)
			at := randomInstant(rng, spawnTime)
			killAfter(w, t, at, "spawn", name)
			if !readyAgent(w, t, name) {
				// The next spawn of the name completes, whatever was left.
				if a := w.Spawn(t, name); a.State != "ready" {
					t.Fatalf("round %d (killed %v in): respawn state %q", i, at, a.State)
				}
			}
			w.MustFerry(t, "rm", name)
			checkNoLeftovers(w, t, name)
		}
		// And gc rolls back what a killed spawn left, with no respawn.
		for i := range rounds / 2 {
			name := fmt.Sprintf("kill-spawn-gc-%d", i)
			killAfter(w, t, randomInstant(rng, spawnTime), "spawn", name)
			if readyAgent(w, t, name) {
				w.MustFerry(t, "rm", name) // it finished before the kill
			}
			w.MustFerry(t, "ferry-gc")
			checkNoLeftovers(w, t, name)
		}
	})

	t.Run("rm", func(t *testing.T) {
		for i := range rounds {
			name := fmt.Sprintf("kill-rm-%d", i)
			w.Spawn(t, name)
			killAfter(w, t, randomInstant(rng, rmTime), "rm", name)
			// The next rm (or, for a record gone already, nothing) finishes.
			if _, err := os.Stat(filepath.Join(w.StoreDir(t), "agents", name, "agent.json")); err == nil {
				w.MustFerry(t, "rm", name)
			}
			w.MustFerry(t, "ferry-gc")
			checkNoLeftovers(w, t, name)
		}
	})

	t.Run("adopt", func(t *testing.T) {
		for i := range rounds {
			path := w.AddWorktree(t, fmt.Sprintf("kill-adopt-%d", i), "--detach")
			killAfter(w, t, randomInstant(rng, spawnTime), "adopt", path)
			a := w.Adopt(t, path)
			if a.State != "ready" {
				t.Fatalf("round %d: adoption after the kill: %+v", i, a)
			}
			if _, stderr, code := w.Cargo(path, nil, "build", "-p", "chain-c"); code != 0 || strings.Contains(stderr, "Compiling") {
				t.Fatalf("round %d: first build after the re-adoption (exit %d):\n%s", i, code, stderr)
			}
			w.MustFerry(t, "rm", a.Name, "--worktree")
			checkNoLeftovers(w, t, a.Name)
		}
	})

	t.Run("base", func(t *testing.T) {
		for i := range rounds / 2 {
			// A new commit's base, on a branch of its own so current stays.
			commit := commitOnBranch(w, t, fmt.Sprintf("kill-base-%d", i))
			cur, _ := os.ReadFile(filepath.Join(w.StoreDir(t), "current"))
			start := time.Now()
			w.MustFerry(t, "base", "--rev", commit)
			baseTime := time.Since(start)
			w.MustFerry(t, "base", "--rebuild", "--rev", commit)
			killAfter(w, t, randomInstant(rng, baseTime), "base", "--rebuild", "--rev", commit)
			// The next build of the commit finishes, over whatever was left.
			w.MustFerry(t, "base", "--rev", commit)
			w.MustFerry(t, "base", "verify", "--rev", commit)
			os.WriteFile(filepath.Join(w.StoreDir(t), "current"), cur, 0o644)
			w.MustFerry(t, "ferry-gc")
			checkNoLeftovers(w, t, "")
		}
	})

	t.Run("gc", func(t *testing.T) {
		for i := range rounds / 2 {
			// A base nothing references for gc to delete: a new commit's,
			// on a branch of its own so current stays.
			commit := commitOnBranch(w, t, fmt.Sprintf("kill-gc-%d", i))
			cur, _ := os.ReadFile(filepath.Join(w.StoreDir(t), "current"))
			w.MustFerry(t, "base", "--rev", commit)
			// Back to the base the other tests use.
			os.WriteFile(filepath.Join(w.StoreDir(t), "current"), cur, 0o644)
			gcTime := took("ferry-gc", "--dry-run")
			killAfter(w, t, randomInstant(rng, 4*gcTime), "ferry-gc")
			w.MustFerry(t, "ferry-gc")
			if ents, _ := filepath.Glob(filepath.Join(w.StoreDir(t), "bases", commit+"-*")); len(ents) > 0 {
				t.Fatalf("round %d: gc after a killed gc left %v", i, ents)
			}
			checkNoLeftovers(w, t, "")
		}
	})
}

// commitOnBranch commits a file named for branch on a new branch off
// HEAD, checked out nowhere, and returns the commit.
func commitOnBranch(w *agenttest.World, t *testing.T, branch string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "kill.txt")
	if err := os.WriteFile(file, []byte(branch+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(t.TempDir(), "index")
	git := func(args ...string) string {
		t.Helper()
		c := exec.Command("git", args...)
		c.Dir = w.Repo.Dir
		c.Env = append(os.Environ(), "GIT_INDEX_FILE="+index, "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := c.Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	git("read-tree", "HEAD")
	blob := git("hash-object", "-w", file)
	git("update-index", "--add", "--cacheinfo", "100644,"+blob+","+branch+".txt")
	commit := git("commit-tree", git("write-tree"), "-p", "HEAD", "-m", branch)
	git("branch", branch, commit)
	return commit
}

// readyAgent reports whether agent name's record says it is ready.
func readyAgent(w *agenttest.World, t *testing.T, name string) bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(w.StoreDir(t), "agents", name, "agent.json"))
	var r agenttest.AgentJSON
	return err == nil && json.Unmarshal(data, &r) == nil && r.State == "ready"
}

// randomInstant is a time in [0, 1.5 d): most kills land inside the
// command's run, a few after it finished.
func randomInstant(rng *rand.Rand, d time.Duration) time.Duration {
	return time.Duration(rng.Int64N(int64(d) * 3 / 2))
}

// killAfter runs ferry args in the repository and sends it SIGKILL after
// d, unless it ended before; it reports whether the kill landed.
func killAfter(w *agenttest.World, t *testing.T, d time.Duration, args ...string) bool {
	t.Helper()
	bin := "ferry"
	if strings.HasPrefix(args[0], "ferry-") {
		bin, args = args[0], args[1:]
	}
	c := exec.Command(filepath.Join(w.Bin, bin), args...)
	c.Dir = w.Repo.Dir
	c.Env = w.Env(nil)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case <-done:
		return false
	case <-time.After(d):
		c.Process.Signal(syscall.SIGKILL)
		<-done
		return true
	}
}

// checkNoLeftovers checks that git lists no worktree that is not the
// main checkout, a base's checkout, the spare or a ready agent's (its
// record says so), and no branch and no agent directory of name (none
// checked when name is "").
func checkNoLeftovers(w *agenttest.World, t *testing.T, name string) {
	t.Helper()
	dir := w.StoreDir(t)
	out, err := w.Repo.Git("worktree", "list", "--porcelain")
	if err != nil {
		t.Fatal(err)
	}
	agents := map[string]bool{}
	recs, _ := filepath.Glob(filepath.Join(dir, "agents", "*", "agent.json"))
	for _, rec := range recs {
		data, _ := os.ReadFile(rec)
		var r agenttest.AgentJSON
		if jsonErr := json.Unmarshal(data, &r); jsonErr == nil && r.State == "ready" {
			agents[r.Worktree] = true
		}
	}
	for _, block := range strings.Split(strings.TrimSpace(out), "\n\n") {
		path, _, _ := strings.Cut(strings.TrimPrefix(block, "worktree "), "\n")
		switch {
		case path == w.Repo.Dir:
		case strings.HasPrefix(path, filepath.Join(dir, "bases")+"/"):
			id := filepath.Base(filepath.Dir(path))
			if _, err := os.Stat(filepath.Join(dir, "bases", id, "base.json")); err != nil {
				t.Errorf("the checkout of base %s, not ready, is left:\n%s", id, block)
			}
		case path == filepath.Join(dir, "spare", "src"):
		case agents[path]:
		case strings.Contains(block, "\nprunable") && (store.Within(path, w.Worktrees) || store.Within(path, w.Home)):
			// Ferry's (other tests' worktrees, made by hand in their
			// temporary directories, are left registered when those go).
			t.Errorf("a worktree whose directory is gone is left registered:\n%s", block)
		default:
			if name != "" && (filepath.Base(path) == name || strings.Contains(block, "ferry/"+name+"\n")) {
				t.Errorf("a worktree of %s is left:\n%s", name, block)
			}
		}
	}
	if name == "" {
		return
	}
	if w.BranchExists("ferry/" + name) {
		t.Errorf("branch ferry/%s is left", name)
	}
	if _, err := os.Stat(filepath.Join(dir, "agents", name)); err == nil {
		t.Errorf("agent directory %s is left", name)
	}
}

// An agent whose record went with its store (deleted, or lost under it)
// leaves its branch, and perhaps its worktree: a respawn of the name
// adopts nothing by itself and deletes no work. With the worktree there,
// it is refused naming `ferry adopt`, which makes it an agent again; with
// the worktree gone and nothing on the branch, the respawn prunes and
// reuses the branch; with commits of its own on it, it is refused.
func TestRespawnAfterTheStoreLostAnAgent(t *testing.T) {
	w := agenttest.Shared(t)
	lose := func(name string) agenttest.AgentJSON {
		t.Helper()
		a := w.Spawn(t, name)
		if err := os.RemoveAll(filepath.Join(w.StoreDir(t), "agents", name)); err != nil {
			t.Fatal(err)
		}
		return a
	}
	respawn := func(name string) (string, error) {
		_, stderr, err := w.Ferry(w.Repo.Dir, nil, "spawn", name)
		return stderr, err
	}

	// The worktree is there: refused, naming adopt, which brings it back.
	a := lose("lost-kept")
	os.WriteFile(filepath.Join(a.Worktree, "work.txt"), []byte("the agent's work\n"), 0o644)
	if stderr, err := respawn("lost-kept"); err == nil || !strings.Contains(stderr, "ferry adopt") {
		t.Fatalf("respawn over a kept worktree: %v\n%s", err, stderr)
	}
	if !w.BranchExists(a.Branch) {
		t.Fatal("the refused respawn deleted the branch")
	}
	back := w.Adopt(t, a.Worktree)
	if back.State != "ready" || back.Branch != a.Branch {
		t.Fatalf("adopted again: %+v", back)
	}
	if b, err := os.ReadFile(filepath.Join(a.Worktree, "work.txt")); err != nil || string(b) != "the agent's work\n" {
		t.Fatalf("the work after adopting again: %q %v", b, err)
	}
	w.MustFerry(t, "rm", back.Name, "--worktree", "--force")

	// The worktree is gone too, the branch holds nothing: respawned.
	a = lose("lost-gone")
	if err := os.RemoveAll(a.Worktree); err != nil {
		t.Fatal(err)
	}
	if stderr, err := respawn("lost-gone"); err != nil {
		t.Fatalf("respawn with the worktree gone and an empty branch: %v\n%s", err, stderr)
	}
	if !readyAgent(w, t, "lost-gone") {
		t.Fatal("the respawn left no ready agent")
	}
	w.MustFerry(t, "rm", "lost-gone")
	checkNoLeftovers(w, t, "lost-gone")

	// The branch holds a commit of its own: refused, the branch kept.
	a = lose("lost-work")
	agenttest.GitIn(t, a.Worktree, "commit", "-q", "--allow-empty", "-m", "the agent's commit")
	tip, _ := w.Repo.Git("rev-parse", a.Branch)
	if err := os.RemoveAll(a.Worktree); err != nil {
		t.Fatal(err)
	}
	if stderr, err := respawn("lost-work"); err == nil || !strings.Contains(stderr, "holds commits") {
		t.Fatalf("respawn over a branch with work: %v\n%s", err, stderr)
	}
	if now, _ := w.Repo.Git("rev-parse", a.Branch); now != tip {
		t.Fatalf("branch %s moved from %s to %s", a.Branch, tip, now)
	}
}
