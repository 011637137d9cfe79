package agent_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.Init()
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

// world is a fixture repository with a built base, shared by the tests of
// this package (each uses its own agent names).
type world struct {
	repo  *fixture.Repo
	bin   string
	home  string // FERRY_HOME
	wts   string // FERRY_WORKTREES
	store string // the repository's store dir
}

var (
	sharedOnce  sync.Once
	sharedWorld *world
	sharedErr   error
)

const warmToml = "[base]\nwarm = [\"cargo build --workspace --all-targets\"]\n"

// newWorld is a world of the test's own, with its base when withBase. Its
// repository leaves out the registry crates (fixture.Options.NoRegistry):
// they are most of a cold build's work, and what these tests check does not
// depend on where crates come from. Tests of relocation, whose plans judge
// registry crates too, take newRegistryWorld; the shared world has them.
func newWorld(t *testing.T, withBase bool) *world {
	t.Helper()
	return newWorldOf(t, fixture.Options{NoRegistry: true}, withBase)
}

// newRegistryWorld is newWorld with the registry crates.
func newRegistryWorld(t *testing.T, withBase bool) *world {
	t.Helper()
	return newWorldOf(t, fixture.Options{}, withBase)
}

func newWorldOf(t *testing.T, opts fixture.Options, withBase bool) *world {
	t.Helper()
	w := &world{repo: testenv.Repo(t, opts), bin: testenv.Binaries(t)}
	root := t.TempDir()
	w.home, w.wts = filepath.Join(root, "home"), filepath.Join(root, "worktrees")
	if err := os.WriteFile(filepath.Join(w.repo.Dir, "ferry.toml"), []byte(warmToml), 0o644); err != nil {
		t.Fatal(err)
	}
	if withBase {
		w.mustFerry(t, "base")
	}
	return w
}

func shared(t *testing.T) *world {
	t.Helper()
	sharedOnce.Do(func() {
		// Built in a directory of its own so it outlives the first test.
		dir, err := os.MkdirTemp("", "ferry-agent-test-")
		if err != nil {
			sharedErr = err
			return
		}
		testenv.RemoveAtExit(dir)
		fixture.RequireTools(t)
		w := &world{bin: testenv.Binaries(t), home: filepath.Join(dir, "home"), wts: filepath.Join(dir, "worktrees")}
		if w.repo, err = fixture.Generate(filepath.Join(dir, "repo"), fixture.Options{}); err != nil {
			sharedErr = err
			return
		}
		os.WriteFile(filepath.Join(w.repo.Dir, "ferry.toml"), []byte(warmToml), 0o644)
		if _, stderr, err := w.ferry(w.repo.Dir, nil, "base"); err != nil {
			sharedErr = fmt.Errorf("ferry base: %v\n%s", err, stderr)
			return
		}
		sharedWorld = w
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedWorld
}

func (w *world) env(extra []string) []string {
	// Overlay namespaces end with their last session unless a test asks
	// for a holder (overlay_hold.go in package fork).
	return append(os.Environ(), append([]string{"FERRY_HOME=" + w.home, "FERRY_WORKTREES=" + w.wts, knobs.OverlayHold + "=0"}, extra...)...)
}

// ferry runs a Ferry binary (ferry, or ferry-<stage> when args[0] names one
// with a leading "ferry-") in dir.
func (w *world) ferry(dir string, extra []string, args ...string) (string, string, error) {
	bin := "ferry"
	if strings.HasPrefix(args[0], "ferry-") {
		bin, args = args[0], args[1:]
	}
	c := exec.Command(filepath.Join(w.bin, bin), args...)
	c.Dir = dir
	c.Env = w.env(extra)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	return stdout.String(), stderr.String(), err
}

func (w *world) mustFerry(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := w.ferry(w.repo.Dir, nil, args...)
	if err != nil {
		t.Fatalf("ferry %s: %v\n%s%s", strings.Join(args, " "), err, stderr, out)
	}
	return out
}

type agentJSON struct {
	Name        string `json:"name"`
	State       string `json:"state"`
	Worktree    string `json:"worktree"`
	Branch      string `json:"branch"`
	StartCommit string `json:"start_commit"`
	Base        string `json:"base"`
}

func (w *world) spawn(t *testing.T, name string, args ...string) agentJSON {
	t.Helper()
	out := w.mustFerry(t, append([]string{"spawn", name, "--json"}, args...)...)
	var a agentJSON
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatalf("spawn output %q: %v", out, err)
	}
	return a
}

func (w *world) storeDir(t *testing.T) string {
	t.Helper()
	ents, err := filepath.Glob(filepath.Join(w.home, "repo-*"))
	if err != nil || len(ents) != 1 {
		t.Fatalf("store dirs %v (%v)", ents, err)
	}
	return ents[0]
}

// cargo runs cargo through the shim (Ferry's bin dir first on PATH) in dir.
func (w *world) cargo(dir string, extra []string, args ...string) (string, string, int) {
	c := exec.Command("cargo", args...)
	c.Dir = dir
	env := w.env(extra)
	for i, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			env[i] = "PATH=" + filepath.Join(w.home, "bin") + ":" + kv[5:]
		}
	}
	c.Env = env
	c.Path = filepath.Join(w.home, "bin", "cargo")
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return stdout.String(), stderr.String(), code
}

