package gc_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/unpriv"
	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/gc"
	"github.com/ferrydev/ferry/pkg/lock"
)

// The agent tool whose hook the tests' agents pretend to come from.
const tool = "claude-code"

// placedLock is the Cargo.lock of the tests' bases, which the repository
// does not track: spawn places it in every agent.
const placedLock = "# the base's lockfile\nversion = 4\n"

// newHookEnv is newEnv with a current base at c2 (see newEnv), whose
// checkout holds an untracked Cargo.lock, as a build that resolved one
// leaves it.
func newHookEnv(t *testing.T) (*env, string) {
	t.Helper()
	e := newEnv(t)
	cur := e.makeBase(t, e.c2, "00000000000000cc", false)
	writeFile(t, filepath.Join(e.s.BaseDir(cur), "src", "Cargo.lock"), placedLock)
	e.setCurrent(t, cur)
	return e, cur
}

// spawn creates agent name through package agent, as a hook does when
// tool is set and as `ferry spawn` does when it is empty, at commit from
// (the current base's when empty), with the copy backend.
func (e *env) spawn(t *testing.T, name, tool, from string) *agent.Record {
	t.Helper()
	o := agent.SpawnOptions{
		Repo: e.repo, Store: e.s, Name: name, From: from, Backend: fork.NameCopy,
		Settings: &config.Settings{BranchPrefix: "ferry/", WorktreeParent: filepath.Join(e.root, "worktrees"), Backend: fork.NameCopy},
	}
	if tool != "" {
		o.Tool, o.Session = tool, "session-"+name
	}
	r, err := agent.Spawn(o)
	if err != nil {
		t.Fatalf("spawn %s: %v", name, err)
	}
	if r.PlacedLockfile == "" {
		t.Fatalf("spawn %s placed no Cargo.lock", name)
	}
	return r
}

