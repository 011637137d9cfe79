package agent_test

import (
	"bytes"
	"context"
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
	"github.com/ferrydev/ferry/internal/testenv"
)

// smallWarm warms only one small crate: these tests need a base, not a
// build worth reusing.
const smallWarm = "[base]\nwarm = [\"cargo build -p " + fixture.ChainC + "\"]\n"

// newWorldIn is newWorld with fixture options opts and the store parent at
// home (a fresh directory when empty); it builds a base with smallWarm.
func newWorldIn(t *testing.T, opts fixture.Options, home string) *agenttest.World {
	t.Helper()
	w := &agenttest.World{Repo: testenv.Repo(t, opts), Bin: testenv.Binaries(t)}
	root := t.TempDir()
	w.Home, w.Worktrees = filepath.Join(root, "home"), filepath.Join(root, "worktrees")
	if home != "" {
		w.Home = home
	}
	if err := os.WriteFile(filepath.Join(w.Repo.Dir, "ferry.toml"), []byte(smallWarm), 0o644); err != nil {
		t.Fatal(err)
	}
	w.MustFerry(t, "base")
	return w
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// In a repository that does not commit Cargo.lock, spawn places the base's;
// rm does not count it as the agent's work while it is unchanged, and names
// it as a dependency change once the agent changed it.
func TestRmAndThePlacedLockfile(t *testing.T) {
	w := newWorldIn(t, fixture.Options{NoLockfile: true}, "")
	a := w.Spawn(t, "untouched")
	if _, err := os.Stat(filepath.Join(a.Worktree, fixture.Lockfile)); err != nil {
		t.Fatalf("spawn placed no Cargo.lock: %v", err)
	}
	w.MustFerry(t, "rm", "untouched")
	if _, err := os.Stat(a.Worktree); err == nil {
		t.Fatal("rm left the worktree")
	}

	b := w.Spawn(t, "deps")
	lock := filepath.Join(b.Worktree, fixture.Lockfile)
	data, err := os.ReadFile(lock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lock, append(data, []byte("\n# the agent's edit\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := w.Ferry(w.Repo.Dir, nil, "rm", "deps")
	agenttest.ExpectRefusal(t, stderr, err, "Cargo.lock differs from the one spawn placed (the agent changed its dependencies)")
	if !strings.Contains(stderr, "uncommitted changes (Cargo.lock)") {
		t.Fatalf("the refusal does not list Cargo.lock among the changes:\n%s", stderr)
	}
	// Restored byte for byte, it is Ferry's file again.
	if err := os.WriteFile(lock, data, 0o644); err != nil {
		t.Fatal(err)
	}
	w.MustFerry(t, "rm", "deps")
}

// A wrapper earlier on PATH than the real cargo that runs the shim again
// makes a call in an agent fail at once with the shim's error (through the
// workspace probe of a nested directory, and through the sandbox), not loop.
func TestShimRecursionInAgent(t *testing.T) {
	w := agenttest.Shared(t)
	a := w.Spawn(t, "wrapped")
	wrap := t.TempDir()
	shim := filepath.Join(w.Bin, "ferry-shim")
	// The wrapper gives up after 200 runs in all, so a shim that loops fails
	// the test quickly instead of spinning (or, through the probe, forking).
	count := filepath.Join(t.TempDir(), "runs")
	body := "#!/bin/sh\n" +
		`echo >>` + count + `; if [ $(wc -l <` + count + `) -gt 200 ]; then echo "wrapper ran 200 times" >&2; exit 99; fi` +
		"\nexec " + shim + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(wrap, "cargo"), []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{a.Worktree, filepath.Join(a.Worktree, fixture.CrateDir(fixture.ChainC))} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		c := exec.CommandContext(ctx, filepath.Join(w.Home, "bin", "cargo"), "build", "-p", fixture.ChainC)
		c.Dir = dir
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
		c.Env = w.Env([]string{"PATH=" + filepath.Join(w.Home, "bin") + ":" + wrap + ":" + os.Getenv("PATH")})
		var stderr bytes.Buffer
		c.Stderr = &stderr
		err := c.Run()
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Fatalf("%s: cargo through a wrapper that runs the shim did not end within a minute", dir)
		}
		if exitCode(err) != 3 || !strings.Contains(stderr.String(), "Ferry's shim re-entered itself") ||
			!strings.Contains(stderr.String(), "PATH entry "+wrap) {
			t.Fatalf("%s: want exit 3 naming %s, got %v:\n%s", dir, wrap, err, stderr.String())
		}
		t.Logf("%s:\n%s", dir, stderr.String())
	}
	w.MustFerry(t, "rm", "wrapped")
}

// A spawn whose fork runs out of space says so (exit 8, the filesystem's
// mount point and free space) and rolls back. When the rollback cannot
// finish either (git cannot lock packed-refs), the error says so, the
// record stays, and gc finishes the rollback.
func TestSpawnOutOfSpace(t *testing.T) {
	home := testenv.SmallFS(t, "64m")
	w := newWorldIn(t, fixture.Options{}, home)
	bases, _ := filepath.Glob(filepath.Join(w.StoreDir(t), "bases", "*", "target"))
	if len(bases) != 1 {
		t.Fatalf("bases: %v", bases)
	}
	size := int64(0)
	filepath.Walk(bases[0], func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			size += fi.Size()
		}
		return nil
	})
	if size < 256<<10 {
		t.Fatalf("base target of %d bytes is too small to run out of space copying it", size)
	}
	filler := testenv.Fill(t, home, size/2)

	check := func(name string, stderr string, err error) {
		t.Helper()
		if exitCode(err) != 8 {
			t.Fatalf("spawn %s on a full store: exit %d, want 8:\n%s", name, exitCode(err), stderr)
		}
		for _, want := range []string{"caused by: no space left on " + home + ": ", " free of 64 MiB", "hint: free space on " + home} {
			if !strings.Contains(stderr, want) {
				t.Fatalf("spawn %s: stderr lacks %q:\n%s", name, want, stderr)
			}
		}
	}
	gone := func(name string) {
		t.Helper()
		if w.BranchExists("ferry/" + name) {
			t.Fatalf("%s: branch left behind", name)
		}
		if _, err := os.Stat(filepath.Join(w.StoreDir(t), "agents", name)); err == nil {
			t.Fatalf("%s: agent dir left behind", name)
		}
		if out, _ := w.Repo.Git("worktree", "list"); strings.Contains(out, "/"+name+" ") {
			t.Fatalf("%s: worktree still registered:\n%s", name, out)
		}
	}

	// No free-space floor: the subject is a fork that meets a full disk
	// (TestSpawnRefusedUnderTheFloor has the floor that would refuse it).
	noFloor := []string{"FERRY_MIN_FREE=0"}
	_, stderr, err := w.Ferry(w.Repo.Dir, noFloor, "spawn", "full", "--backend", "copy")
	check("full", stderr, err)
	if strings.Contains(stderr, "rollback is incomplete") {
		t.Fatalf("the rollback should have finished:\n%s", stderr)
	}
	gone("full")

	// A stale packed-refs.lock keeps git from deleting the branch, as a
	// full disk kept it from writing one.
	lock := filepath.Join(w.Repo.Dir, ".git", "packed-refs.lock")
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, err = w.Ferry(w.Repo.Dir, noFloor, "spawn", "half", "--backend", "copy")
	check("half", stderr, err)
	if !strings.Contains(stderr, "the rollback is incomplete: `ferry spawn half` again or `ferry gc` finishes it") {
		t.Fatalf("spawn half: the error does not say the rollback is incomplete:\n%s", stderr)
	}
	var rec struct {
		State string `json:"state"`
	}
	b, err := os.ReadFile(filepath.Join(w.StoreDir(t), "agents", "half", "agent.json"))
	if err != nil || json.Unmarshal(b, &rec) != nil || rec.State != "creating" {
		t.Fatalf("after an incomplete rollback agent.json must stay, state creating: %v %s", err, b)
	}
	os.Remove(lock)
	os.Remove(filler)
	out := w.MustFerry(t, "ferry-gc", "--json")
	if !strings.Contains(out, `"half"`) {
		t.Fatalf("gc did not roll back the unfinished spawn: %s", out)
	}
	gone("half")
	// With space again, the name spawns.
	w.Spawn(t, "half", "--backend", "copy")
	w.MustFerry(t, "rm", "half")
}