func (w *world) branchExists(name string) bool {
	_, err := w.repo.Git("rev-parse", "--verify", "--quiet", "refs/heads/"+name)
	return err == nil
}

func (w *world) worktreeRegistered(path string) bool {
	out, _ := w.repo.Git("worktree", "list", "--porcelain")
	return strings.Contains(out, "worktree "+path+"\n")
}

// A new agent's first build compiles nothing; an edit rebuilds just what
// depends on it; and every build is the agent's own code.
func TestFirstBuildIsFreshAndEditsRebuild(t *testing.T) {
	w := shared(t)
	a := w.spawn(t, "fresh")
	_, stderr, code := w.cargo(a.Worktree, nil, "build", "--workspace", "--all-targets")
	if code != 0 {
		t.Fatalf("first build failed:\n%s", stderr)
	}
	if strings.Contains(stderr, "Compiling") {
		t.Fatalf("first build in a new agent compiled something:\n%s", stderr)
	}
	// The binary is run in the agent's sandbox, where its target is, whatever
	// the backend (an overlay's exists only there).
	bin := filepath.Join(w.storeDir(t), "mnt", "target", "debug", fixture.BinName)
	check := func() {
		t.Helper()
		out, stderr, err := w.ferry(a.Worktree, nil, "run", "--", bin)
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
		append(must(os.ReadFile(filepath.Join(a.Worktree, fixture.LibPath(fixture.ChainC)))), []byte("\n// edited\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = w.cargo(a.Worktree, nil, "build", "--workspace")
	if code != 0 || !strings.Contains(stderr, "Compiling chain-c") || strings.Contains(stderr, "Compiling diamond") {
		t.Fatalf("edit of chain-c: want chain-c and its dependents rebuilt, nothing else:\n%s", stderr)
	}
	check()
	// ferry run reaches the same sandbox and target: nothing to do.
	out, stderr, err := w.ferry(a.Worktree, nil, "run", "--", "cargo", "build", "--workspace")
	if err != nil || strings.Contains(stderr, "Compiling") {
		t.Fatalf("ferry run cargo build: %v\n%s%s", err, out, stderr)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// Invariant 4: the agent comes from the working directory; an inherited
// CARGO_TARGET_DIR or FERRY_AGENT cannot redirect the build.
func TestShimIgnoresInheritedEnvironment(t *testing.T) {
	w := shared(t)
	a := w.spawn(t, "envtest")
	w.spawn(t, "other")
	evil := filepath.Join(t.TempDir(), "evil-target")
	_, stderr, code := w.cargo(a.Worktree, []string{"CARGO_TARGET_DIR=" + evil, "FERRY_AGENT=other", "CARGO_BUILD_BUILD_DIR=" + evil},
		"build", "-p", fixture.ChainC)
	if code != 0 {
		t.Fatalf("build: %s", stderr)
	}
	if _, err := os.Stat(evil); err == nil {
		t.Fatal("the inherited CARGO_TARGET_DIR received build output")
	}
	// Cargo saw the canonical paths of the sandbox.
	out, _, code := w.cargo(a.Worktree, nil, "metadata", "--format-version", "1", "--no-deps")
	if code != 0 || !strings.Contains(out, filepath.Join(w.storeDir(t), "mnt", "src")) {
		t.Fatalf("cargo metadata in an agent does not show the canonical checkout:\n%.400s", out)
	}
}

// Outside agent worktrees the shim is plain cargo, and a worktree nested
// inside an agent's is not that agent.
func TestShimOutsideAgents(t *testing.T) {
	w := shared(t)
	a := w.spawn(t, "outer")
	nested := filepath.Join(a.Worktree, "nested-wt")
	if _, err := w.repo.Git("worktree", "add", "--detach", nested, "HEAD"); err != nil {
		t.Fatal(err)
	}
	defer w.repo.Git("worktree", "remove", "--force", nested)
	for _, dir := range []string{w.repo.Dir, nested} {
		own := filepath.Join(t.TempDir(), "own-target")
		_, stderr, code := w.cargo(dir, []string{"CARGO_TARGET_DIR=" + own}, "build", "-p", fixture.ChainC)
		if code != 0 {
			t.Fatalf("%s: %s", dir, stderr)
		}
		if _, err := os.Stat(filepath.Join(own, "debug")); err != nil {
			t.Fatalf("%s: plain cargo did not honour CARGO_TARGET_DIR (%v):\n%s", dir, err, stderr)
		}
	}
	// Cargo's exit status passes through.
	_, _, code := w.cargo(a.Worktree, nil, "build", "-p", "no-such-package")
	if code != 101 {
		t.Fatalf("exit status %d, want cargo's 101", code)
	}
}

// The nested workspace gets its own target dir under ferry-ws/.
func TestNestedWorkspaceHasItsOwnTarget(t *testing.T) {
	w := shared(t)
	a := w.spawn(t, "nestedws")
	_, stderr, code := w.cargo(filepath.Join(a.Worktree, fixture.ToolsDir), nil, "build")
	if code != 0 {
		t.Fatalf("nested workspace build: %s", stderr)
	}
	p := filepath.Join(w.storeDir(t), "mnt", "target", "ferry-ws", fixture.ToolsDir, "debug", fixture.ToolsBinName)
	if _, stderr, err := w.ferry(a.Worktree, nil, "run", "--", "test", "-f", p); err != nil {
		t.Fatalf("nested workspace binary not in its own target dir %s: %v\n%s", p, err, stderr)
	}
}

func expectRefusal(t *testing.T, stderr string, err error, msg string) {
	t.Helper()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 6 {
		t.Fatalf("want a refusal (exit 6), got %v:\n%s", err, stderr)
	}
	if !strings.Contains(stderr, msg) || !strings.Contains(stderr, "hint:") {
		t.Fatalf("want %q with a hint, got:\n%s", msg, stderr)
	}
}

// Spawn refuses unsafe states (invariant 5), changing nothing.
func TestSpawnRefusals(t *testing.T) {
	// No base at all.
	w := newWorld(t, false)
	_, stderr, err := w.ferry(w.repo.Dir, nil, "spawn", "a")
	expectRefusal(t, stderr, err, "no base to spawn from")
	if w.branchExists("ferry/a") {
		t.Fatal("refused spawn created its branch")
	}
	if _, err := os.Stat(filepath.Join(w.wts)); err == nil {
		if ents, _ := filepath.Glob(filepath.Join(w.wts, "*", "a")); len(ents) > 0 {
			t.Fatal("refused spawn created its worktree")
		}
	}

	s := shared(t)
	first := s.spawn(t, "taken")
	cases := []struct {
		name string
		args []string
		msg  string
	}{
		{"name taken", []string{"spawn", "taken"}, `agent "taken" already exists`},
		{"branch taken", []string{"spawn", "b2", "--branch", "main"}, `branch "main" already exists`},
		{"inside the store", []string{"spawn", "b3", "--path", filepath.Join(s.storeDir(t), "inside")}, "would be inside the store"},
		{"inside another agent", []string{"spawn", "b4", "--path", filepath.Join(first.Worktree, "sub")}, `would overlap agent "taken"`},
		{"around another agent", []string{"spawn", "b5", "--path", filepath.Dir(first.Worktree)}, "would overlap"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, err := s.ferry(s.repo.Dir, nil, c.args...)
			expectRefusal(t, stderr, err, c.msg)
			name := c.args[1]
			if name != "taken" && s.branchExists("ferry/"+name) {
				t.Fatal("refused spawn created a branch")
			}
			if _, err := os.Stat(filepath.Join(s.storeDir(t), "agents", name)); name != "taken" && err == nil {
				t.Fatal("refused spawn left an agent dir")
			}
		})
	}
	// A base whose checkout or target is missing cannot verify stamping.
	// A target renamed away and back is not the one sealed (the rename
	// moves its change time, and the seal refuses it), so these hide the
	// parts of a base of w's own, warmed by nothing: the shared one stays
	// whole for the tests after this one.
	if err := os.WriteFile(filepath.Join(w.repo.Dir, "ferry.toml"), []byte("[base]\nwarm = [\"true\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.mustFerry(t, "base")
	for _, part := range []string{"src", "target"} {
		t.Run("base "+part+" missing", func(t *testing.T) {
			bases, _ := filepath.Glob(filepath.Join(w.storeDir(t), "bases", "*", part))
			if len(bases) != 1 {
				t.Fatalf("bases: %v", bases)
			}
			hidden := bases[0] + ".hidden"
			os.Rename(bases[0], hidden)
			defer os.Rename(hidden, bases[0])
			_, stderr, err := w.ferry(w.repo.Dir, nil, "spawn", "nobase-"+part)
			expectRefusal(t, stderr, err, "stamping cannot be verified")
		})
	}
}

// A spawn killed at any step leaves a record that the next spawn of the
// name, or gc, rolls back: worktree, branch and agent dir.
func TestKilledSpawnRollsBack(t *testing.T) {
	w := shared(t)
	for i, fp := range []string{"spawn/reserved", "spawn/before-worktree", "spawn/after-worktree", "spawn/after-stamp", "spawn/after-fork"} {
		name := fmt.Sprintf("killed%d", i)
		_, _, err := w.ferry(w.repo.Dir, []string{"FERRY_FAILPOINT=" + fp}, "spawn", name)
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("%s: spawn was not killed: %v", fp, err)
		}
		rec := filepath.Join(w.storeDir(t), "agents", name, "agent.json")
		if _, err := os.Stat(rec); err != nil {
			t.Fatalf("%s: no record of the unfinished spawn: %v", fp, err)
		}
		// Using it is refused.
		_, stderr, err := w.ferry(w.repo.Dir, nil, "run", name, "--", "true")
		expectRefusal(t, stderr, err, "is not fully created")

		if i%2 == 0 {
			// gc rolls it back.
			w.mustFerry(t, "ferry-gc")
		} else {
			// The next spawn of the name rolls back and succeeds.
			a := w.spawn(t, name)
			if a.State != "ready" {
				t.Fatalf("%s: respawn state %q", fp, a.State)
			}
			w.mustFerry(t, "rm", name)
		}
		if w.branchExists("ferry/" + name) {
			t.Fatalf("%s: branch left behind", fp)
		}
		if _, err := os.Stat(filepath.Dir(rec)); err == nil {
			t.Fatalf("%s: agent dir left behind", fp)
		}
		if out, _ := w.repo.Git("worktree", "list"); strings.Contains(out, "/"+name+" ") || strings.Contains(out, "/"+name+"\n") {
			t.Fatalf("%s: worktree still registered:\n%s", fp, out)
		}
	}
}

// rm refuses while processes run, with another agent nested inside, and
// without --force on uncommitted work or unreachable commits.
func TestRmRefusals(t *testing.T) {
	w := shared(t)
	a := w.spawn(t, "rmme")

	// Busy: a process runs for the agent (it has started: the session
	// holds busy.lock while it still enters the sandbox).
	started := filepath.Join(t.TempDir(), "started")
	c := exec.Command(filepath.Join(w.bin, "ferry"), "run", "rmme", "--", "sh", "-c", "touch "+started+"; exec sleep 30")
	c.Dir, c.Env = w.repo.Dir, w.env(nil)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _, _ := w.ferry(w.repo.Dir, nil, "list", "--json")
		if _, err := os.Stat(started); err == nil && strings.Contains(out, `"busy": true`) {
			break
		}
		if time.Now().After(deadline) {
			c.Process.Kill()
			t.Fatal("agent never showed busy")
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, stderr, err := w.ferry(w.repo.Dir, nil, "rm", "--force", "rmme")
	expectRefusal(t, stderr, err, "processes still run")
	c.Process.Signal(syscall.SIGTERM)
	c.Wait()

	// Dirty worktree.
	os.WriteFile(filepath.Join(a.Worktree, "notes.txt"), []byte("work"), 0o644)
	_, stderr, err = w.ferry(w.repo.Dir, nil, "rm", "rmme")
	expectRefusal(t, stderr, err, "uncommitted changes")
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
	_, stderr, err = w.ferry(w.repo.Dir, nil, "rm", "rmme")
	expectRefusal(t, stderr, err, "commit(s) that no branch, tag or remote reaches")
	if _, err := os.Stat(a.Worktree); err != nil {
		t.Fatal("a refused rm removed the worktree")
	}

	// Another agent nested inside (only a damaged store can hold one, since
	// spawn refuses it): refused even with --force.
	b := w.spawn(t, "nestedrec")
	recPath := filepath.Join(w.storeDir(t), "agents", "nestedrec", "agent.json")
	orig := must(os.ReadFile(recPath))
	os.WriteFile(recPath, bytes.Replace(orig, []byte(b.Worktree), []byte(filepath.Join(a.Worktree, "inner")), 1), 0o644)
	_, stderr, err = w.ferry(w.repo.Dir, nil, "rm", "--force", "rmme")
	expectRefusal(t, stderr, err, "is nested inside")
	os.WriteFile(recPath, orig, 0o644)
	w.mustFerry(t, "rm", "nestedrec")

	// --force keeps the unreachable commit under refs/ferry/orphaned/ and
	// deletes the branch, which still points at the start.
	out := w.mustFerry(t, "rm", "--force", "--json", "rmme")
	var rm struct {
		OrphanRef     string `json:"orphan_ref"`
		BranchDeleted bool   `json:"branch_deleted"`
	}
	json.Unmarshal([]byte(out), &rm)
	if !strings.HasPrefix(rm.OrphanRef, "refs/ferry/orphaned/rmme-") || !rm.BranchDeleted {
		t.Fatalf("rm --force: %s", out)
	}
	if msg, err := w.repo.Git("log", "-1", "--format=%s", rm.OrphanRef); err != nil || strings.TrimSpace(msg) != "lost work" {
		t.Fatalf("orphan ref does not keep the commit: %q %v", msg, err)
	}
	if _, err := os.Stat(a.Worktree); err == nil {
		t.Fatal("worktree still there")
	}

	// A branch that moved on is kept, with its commit count.
	k := w.spawn(t, "keeper")
	cmd := exec.Command("git", "commit", "-q", "--allow-empty", "-m", "kept work")
	cmd.Dir, cmd.Env = k.Worktree, fixture.GitEnv(os.Environ())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	out = w.mustFerry(t, "rm", "keeper")
	if !strings.Contains(out, "kept branch ferry/keeper: it carries 1 commit(s)") || !w.branchExists("ferry/keeper") {
		t.Fatalf("rm of a moved branch: %s", out)
	}
}

// ferry rm run from inside the agent's own worktree (as an agent tool's
// hook or a person in that shell does) finishes the removal: git goes on
// from another worktree once that one is gone, and the branch is deleted.
func TestRmFromInsideItsWorktree(t *testing.T) {
	w := shared(t)
	a := w.spawn(t, "rmself")
	out, stderr, err := w.ferry(filepath.Join(a.Worktree, "crates"), nil, "rm", "--json", "rmself")
	if err != nil {
		t.Fatalf("rm from inside: %v\n%s", err, stderr)
	}
	var rm struct {
		BranchDeleted bool `json:"branch_deleted"`
	}
	if err := json.Unmarshal([]byte(out), &rm); err != nil || !rm.BranchDeleted {
		t.Fatalf("rm from inside: %s (%v)", out, err)
	}
	if w.branchExists("ferry/rmself") {
		t.Error("branch ferry/rmself survived")
	}
	if _, err := os.Stat(a.Worktree); err == nil {
		t.Error("worktree still there")
	}
	if list := w.mustFerry(t, "list"); strings.Contains(list, "rmself") {
		t.Errorf("agent still listed:\n%s", list)
	}
}

// gc deletes bases neither current nor referenced, keeps referenced ones,
// and never prunes the user's own worktrees.
func TestGC(t *testing.T) {
	w := newWorld(t, true)
	a := w.spawn(t, "holder")
	// A new commit and its base: the first base is now referenced only by
	// the agent.
	w.repo.Write("README.md", "changed\n")
	if _, err := w.repo.Commit("second"); err != nil {
		t.Fatal(err)
	}
	w.mustFerry(t, "base")
	// The user's own worktree whose directory is temporarily gone.
	mine := filepath.Join(t.TempDir(), "mine")
	w.repo.Git("worktree", "add", "--detach", mine, "HEAD")
	os.Rename(mine, mine+".away")

	out := w.mustFerry(t, "ferry-gc", "--json")
	var res struct {
		Bases []string `json:"bases"`
		Kept  []string `json:"kept"`
	}
	json.Unmarshal([]byte(out), &res)
	if len(res.Bases) != 0 || len(res.Kept) != 2 {
		t.Fatalf("gc with an agent on the old base: %s", out)
	}
	w.mustFerry(t, "rm", "holder")
	out = w.mustFerry(t, "ferry-gc", "--dry-run", "--json")
	json.Unmarshal([]byte(out), &res)
	if len(res.Bases) != 1 || res.Bases[0] != a.Base {
		t.Fatalf("dry run: %s", out)
	}
	if _, err := os.Stat(filepath.Join(w.storeDir(t), "bases", a.Base, "base.json")); err != nil {
		t.Fatal("dry run deleted the base")
	}
	w.mustFerry(t, "ferry-gc")
	if _, err := os.Stat(filepath.Join(w.storeDir(t), "bases", a.Base)); err == nil {
		t.Fatal("unreferenced base survived gc")
	}
	if w.worktreeRegistered(filepath.Join(w.storeDir(t), "bases", a.Base, "src")) {
		t.Fatal("gc left the base checkout registered")
	}
	if !w.worktreeRegistered(mine) {
		t.Fatal("gc pruned the user's own worktree")
	}
}