// reapAt runs a pass reaping after quiet, by a clock at now.
func (e *env) reapAt(t *testing.T, dry bool, quiet time.Duration, now time.Time) *gc.Result {
	t.Helper()
	res, err := gc.RunWith(e.repo, e.s, gc.Options{DryRun: dry, ReapAfter: quiet, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatalf("gc (dry %v): %v", dry, err)
	}
	return res
}

// reap runs a pass reaping after an hour without a sign of life, by a
// clock two hours ahead: what a test did before is quiet by then, and only
// the rule under test keeps an agent.
func (e *env) reap(t *testing.T, dry bool) *gc.Result {
	t.Helper()
	return e.reapAt(t, dry, time.Hour, time.Now().Add(2*time.Hour))
}

func verdictOf(t *testing.T, res *gc.Result, name string) gc.Verdict {
	t.Helper()
	for _, v := range res.HookAgents {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no verdict on agent %s in %+v", name, res.HookAgents)
	return gc.Verdict{}
}

// expectKept checks that a dry pass and a real one keep agent r for rule
// alone, with a detail holding detail, and that r is intact.
func (e *env) expectKept(t *testing.T, r *agent.Record, rule, detail string) {
	t.Helper()
	for _, dry := range []bool{true, false} {
		res := e.reap(t, dry)
		v := verdictOf(t, res, r.Name)
		if v.Reaped || slices.Contains(res.Reaped, r.Name) {
			t.Fatalf("dry %v: agent %s reaped, want it kept by %q: %+v", dry, r.Name, rule, v)
		}
		if len(v.Kept) != 1 || v.Kept[0].Rule != rule || !strings.Contains(v.Kept[0].Detail, detail) {
			t.Fatalf("dry %v: agent %s kept for %+v, want only %q (%q)", dry, r.Name, v.Kept, rule, detail)
		}
		if v.Tool != tool || v.Session != "session-"+r.Name {
			t.Fatalf("verdict names tool %q session %q", v.Tool, v.Session)
		}
	}
	e.intact(t, r)
}

// intact checks that agent r is still all there.
func (e *env) intact(t *testing.T, r *agent.Record) {
	t.Helper()
	if got, err := agent.Read(e.s, r.Name); err != nil || got.State != agent.Ready {
		t.Fatalf("agent %s: record %+v, %v", r.Name, got, err)
	}
	if !e.registered(t, r.Worktree) || !exists(t, filepath.Join(r.Worktree, "README")) {
		t.Fatalf("agent %s's worktree is gone", r.Name)
	}
	if !e.branchExists(r.Branch) {
		t.Fatalf("agent %s's branch is gone", r.Name)
	}
	if !exists(t, filepath.Join(e.s.Agent(r.Name).Target, "debug", "artifact")) {
		t.Fatalf("agent %s's fork is gone", r.Name)
	}
}

// expectReaped checks that a dry pass would reap agent r and changes
// nothing, and that a real one reaps it the way rm removes an agent.
func (e *env) expectReaped(t *testing.T, r *agent.Record) *gc.Result {
	t.Helper()
	before := tree(t, e.s.Dir)
	res := e.reap(t, true)
	if v := verdictOf(t, res, r.Name); !v.Reaped || len(v.Kept) != 0 || !slices.Contains(res.Reaped, r.Name) {
		t.Fatalf("dry run keeps agent %s: %+v", r.Name, v)
	}
	if after := tree(t, e.s.Dir); after != before {
		t.Fatalf("dry run changed the store:\nbefore\n%s\nafter\n%s", before, after)
	}
	e.intact(t, r)
	res = e.reap(t, false)
	v := verdictOf(t, res, r.Name)
	if !v.Reaped || len(v.Kept) != 0 || !slices.Contains(res.Reaped, r.Name) {
		t.Fatalf("agent %s not reaped: %+v", r.Name, v)
	}
	if v.Removal == nil || !v.Removal.BranchDeleted || v.Removal.Worktree != r.Worktree || v.Removal.Base != r.Base {
		t.Fatalf("removal of agent %s: %+v", r.Name, v.Removal)
	}
	if exists(t, e.s.Agent(r.Name).Dir) {
		t.Errorf("agent %s's dir is still there", r.Name)
	}
	if exists(t, r.Worktree) || e.registered(t, r.Worktree) {
		t.Errorf("agent %s's worktree is still there", r.Name)
	}
	if e.branchExists(r.Branch) {
		t.Errorf("agent %s's branch is still there", r.Name)
	}
	return res
}

// An abandoned hook-created agent is reaped the way rm removes an agent
// (worktree, fork, branch), before bases are marked, so that its base goes
// in the same pass; the Cargo.lock spawn placed is not the agent's work.
func TestReapsAbandonedHookAgents(t *testing.T) {
	e, cur := newHookEnv(t)
	old := e.makeBase(t, e.c1, "00000000000000aa", false)
	writeFile(t, filepath.Join(e.s.BaseDir(old), "src", "Cargo.lock"), placedLock)
	a := e.spawn(t, "abandoned", tool, e.c1)
	if a.Base != old {
		t.Fatalf("agent on base %s, want %s", a.Base, old)
	}
	// Ferry's target link in the worktree is not the agent's work, and
	// what it points at outlives the reaping.
	outside := filepath.Join(e.root, "elsewhere")
	writeFile(t, filepath.Join(outside, "keep"), "not the agent's\n")
	if err := os.Symlink(outside, filepath.Join(a.Worktree, agent.TargetLink)); err != nil {
		t.Fatal(err)
	}
	a.TargetLink = outside // as spawn records the link it made
	e.writeAgent(t, a)
	// A worktree of the user's whose directory is gone for now (an
	// unmounted disk): reaping unregisters only the worktrees it removes.
	userWT := filepath.Join(e.root, "user-wt")
	gitCmd(t, e.repo.Top, "worktree", "add", "-q", "--detach", userWT, e.c1)
	if err := os.RemoveAll(userWT); err != nil {
		t.Fatal(err)
	}
	res := e.reap(t, true)
	checkResult(t, res, gc.Result{DryRun: true, Reaped: []string{a.Name}, Bases: []string{old}, Kept: []string{cur}, HookAgents: res.HookAgents})
	res = e.expectReaped(t, a)
	checkResult(t, res, gc.Result{Reaped: []string{a.Name}, Bases: []string{old}, Kept: []string{cur}, HookAgents: res.HookAgents})
	if len(res.HookAgents) != 1 || res.HookAgents[0].LastActive == nil {
		t.Fatalf("verdicts %+v", res.HookAgents)
	}
	if exists(t, e.s.BaseDir(old)) {
		t.Errorf("the reaped agent's base %s is still there", old)
	}
	if !e.registered(t, userWT) {
		t.Errorf("reaping unregistered the user's worktree %s", userWT)
	}
	if !exists(t, filepath.Join(outside, "keep")) {
		t.Errorf("reaping removed what the worktree's target link pointed at")
	}
	checkResult(t, e.reap(t, false), gc.Result{Kept: []string{cur}})
}

// An agent made by `ferry spawn` (no tool) is a person's: never reaped,
// however abandoned it looks, and not listed among the hook agents.
func TestNeverReapsFerrySpawnAgents(t *testing.T) {
	e, cur := newHookEnv(t)
	mine := e.spawn(t, "mine", "", "")
	for _, dry := range []bool{true, false} {
		checkResult(t, e.reapAt(t, dry, 0, time.Now().Add(48*time.Hour)), gc.Result{DryRun: dry, Kept: []string{cur}})
	}
	e.intact(t, mine)
}

// Clean: uncommitted changes, untracked files, a changed placed Cargo.lock
// and an operation under way keep an agent.
func TestReapKeepsUncommittedWork(t *testing.T) {
	e, _ := newHookEnv(t)
	a := e.spawn(t, "dirty", tool, "")
	readme := filepath.Join(a.Worktree, "README")
	orig, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}

	writeFile(t, readme, "the agent's edit\n")
	e.expectKept(t, a, gc.KeptChanges, "uncommitted changes (README)")
	writeFile(t, readme, string(orig))

	writeFile(t, filepath.Join(a.Worktree, "notes", "plan.md"), "an untracked note\n")
	e.expectKept(t, a, gc.KeptChanges, "uncommitted changes (notes/plan.md)")
	os.RemoveAll(filepath.Join(a.Worktree, "notes"))

	lockfile := filepath.Join(a.Worktree, "Cargo.lock")
	writeFile(t, lockfile, placedLock+"# a dependency the agent added\n")
	e.expectKept(t, a, gc.KeptChanges, "Cargo.lock differs from the one spawn placed")
	writeFile(t, lockfile, placedLock)

	admin := strings.TrimSpace(gitCmd(t, a.Worktree, "rev-parse", "--absolute-git-dir"))
	writeFile(t, filepath.Join(admin, "MERGE_HEAD"), a.StartCommit+"\n")
	e.expectKept(t, a, gc.KeptChanges, "a merge is in progress")
	os.Remove(filepath.Join(admin, "MERGE_HEAD"))

	e.expectReaped(t, a)
}

// No new commits: a branch that moved on (even to a commit another branch
// reaches) or a HEAD off the agent's branch keeps an agent.
func TestReapKeepsNewCommits(t *testing.T) {
	e, _ := newHookEnv(t)
	a := e.spawn(t, "committed", tool, "")
	gitCmd(t, a.Worktree, "commit", "-q", "--allow-empty", "-m", "the agent's work")
	gitCmd(t, a.Worktree, "branch", "pushed") // reachable elsewhere: only this rule keeps it
	e.expectKept(t, a, gc.KeptCommits, "its branch ferry/committed has 1 commit(s) since the start")

	b := e.spawn(t, "detached", tool, "")
	gitCmd(t, b.Worktree, "checkout", "-q", "--detach")
	e.expectKept(t, b, gc.KeptCommits, "its HEAD is detached")
	gitCmd(t, b.Worktree, "checkout", "-q", "-b", "side")
	e.expectKept(t, b, gc.KeptCommits, "its HEAD is on side, not on its branch ferry/detached")
	gitCmd(t, b.Worktree, "checkout", "-q", b.Branch)
	e.expectReaped(t, b)
}

// No commits only its worktree reaches: a commit reset away lives on in
// the worktree's reflogs, which go with it, and keeps the agent until a
// ref outside the worktree reaches it.
func TestReapKeepsCommitsOnlyItsWorktreeReaches(t *testing.T) {
	e, _ := newHookEnv(t)
	a := e.spawn(t, "resetter", tool, "")
	gitCmd(t, a.Worktree, "commit", "-q", "--allow-empty", "-m", "work reset away")
	lost := strings.TrimSpace(gitCmd(t, a.Worktree, "rev-parse", "HEAD"))
	gitCmd(t, a.Worktree, "reset", "-q", "--hard", "HEAD~1")
	e.expectKept(t, a, gc.KeptUnreached, "1 commit(s) that only its worktree reaches")
	gitCmd(t, e.repo.Top, "tag", "kept-work", lost)
	e.expectReaped(t, a)
}

// No ignored files beyond build output: an ignored .env, a changed placed
// Cargo.lock the repository ignores, or a target/ Cargo did not make keep
// an agent; a target dir a real cargo built (a build that bypassed the
// shim) and the placed Cargo.lock, ignored and unchanged, do not.
func TestReapKeepsIgnoredFiles(t *testing.T) {
	e, _ := newHookEnv(t)
	common, err := e.repo.CommonDir()
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(common, "info", "exclude"), "/target\n.env\nCargo.lock\n")
	a := e.spawn(t, "ignoring", tool, "")

	env := filepath.Join(a.Worktree, ".env")
	writeFile(t, env, "TOKEN=secret\n")
	e.expectKept(t, a, gc.KeptIgnored, "ignored files that are not build output (.env)")
	os.Remove(env)

	lockfile := filepath.Join(a.Worktree, "Cargo.lock")
	writeFile(t, lockfile, placedLock+"# changed\n")
	e.expectKept(t, a, gc.KeptIgnored, "(Cargo.lock)")
	writeFile(t, lockfile, placedLock)

	// With /target ignored, spawn linked the worktree's target to the
	// agent's fork: Ferry's entry, no work of the agent's. Without it (a
	// repository whose rules made spawn skip the link), a target directory
	// in the worktree is judged by what it holds.
	target := filepath.Join(a.Worktree, "target")
	if fi, err := os.Lstat(target); err != nil || fi.Mode()&os.ModeSymlink == 0 || a.TargetLink == "" {
		t.Fatalf("spawn made no target link in a worktree that ignores /target (%v)", err)
	}
	os.Remove(target)
	writeFile(t, filepath.Join(target, "results.csv"), "not Cargo's\n")
	e.expectKept(t, a, gc.KeptIgnored, "(target/)")
	os.RemoveAll(target)

	cargo, err := exec.LookPath("cargo")
	if err != nil {
		t.Skipf("no cargo on PATH to make a real target dir: %v", err)
	}
	crate := filepath.Join(e.root, "crate")
	writeFile(t, filepath.Join(crate, "Cargo.toml"), "[package]\nname = \"outside\"\nversion = \"0.1.0\"\nedition = \"2021\"\n")
	writeFile(t, filepath.Join(crate, "src", "main.rs"), "fn main() {}\n")
	c := exec.Command(cargo, "build", "--offline", "-q", "--manifest-path", filepath.Join(crate, "Cargo.toml"))
	c.Env = append(os.Environ(), "CARGO_TARGET_DIR="+target)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("cargo build: %v\n%s", err, out)
	}
	if !exists(t, filepath.Join(target, "debug", "outside")) {
		t.Fatalf("cargo built nothing into %s", target)
	}
	e.expectReaped(t, a)
}