// Under the free-space floor ([gc] min-free) spawn and adopt refuse before
// they make anything: exit 8 with the figures and the setting named, and
// no branch, worktree or agent left; with no floor the same spawn works.
func TestSpawnRefusedUnderTheFloor(t *testing.T) {
	w := agenttest.Shared(t)
	floor := []string{"FERRY_MIN_FREE=1000T"}
	refused := func(what string, stdout, stderr string, err error) {
		t.Helper()
		if exitCode(err) != 8 {
			t.Fatalf("%s under the floor: exit %d, want 8:\n%s", what, exitCode(err), stderr)
		}
		for _, want := range []string{" refused: ", " free on ", "under the free-space floor of 1000 TiB", "[gc] min-free"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%s: stderr lacks %q:\n%s", what, want, stderr)
			}
		}
		if !strings.Contains(stdout, `"kind": "no-space"`) {
			t.Errorf("%s --json: %s", what, stdout)
		}
	}
	stdout, stderr, err := w.Ferry(w.Repo.Dir, floor, "spawn", "floored", "--json")
	refused("spawn", stdout, stderr, err)
	if !strings.Contains(stderr, `spawning agent "floored" refused`) {
		t.Errorf("the refusal does not name the agent:\n%s", stderr)
	}
	if w.BranchExists("ferry/floored") || w.WorktreeRegistered(filepath.Join(w.Worktrees, filepath.Base(w.StoreDir(t)), "floored")) {
		t.Error("a refused spawn left its branch or worktree")
	}
	if _, err := os.Stat(filepath.Join(w.StoreDir(t), "agents", "floored")); err == nil {
		t.Error("a refused spawn left its agent directory")
	}

	path := w.AddWorktree(t, "floored-adopt", "--detach")
	stdout, stderr, err = w.Ferry(w.Repo.Dir, floor, "adopt", path, "--json")
	refused("adopt", stdout, stderr, err)
	if _, err := os.Lstat(filepath.Join(path, "target")); err == nil {
		t.Error("a refused adoption linked ./target")
	}
	if out, err := w.Repo.Git("worktree", "remove", "--force", path); err != nil {
		t.Fatalf("git worktree remove: %v\n%s", err, out)
	}

	if _, stderr, err := w.Ferry(w.Repo.Dir, []string{"FERRY_MIN_FREE=0"}, "spawn", "floored"); err != nil {
		t.Fatalf("spawn with no floor: %v\n%s", err, stderr)
	}
	w.MustFerry(t, "rm", "floored")
}
