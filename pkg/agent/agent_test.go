package agent_test

import (
	"bytes"
	"encoding/json"
	"fmt"
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

func TestMain(m *testing.M) { agenttest.Main(m) }

// A new agent's first build compiles nothing; an edit rebuilds just what
// depends on it; and every build is the agent's own code.
func TestFirstBuildIsFreshAndEditsRebuild(t *testing.T) {
	w := agenttest.Shared(t)
	a := w.Spawn(t, "fresh")
	_, stderr, code := w.Cargo(a.Worktree, nil, "build", "--workspace", "--all-targets")
	if code != 0 {
		t.Fatalf("first build failed:\n%s", stderr)
	}
	if strings.Contains(stderr, "Compiling") {
		t.Fatalf("first build in a new agent compiled something:\n%s", stderr)
	}
	// The binary is run in the agent's sandbox, where its target is, whatever
	// the backend (an overlay's exists only there).
	bin := filepath.Join(w.StoreDir(t), "mnt", "target", "debug", fixture.BinName)
	check := func() {
		t.Helper()
		out, stderr, err := w.Ferry(a.Worktree, nil, "run", "--", bin)
		if err != nil {
			t.Fatalf("ferry run %s: %v\n%s", bin, err, stderr)
		}
		want, err := fixture.ExpectedMarker(a.Worktree)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(out)) != strings.TrimSpace(want) {
			t.Fatalf("agent binary prints\n%s\nwant\n%s", out, want)
		}
	}
	check()
	if err := os.WriteFile(filepath.Join(a.Worktree, fixture.LibPath(fixture.ChainC)),
		append(agenttest.Must(os.ReadFile(filepath.Join(a.Worktree, fixture.LibPath(fixture.ChainC)))), []byte("\n// edited\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = w.Cargo(a.Worktree, nil, "build", "--workspace")
	if code != 0 || !strings.Contains(stderr, "Compiling chain-c") || strings.Contains(stderr, "Compiling diamond") {
		t.Fatalf("edit of chain-c: want chain-c and its dependents rebuilt, nothing else:\n%s", stderr)
	}
	check()
	// ferry run reaches the same sandbox and target: nothing to do.
	out, stderr, err := w.Ferry(a.Worktree, nil, "run", "--", "cargo", "build", "--workspace")
	if err != nil || strings.Contains(stderr, "Compiling") {
		t.Fatalf("ferry run cargo build: %v\n%s%s", err, out, stderr)
	}
}

// Invariant 4: the agent comes from the working directory; an inherited
// CARGO_TARGET_DIR or FERRY_AGENT cannot redirect the build.
func TestShimIgnoresInheritedEnvironment(t *testing.T) {
	w := agenttest.Shared(t)
	a := w.Spawn(t, "envtest")
	w.Spawn(t, "other")
	evil := filepath.Join(t.TempDir(), "evil-target")
	_, stderr, code := w.Cargo(a.Worktree, []string{"CARGO_TARGET_DIR=" + evil, "FERRY_AGENT=other", "CARGO_BUILD_BUILD_DIR=" + evil},
		"build", "-p", fixture.ChainC)
	if code != 0 {
		t.Fatalf("build: %s", stderr)
	}
	if _, err := os.Stat(evil); err == nil {
		t.Fatal("the inherited CARGO_TARGET_DIR received build output")
	}
	// Cargo saw the canonical paths of the sandbox.
	out, _, code := w.Cargo(a.Worktree, nil, "metadata", "--format-version", "1", "--no-deps")
	if code != 0 || !strings.Contains(out, filepath.Join(w.StoreDir(t), "mnt", "src")) {
		t.Fatalf("cargo metadata in an agent does not show the canonical checkout:\n%.400s", out)
	}
}

// Outside agent worktrees the shim is plain cargo, and a worktree nested
// inside an agent's is not that agent.
func TestShimOutsideAgents(t *testing.T) {
	w := agenttest.Shared(t)
	a := w.Spawn(t, "outer")
	nested := filepath.Join(a.Worktree, "nested-wt")
	if _, err := w.Repo.Git("worktree", "add", "--detach", nested, "HEAD"); err != nil {
		t.Fatal(err)
	}
	defer w.Repo.Git("worktree", "remove", "--force", nested)
	for _, dir := range []string{w.Repo.Dir, nested} {
		own := filepath.Join(t.TempDir(), "own-target")
		_, stderr, code := w.Cargo(dir, []string{"CARGO_TARGET_DIR=" + own}, "build", "-p", fixture.ChainC)
		if code != 0 {
			t.Fatalf("%s: %s", dir, stderr)
		}
		if _, err := os.Stat(filepath.Join(own, "debug")); err != nil {
			t.Fatalf("%s: plain cargo did not honour CARGO_TARGET_DIR (%v):\n%s", dir, err, stderr)
		}
	}
	// Cargo's exit status passes through.
	_, _, code := w.Cargo(a.Worktree, nil, "build", "-p", "no-such-package")
	if code != 101 {
		t.Fatalf("exit status %d, want cargo's 101", code)
	}
}

// The nested workspace gets its own target dir under ferry-ws/.
func TestNestedWorkspaceHasItsOwnTarget(t *testing.T) {
	w := agenttest.Shared(t)
	a := w.Spawn(t, "nestedws")
	_, stderr, code := w.Cargo(filepath.Join(a.Worktree, fixture.ToolsDir), nil, "build")
	if code != 0 {
		t.Fatalf("nested workspace build: %s", stderr)
	}
	p := filepath.Join(w.StoreDir(t), "mnt", "target", "ferry-ws", fixture.ToolsDir, "debug", fixture.ToolsBinName)
	if _, stderr, err := w.Ferry(a.Worktree, nil, "run", "--", "test", "-f", p); err != nil {
		t.Fatalf("nested workspace binary not in its own target dir %s: %v\n%s", p, err, stderr)
	}
}

// Spawn refuses unsafe states (invariant 5), changing nothing.
func TestSpawnRefusals(t *testing.T) {
	// No base at all.
	w := agenttest.NewWorld(t, false)
	_, stderr, err := w.Ferry(w.Repo.Dir, nil, "spawn", "a")
	agenttest.ExpectRefusal(t, stderr, err, "no base to spawn from")
	if w.BranchExists("ferry/a") {
		t.Fatal("refused spawn created its branch")
	}
	if _, err := os.Stat(filepath.Join(w.Worktrees)); err == nil {
		if ents, _ := filepath.Glob(filepath.Join(w.Worktrees, "*", "a")); len(ents) > 0 {
			t.Fatal("refused spawn created its worktree")
		}
	}

	s := agenttest.Shared(t)
	first := s.Spawn(t, "taken")
	cases := []struct {
		name string
		args []string
		msg  string
	}{
		{"name taken", []string{"spawn", "taken"}, `agent "taken" already exists`},
		{"branch taken", []string{"spawn", "b2", "--branch", "main"}, `branch "main" already exists`},
		{"inside the store", []string{"spawn", "b3", "--path", filepath.Join(s.StoreDir(t), "inside")}, "would be inside the store"},
		{"inside another agent", []string{"spawn", "b4", "--path", filepath.Join(first.Worktree, "sub")}, `would overlap agent "taken"`},
		{"around another agent", []string{"spawn", "b5", "--path", filepath.Dir(first.Worktree)}, "would overlap"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, err := s.Ferry(s.Repo.Dir, nil, c.args...)
			agenttest.ExpectRefusal(t, stderr, err, c.msg)
			name := c.args[1]
			if name != "taken" && s.BranchExists("ferry/"+name) {
				t.Fatal("refused spawn created a branch")
			}
			if _, err := os.Stat(filepath.Join(s.StoreDir(t), "agents", name)); name != "taken" && err == nil {
				t.Fatal("refused spawn left an agent dir")
			}
		})
	}
	// A base whose checkout or target is missing cannot verify stamping.
	// A target renamed away and back is not the one sealed (the rename
	// moves its change time, and the seal refuses it), so these hide the
	// parts of a base of w's own, warmed by nothing: the shared one stays
	// whole for the tests after this one.
	if err := os.WriteFile(filepath.Join(w.Repo.Dir, "ferry.toml"), []byte("[base]\nwarm = [\"true\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.MustFerry(t, "base")
	for _, part := range []string{"src", "target"} {
		t.Run("base "+part+" missing", func(t *testing.T) {
			bases, _ := filepath.Glob(filepath.Join(w.StoreDir(t), "bases", "*", part))
			if len(bases) != 1 {
				t.Fatalf("bases: %v", bases)
			}
			hidden := bases[0] + ".hidden"
			os.Rename(bases[0], hidden)
			defer os.Rename(hidden, bases[0])
			_, stderr, err := w.Ferry(w.Repo.Dir, nil, "spawn", "nobase-"+part)
			agenttest.ExpectRefusal(t, stderr, err, "stamping cannot be verified")
		})
	}
}

// A spawn killed at any step leaves a record that the next spawn of the
// name, or gc, rolls back: worktree, branch and agent dir.
func TestKilledSpawnRollsBack(t *testing.T) {
	w := agenttest.Shared(t)
	for i, fp := range []string{"spawn/reserved", "spawn/before-worktree", "spawn/after-worktree", "spawn/after-stamp", "spawn/after-fork"} {
		name := fmt.Sprintf("killed%d", i)
		_, _, err := w.Ferry(w.Repo.Dir, []string{"FERRY_FAILPOINT=" + fp}, "spawn", name)
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("%s: spawn was not killed: %v", fp, err)
		}
		rec := filepath.Join(w.StoreDir(t), "agents", name, "agent.json")
		if _, err := os.Stat(rec); err != nil {
			t.Fatalf("%s: no record of the unfinished spawn: %v", fp, err)
		}
		// Using it is refused.
		_, stderr, err := w.Ferry(w.Repo.Dir, nil, "run", name, "--", "true")
		agenttest.ExpectRefusal(t, stderr, err, "is not fully created")

		if i%2 == 0 {
			// gc rolls it back.
			w.MustFerry(t, "ferry-gc")
		} else {
			// The next spawn of the name rolls back and succeeds.
			a := w.Spawn(t, name)
			if a.State != "ready" {
				t.Fatalf("%s: respawn state %q", fp, a.State)
			}
			w.MustFerry(t, "rm", name)
		}
		if w.BranchExists("ferry/" + name) {
			t.Fatalf("%s: branch left behind", fp)
		}
		if _, err := os.Stat(filepath.Dir(rec)); err == nil {
			t.Fatalf("%s: agent dir left behind", fp)
		}
		if out, _ := w.Repo.Git("worktree", "list"); strings.Contains(out, "/"+name+" ") || strings.Contains(out, "/"+name+"\n") {
			t.Fatalf("%s: worktree still registered:\n%s", fp, out)
		}
	}
}

// rm refuses while processes run, with another agent nested inside, and
// without --force on uncommitted work or unreachable commits.
func TestRmRefusals(t *testing.T) {
	w := agenttest.Shared(t)
	a := w.Spawn(t, "rmme")

	// Busy: a process runs for the agent (it has started: the session
	// holds busy.lock while it still enters the sandbox).
	started := filepath.Join(t.TempDir(), "started")
	c := exec.Command(filepath.Join(w.Bin, "ferry"), "run", "rmme", "--", "sh", "-c", "touch "+started+"; exec sleep 30")
	c.Dir, c.Env = w.Repo.Dir, w.Env(nil)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _, _ := w.Ferry(w.Repo.Dir, nil, "list", "--json")
		if _, err := os.Stat(started); err == nil && strings.Contains(out, `"busy": true`) {
			break
		}
		if time.Now().After(deadline) {
			c.Process.Kill()
			t.Fatal("agent never showed busy")
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, stderr, err := w.Ferry(w.Repo.Dir, nil, "rm", "--force", "rmme")
	agenttest.ExpectRefusal(t, stderr, err, "processes still run")
	c.Process.Signal(syscall.SIGTERM)
	c.Wait()

	// Dirty worktree.
	os.WriteFile(filepath.Join(a.Worktree, "notes.txt"), []byte("work"), 0o644)
	_, stderr, err = w.Ferry(w.Repo.Dir, nil, "rm", "rmme")
	agenttest.ExpectRefusal(t, stderr, err, "uncommitted changes")
	os.Remove(filepath.Join(a.Worktree, "notes.txt"))

	// Commits no ref reaches (a detached HEAD moved on).
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = a.Worktree
		cmd.Env = fixture.GitEnv(os.Environ())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("checkout", "-q", "--detach")
	git("commit", "-q", "--allow-empty", "-m", "lost work")
	_, stderr, err = w.Ferry(w.Repo.Dir, nil, "rm", "rmme")
	agenttest.ExpectRefusal(t, stderr, err, "commit(s) that no branch, tag or remote reaches")
	if _, err := os.Stat(a.Worktree); err != nil {
		t.Fatal("a refused rm removed the worktree")
	}

	// Another agent nested inside (only a damaged store can hold one, since
	// spawn refuses it): refused even with --force.
	b := w.Spawn(t, "nestedrec")
	recPath := filepath.Join(w.StoreDir(t), "agents", "nestedrec", "agent.json")
	orig := agenttest.Must(os.ReadFile(recPath))
	os.WriteFile(recPath, bytes.Replace(orig, []byte(b.Worktree), []byte(filepath.Join(a.Worktree, "inner")), 1), 0o644)
	_, stderr, err = w.Ferry(w.Repo.Dir, nil, "rm", "--force", "rmme")
	agenttest.ExpectRefusal(t, stderr, err, "is nested inside")
	os.WriteFile(recPath, orig, 0o644)
	w.MustFerry(t, "rm", "nestedrec")

	// --force keeps the unreachable commit under refs/ferry/orphaned/ and
	// deletes the branch, which still points at the start.
	out := w.MustFerry(t, "rm", "--force", "--json", "rmme")
	var rm struct {
		OrphanRef     string `json:"orphan_ref"`
		BranchDeleted bool   `json:"branch_deleted"`
	}
	json.Unmarshal([]byte(out), &rm)
	if !strings.HasPrefix(rm.OrphanRef, "refs/ferry/orphaned/rmme-") || !rm.BranchDeleted {
		t.Fatalf("rm --force: %s", out)
	}
	if msg, err := w.Repo.Git("log", "-1", "--format=%s", rm.OrphanRef); err != nil || strings.TrimSpace(msg) != "lost work" {
		t.Fatalf("orphan ref does not keep the commit: %q %v", msg, err)
	}
	if _, err := os.Stat(a.Worktree); err == nil {
		t.Fatal("worktree still there")
	}

	// A branch that moved on is kept, with its commit count.
	k := w.Spawn(t, "keeper")
	cmd := exec.Command("git", "commit", "-q", "--allow-empty", "-m", "kept work")
	cmd.Dir, cmd.Env = k.Worktree, fixture.GitEnv(os.Environ())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	out = w.MustFerry(t, "rm", "keeper")
	if !strings.Contains(out, "kept branch ferry/keeper: it carries 1 commit(s)") || !w.BranchExists("ferry/keeper") {
		t.Fatalf("rm of a moved branch: %s", out)
	}
}

// ferry rm run from inside the agent's own worktree (as an agent tool's
// hook or a person in that shell does) finishes the removal: git goes on
// from another worktree once that one is gone, and the branch is deleted.
func TestRmFromInsideItsWorktree(t *testing.T) {
	w := agenttest.Shared(t)
	a := w.Spawn(t, "rmself")
	out, stderr, err := w.Ferry(filepath.Join(a.Worktree, "crates"), nil, "rm", "--json", "rmself")
	if err != nil {
		t.Fatalf("rm from inside: %v\n%s", err, stderr)
	}
	var rm struct {
		BranchDeleted bool `json:"branch_deleted"`
	}
	if err := json.Unmarshal([]byte(out), &rm); err != nil || !rm.BranchDeleted {
		t.Fatalf("rm from inside: %s (%v)", out, err)
	}
	if w.BranchExists("ferry/rmself") {
		t.Error("branch ferry/rmself survived")
	}
	if _, err := os.Stat(a.Worktree); err == nil {
		t.Error("worktree still there")
	}
	if list := w.MustFerry(t, "list"); strings.Contains(list, "rmself") {
		t.Errorf("agent still listed:\n%s", list)
	}
}

// gc deletes bases neither current nor referenced, keeps referenced ones,
// and never prunes the user's own worktrees.
func TestGC(t *testing.T) {
	w := agenttest.NewWorld(t, true)
	a := w.Spawn(t, "holder")
	// A new commit and its base: the first base is now referenced only by
	// the agent.
	w.Repo.Write("README.md", "changed\n")
	if _, err := w.Repo.Commit("second"); err != nil {
		t.Fatal(err)
	}
	w.MustFerry(t, "base")
	// The user's own worktree whose directory is temporarily gone.
	mine := filepath.Join(t.TempDir(), "mine")
	w.Repo.Git("worktree", "add", "--detach", mine, "HEAD")
	os.Rename(mine, mine+".away")

	out := w.MustFerry(t, "ferry-gc", "--json")
	var res struct {
		Bases []string `json:"bases"`
		Kept  []string `json:"kept"`
	}
	json.Unmarshal([]byte(out), &res)
	if len(res.Bases) != 0 || len(res.Kept) != 2 {
		t.Fatalf("gc with an agent on the old base: %s", out)
	}
	w.MustFerry(t, "rm", "holder")
	out = w.MustFerry(t, "ferry-gc", "--dry-run", "--json")
	json.Unmarshal([]byte(out), &res)
	if len(res.Bases) != 1 || res.Bases[0] != a.Base {
		t.Fatalf("dry run: %s", out)
	}
	if _, err := os.Stat(filepath.Join(w.StoreDir(t), "bases", a.Base, "base.json")); err != nil {
		t.Fatal("dry run deleted the base")
	}
	w.MustFerry(t, "ferry-gc")
	if _, err := os.Stat(filepath.Join(w.StoreDir(t), "bases", a.Base)); err == nil {
		t.Fatal("unreferenced base survived gc")
	}
	if w.WorktreeRegistered(filepath.Join(w.StoreDir(t), "bases", a.Base, "src")) {
		t.Fatal("gc left the base checkout registered")
	}
	if !w.WorktreeRegistered(mine) {
		t.Fatal("gc pruned the user's own worktree")
	}
}