// Idle: a process holding busy.lock (as every process run for the agent
// does), one with its working directory in the worktree (an agent tool's
// session, which holds no Ferry lock), or one entering the agent (its
// lock) keeps an agent; once they are gone it is reaped.
func TestReapKeepsBusyAgents(t *testing.T) {
	e, _ := newHookEnv(t)
	a := e.spawn(t, "busy", tool, "")

	busy, err := agent.HoldBusy(e.s, a.Name)
	if err != nil {
		t.Fatal(err)
	}
	holder := startChild(t, e.root, busy.File())
	busy.Release()
	e.expectKept(t, a, gc.KeptBusy, "processes run for it")
	stopChild(holder)

	sub := filepath.Join(a.Worktree, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	inside := startChild(t, sub, nil)
	os.Remove(sub) // the session's cwd stays, deleted or not; the worktree is clean again
	e.expectKept(t, a, gc.KeptBusy, "processes work in its worktree")
	stopChild(inside)
	inside = startChild(t, a.Worktree, nil)
	e.expectKept(t, a, gc.KeptBusy, "processes work in its worktree")
	stopChild(inside)

	l, err := lock.Take(e.s.Agent(a.Name).Lock)
	if err != nil {
		t.Fatal(err)
	}
	entering := startChild(t, e.root, l.File())
	l.Release()
	e.expectKept(t, a, gc.KeptBusy, "a process is entering it")
	stopChild(entering)

	e.expectReaped(t, a)
}

// startChild starts a process in dir that lives until stopped, holding
// the lock behind f (when not nil) through an inherited descriptor, as
// Ferry hands locks to the processes it runs.
func startChild(t *testing.T, dir string, f *os.File) *exec.Cmd {
	t.Helper()
	c := exec.Command("sleep", "60")
	c.Dir = dir
	if f != nil {
		c.ExtraFiles = []*os.File{f}
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopChild(c) })
	return c
}

func stopChild(c *exec.Cmd) {
	if c.ProcessState == nil {
		c.Process.Kill()
		c.Wait()
	}
}

// Not locked: a worktree its tool locked (`git worktree lock`, as Claude
// Code does while a subagent runs in it) keeps an agent, whose lock
// reason is shown.
func TestReapKeepsLockedWorktrees(t *testing.T) {
	e, _ := newHookEnv(t)
	a := e.spawn(t, "locked", tool, "")
	gitCmd(t, e.repo.Top, "worktree", "lock", "--reason", "claude agent agent-1234 (pid 4242)", a.Worktree)
	e.expectKept(t, a, gc.KeptLocked, "its worktree is locked (git worktree lock): claude agent agent-1234 (pid 4242)")
	gitCmd(t, e.repo.Top, "worktree", "unlock", a.Worktree)
	e.expectReaped(t, a)
}

// Quiet: an agent is reaped only after ReapAfter without a sign of life:
// its spawn, a file in its worktree touched (even one whose edit was
// undone), git at work in it, a build writing into its fork. ReapAfter 0
// reaps as soon as the other rules hold.
func TestReapWaitsForQuiet(t *testing.T) {
	e, _ := newHookEnv(t)
	a := e.spawn(t, "quiet", tool, "")
	start := time.Now()
	at := func(d time.Duration) time.Time { return start.Add(d) }
	kept := func(now time.Time, want string) {
		t.Helper()
		for _, dry := range []bool{true, false} {
			v := verdictOf(t, e.reapAt(t, dry, time.Hour, now), a.Name)
			if v.Reaped || len(v.Kept) != 1 || v.Kept[0].Rule != gc.KeptRecent || !strings.Contains(v.Kept[0].Detail, want) {
				t.Fatalf("at %v (dry %v): %+v, want kept as recent (%s)", now.Sub(start).Round(time.Minute), dry, v, want)
			}
		}
		e.intact(t, a)
	}
	touch := func(path string, d time.Duration) {
		t.Helper()
		if err := os.Chtimes(path, at(d), at(d)); err != nil {
			t.Fatal(err)
		}
	}

	// Just spawned (its first sign of life is from the spawn, which under
	// load takes seconds: 0s ago or a few).
	kept(start, "s ago; gc reaps after 1h without one")
	// An edit undone 90 minutes on.
	touch(filepath.Join(a.Worktree, "README"), 90*time.Minute)
	kept(at(2*time.Hour), "a sign of life 30m ago")
	// git at work in the worktree (its index) at 3 hours.
	admin := strings.TrimSpace(gitCmd(t, a.Worktree, "rev-parse", "--absolute-git-dir"))
	touch(filepath.Join(admin, "index"), 3*time.Hour)
	kept(at(3*time.Hour+30*time.Minute), "a sign of life 30m ago")
	// A build adding to the fork's profile dir at 5 hours.
	touch(filepath.Join(e.s.Agent(a.Name).Target, "debug"), 5*time.Hour)
	kept(at(5*time.Hour+10*time.Minute), "a sign of life 10m ago")

	res := e.reapAt(t, false, time.Hour, at(6*time.Hour+time.Minute))
	if v := verdictOf(t, res, a.Name); !v.Reaped || v.LastActive == nil || !v.LastActive.Equal(at(5*time.Hour)) {
		t.Fatalf("after an hour of quiet: %+v (last active %v)", v, v.LastActive)
	}

	b := e.spawn(t, "at-once", tool, "")
	if v := verdictOf(t, e.reapAt(t, false, 0, time.Now()), b.Name); !v.Reaped {
		t.Fatalf("reap-after 0: %+v", v)
	}
}

// An agent whose worktree is missing (deleted, or on a disk unmounted for
// now) is kept: nothing tells what it held.
func TestReapKeepsAgentWithoutWorktree(t *testing.T) {
	e, _ := newHookEnv(t)
	a := e.spawn(t, "away", tool, "")
	if err := os.Rename(a.Worktree, a.Worktree+".away"); err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{true, false} {
		v := verdictOf(t, e.reap(t, dry), a.Name)
		if v.Reaped || len(v.Kept) != 1 || v.Kept[0].Rule != gc.KeptWorktree || !strings.Contains(v.Kept[0].Detail, "is missing") {
			t.Fatalf("dry %v: %+v", dry, v)
		}
	}
	if err := os.Rename(a.Worktree+".away", a.Worktree); err != nil {
		t.Fatal(err)
	}
	e.expectReaped(t, a)
}

// A spawn still running (its spawner holds the agent's lock) is listed as
// kept, neither rolled back nor reaped.
func TestReapKeepsSpawnsInProgress(t *testing.T) {
	e, cur := newHookEnv(t)
	r := e.makeAgent(t, "creating", cur, agent.Creating, fork.NameCopy)
	r.Tool, r.Session = tool, "session-creating"
	e.writeAgent(t, r)
	l, err := lock.Take(e.s.Agent(r.Name).Lock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	for _, dry := range []bool{true, false} {
		res := e.reap(t, dry)
		v := verdictOf(t, res, r.Name)
		if v.Reaped || len(v.Kept) != 1 || v.Kept[0].Rule != gc.KeptCreating {
			t.Fatalf("dry %v: %+v", dry, v)
		}
		if len(res.Agents) != 0 || len(res.Reaped) != 0 {
			t.Fatalf("dry %v: rolled back %v, reaped %v", dry, res.Agents, res.Reaped)
		}
	}
	if got, err := agent.Read(e.s, r.Name); err != nil || got.State != agent.Creating || !e.registered(t, r.Worktree) {
		t.Fatalf("the spawn in progress was touched: %+v, %v", got, err)
	}
}

// An agent another agent's worktree is nested in is kept (removing its
// worktree would take the other's with it), and reaped once that is gone.
func TestReapKeepsAgentsWithNestedWorktrees(t *testing.T) {
	e, cur := newHookEnv(t)
	outer := e.spawn(t, "outer", tool, "")
	// Spawn refuses to nest: a person moved a worktree there.
	inner := e.makeAgent(t, "inner", cur, agent.Ready, fork.NameCopy)
	moved := filepath.Join(outer.Worktree, "inner")
	gitCmd(t, e.repo.Top, "worktree", "move", inner.Worktree, moved)
	inner.Worktree = moved
	e.writeAgent(t, inner)
	for _, dry := range []bool{true, false} {
		v := verdictOf(t, e.reap(t, dry), outer.Name)
		if v.Reaped || !slices.ContainsFunc(v.Kept, func(r gc.Reason) bool {
			return r.Rule == gc.KeptNested && strings.Contains(r.Detail, `agent "inner"'s worktree is inside its worktree`)
		}) {
			t.Fatalf("dry %v: %+v", dry, v)
		}
	}
	e.intact(t, outer)
	if _, err := agent.Remove(e.repo, e.s, inner.Name, agent.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	e.expectReaped(t, outer)
}

// What a pass looked at is checked again under the agent's locks before
// the removal: an ignored file written in between (which rm alone would
// discard) keeps the agent.
func TestReapChecksAgainUnderTheLocks(t *testing.T) {
	e, _ := newHookEnv(t)
	common, err := e.repo.CommonDir()
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(common, "info", "exclude"), ".env\n")
	a := e.spawn(t, "late-edit", tool, "")
	env := filepath.Join(a.Worktree, ".env")
	defer gc.SetBeforeReap(func(name string) {
		if name == a.Name {
			writeFile(t, env, "TOKEN=written after gc looked\n")
		}
	})()
	res := e.reap(t, false)
	v := verdictOf(t, res, a.Name)
	if v.Reaped || len(v.Kept) != 1 || v.Kept[0].Rule != gc.KeptIgnored || !strings.Contains(v.Kept[0].Detail, ".env") {
		t.Fatalf("%+v", v)
	}
	if len(res.Reaped) != 0 {
		t.Fatalf("reaped %v", res.Reaped)
	}
	e.intact(t, a)
	if !exists(t, env) {
		t.Fatal("the late file is gone")
	}
}

// Reaping works for an ordinary user too.
func TestReapAsUnprivilegedUser(t *testing.T) {
	unpriv.Rerun(t, "^(TestReapsAbandonedHookAgents|TestNeverReapsFerrySpawnAgents|TestReapKeeps.*|TestReapWaitsForQuiet|TestReapChecksAgainUnderTheLocks)$")
}

// An adopted agent's worktree is its tool's: gc keeps the agent however
// quiet it is while the worktree is there (or still registered), and once
// the tool has removed the worktree it releases the fork, touching no
// branch.
func TestReapReleasesAdoptedAgentsOnceTheirWorktreeGoes(t *testing.T) {
	e, _ := newHookEnv(t)
	path := filepath.Join(e.root, "tool-wt")
	if _, err := e.repo.Run("", "worktree", "add", "--quiet", "-b", "tool/wt", path, e.c2); err != nil {
		t.Fatal(err)
	}
	ad, err := agent.Adopt(agent.AdoptOptions{
		Repo: e.repo, Store: e.s, Path: path, Backend: fork.NameCopy, Tool: "codex", Session: "session-tool-wt",
		Settings: &config.Settings{BranchPrefix: "ferry/", WorktreeParent: filepath.Join(e.root, "worktrees"), Backend: fork.NameCopy},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := ad.Record
	for _, dry := range []bool{true, false} {
		v := verdictOf(t, e.reap(t, dry), r.Name)
		if v.Reaped || len(v.Kept) != 1 || v.Kept[0].Rule != gc.KeptAdopted || !strings.Contains(v.Kept[0].Detail, "codex") {
			t.Fatalf("dry %v: adopted agent with its worktree: %+v", dry, v)
		}
	}
	// Missing but registered: an unmounted disk, perhaps.
	if err := os.Rename(path, path+".away"); err != nil {
		t.Fatal(err)
	}
	if v := verdictOf(t, e.reap(t, false), r.Name); v.Reaped || v.Kept[0].Rule != gc.KeptWorktree {
		t.Fatalf("adopted agent with its worktree away: %+v", v)
	}
	if err := os.Rename(path+".away", path); err != nil {
		t.Fatal(err)
	}
	// The tool removes its worktree (the target link is untracked: --force).
	if _, err := e.repo.Run("", "worktree", "remove", "--force", path); err != nil {
		t.Fatal(err)
	}
	v := verdictOf(t, e.reap(t, false), r.Name)
	if !v.Reaped || v.Removal == nil || !v.Removal.WorktreeKept || v.Removal.BranchDeleted {
		t.Fatalf("adopted agent after its worktree went: %+v %+v", v, v.Removal)
	}
	if exists(t, e.s.Agent(r.Name).Dir) {
		t.Fatal("the adopted agent's fork is still there")
	}
	if !e.branchExists("tool/wt") {
		t.Fatal("gc deleted the tool's branch")
	}
}
