package gc_test

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/unpriv"
	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/gc"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

// The sandbox re-executes the test binary as its child.
func TestMain(m *testing.M) {
	sandbox.Init()
	os.Exit(m.Run())
}

// env is a git repository with two commits and its store, laid out the way
// Ferry lays it out. The store parent is reached through a symlink, as
// /tmp or ~/.cache may be, while overlays name resolved paths (as package
// agent mounts them and the kernel prints them).
type env struct {
	root   string // resolved temp dir
	repo   *git.Repo
	s      *store.Store
	c1, c2 string // commits
}

func newEnv(t *testing.T) *env {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Overlayfs leaves work/work with mode 0 and a fork may hold read-only
	// dirs: an unprivileged user's TempDir cleanup could not remove them.
	// (Runs before the TempDir's removal, which was registered first.)
	t.Cleanup(func() { platform.RemoveTree(root) })
	e := &env{root: root}

	src := filepath.Join(root, "repo")
	gitCmd(t, root, "init", "-q", "-b", "main", src)
	for i, text := range []string{"one\n", "two\n"} {
		if err := os.WriteFile(filepath.Join(src, "README"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		gitCmd(t, src, "add", "README")
		gitCmd(t, src, "commit", "-q", "-m", fmt.Sprintf("commit %d", i+1))
	}
	if e.repo, err = git.Open(src); err != nil {
		t.Fatal(err)
	}
	e.c1 = e.rev(t, "HEAD~1")
	e.c2 = e.rev(t, "HEAD")

	if err := os.Mkdir(filepath.Join(root, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	common, err := e.repo.CommonDir()
	if err != nil {
		t.Fatal(err)
	}
	if e.s, err = store.Open(filepath.Join(root, "link", "home"), common, e.repo.Top); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Init(); err != nil {
		t.Fatal(err)
	}
	return e
}

func gitCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	c := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=Ferry Test", "-c", "user.email=test@ferry.invalid",
		"-c", "commit.gpgsign=false"}, args...)...)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (e *env) rev(t *testing.T, ref string) string {
	t.Helper()
	out, err := e.repo.Run("", "rev-parse", "--verify", ref+"^{commit}")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// makeBase lays out base commit-fp as a build does, under its lock: a
// detached checkout at src/, a target dir, and base.json last (unless
// partial, a build that died before finishing).
func (e *env) makeBase(t *testing.T, commit, fp string, partial bool) string {
	t.Helper()
	id := base.ID(commit, fp)
	l, err := lock.TryTake(e.s.BaseLock(id))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	dir := e.s.BaseDir(id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, target := filepath.Join(dir, "src"), filepath.Join(dir, "target")
	if err := e.repo.WorktreeAddDetached(src, commit); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(target, "debug"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "debug", "artifact"), []byte("built\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if partial {
		return id
	}
	// Sealed as a build seals it, so that agent.Spawn trusts the base.
	seal, err := base.Seal(target)
	if err != nil {
		t.Fatal(err)
	}
	r := base.Record{Base: record.Base{
		Format: base.Format, ID: id, Commit: commit, Fingerprint: fp,
		Store: e.s.Dir, Dir: dir, Src: src, Target: target, MntSrc: e.s.MntSrc(), MntTarget: e.s.MntTarget(),
		Modes: base.Modes{Freshness: "mtime", Isolation: "namespace"}, Created: time.Now().UTC(), TargetSeal: seal,
	}}
	if err := atomicfile.WriteJSON(filepath.Join(dir, "base.json"), r, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := base.Read(e.s, id); err != nil || got.ID != id {
		t.Fatalf("base.Read(%s) = %+v, %v", id, got, err)
	}
	return id
}

// setCurrent records id as current, under the store lock as Ferry does.
func (e *env) setCurrent(t *testing.T, id string) {
	t.Helper()
	l, err := lock.Take(e.s.LockPath())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if err := e.s.SetCurrent(id); err != nil {
		t.Fatal(err)
	}
}

// resolvedTarget is base id's target dir as an overlay names its lower.
func (e *env) resolvedTarget(t *testing.T, id string) string {
	t.Helper()
	p, err := filepath.EvalSymlinks(filepath.Join(e.s.BaseDir(id), "target"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// makeAgent lays out agent name on baseID as spawn does: the dir, its lock,
// agent.json (state), the worktree on branch ferry/<name> and a fork.
func (e *env) makeAgent(t *testing.T, name, baseID, state, backend string) *agent.Record {
	t.Helper()
	dir := e.s.Agent(name).Dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := lock.TryTake(e.s.Agent(name).Lock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	b, err := base.Read(e.s, baseID)
	if err != nil {
		t.Fatal(err)
	}
	r := &agent.Record{
		Format: agent.Format, Name: name, State: state, Branch: "ferry/" + name,
		Worktree: filepath.Join(e.root, "worktrees", name), StartCommit: b.Commit,
		Base: baseID, BaseCommit: b.Commit, Backend: backend, Created: time.Now().UTC(),
		MadeWorktree: true, MadeBranch: true,
	}
	e.writeAgent(t, r)
	if err := e.repo.WorktreeAddBranch(r.Worktree, r.Branch, r.StartCommit); err != nil {
		t.Fatal(err)
	}
	if backend == fork.NameOverlay {
		for _, d := range []string{"upper", "work"} {
			if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		writeFile(t, filepath.Join(dir, "target", "debug", "artifact"), "forked\n")
	}
	return r
}

func (e *env) writeAgent(t *testing.T, r *agent.Record) {
	t.Helper()
	if err := atomicfile.WriteJSON(filepath.Join(e.s.Agent(r.Name).Dir, "agent.json"), r, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := agent.Read(e.s, r.Name); err != nil || got.Name != r.Name || got.State != r.State {
		t.Fatalf("agent.Read(%s) = %+v, %v", r.Name, got, err)
	}
}

func (e *env) gc(t *testing.T, dry bool) *gc.Result {
	t.Helper()
	res, err := gc.Run(e.repo, e.s, dry)
	if err != nil {
		t.Fatalf("gc (dry %v): %v", dry, err)
	}
	return res
}

// registered reports whether git lists a worktree at path.
func (e *env) registered(t *testing.T, path string) bool {
	t.Helper()
	_, ok, err := e.repo.FindWorktree(path)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func (e *env) branchExists(name string) bool {
	_, err := e.repo.Run("", "show-ref", "--verify", "--quiet", "refs/heads/"+name)
	return err == nil
}

// checkResult compares res with want, whose nil lists mean empty and whose
// lists are sorted first (gc reports in name order).
func checkResult(t *testing.T, res *gc.Result, want gc.Result) {
	t.Helper()
	for _, l := range []*[]string{&want.Bases, &want.Kept, &want.SkippedLocked, &want.SkippedInUse, &want.Agents, &want.Reaped, &want.Leftovers, &want.SweptLocks, &want.Exposed, &want.Damaged} {
		if *l == nil {
			*l = []string{}
		}
		slices.Sort(*l)
	}
	if want.HookAgents == nil {
		want.HookAgents = []gc.Verdict{}
	}
	if !reflect.DeepEqual(*res, want) {
		t.Fatalf("gc result\n got %+v\nwant %+v", *res, want)
	}
}

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Lstat(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tree lists every path below root with its mode, to show a tree untouched.
func tree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fmt.Fprintf(&b, "%s %v %d\n", rel, fi.Mode(), fi.Size())
		if d.IsDir() && fi.Mode().Perm()&0o500 != 0o500 {
			return fs.SkipDir // not ours to read unprivileged (work/work)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// holder is a sandboxed process keeping overlays mounted in its namespace.
type holder struct {
	c     *sandbox.Cmd
	lines chan string
}

func startHolder(t *testing.T, overlays ...sandbox.Overlay) *holder {
	t.Helper()
	for _, o := range overlays {
		for _, d := range []string{o.Upper, o.Work, o.Target} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	c, err := sandbox.Command(sandbox.Plan{
		Overlays: overlays,
		Argv:     []string{"sh", "-c", "echo ready; exec sleep 60"},
		Dir:      "/",
		Env:      []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{c: c, lines: make(chan string, 4)}
	t.Cleanup(h.stop)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	select {
	case got, ok := <-h.lines:
		if !ok || got != "ready" {
			t.Fatalf("holder said %q (open %v), want ready", got, ok)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("holder did not say ready")
	}
	return h
}

func (h *holder) stop() {
	if h.c.ProcessState == nil {
		h.c.Process.Kill()
		h.c.Wait()
	}
}

// waitOverlays waits until the live overlays satisfy ok (namespace teardown
// is asynchronous).
func waitOverlays(t *testing.T, what string, ok func([]sandbox.LiveOverlay) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		live := sandbox.LiveOverlays()
		if ok(live) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: live overlays %+v", what, live)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func hasLower(dir string) func([]sandbox.LiveOverlay) bool {
	return func(live []sandbox.LiveOverlay) bool {
		return slices.ContainsFunc(live, func(o sandbox.LiveOverlay) bool { return o.Lower == dir })
	}
}

func hasUpper(dir string) func([]sandbox.LiveOverlay) bool {
	return func(live []sandbox.LiveOverlay) bool {
		return slices.ContainsFunc(live, func(o sandbox.LiveOverlay) bool { return o.Upper == dir })
	}
}

func not(f func([]sandbox.LiveOverlay) bool) func([]sandbox.LiveOverlay) bool {
	return func(live []sandbox.LiveOverlay) bool { return !f(live) }
}

// An unreferenced base (ready or partial) is deleted with its checkout
// unregistered; the current base and a base an agent names are kept; the
// user's own worktrees are never pruned; a dry run reports the same and
// deletes nothing.
func TestDeletesUnreferencedBases(t *testing.T) {
	e := newEnv(t)
	old := e.makeBase(t, e.c1, "00000000000000aa", false)
	partial := e.makeBase(t, e.c2, "00000000000000bb", true)
	cur := e.makeBase(t, e.c2, "00000000000000cc", false)
	ref := e.makeBase(t, e.c1, "00000000000000dd", false)
	e.setCurrent(t, cur)
	a := e.makeAgent(t, "a1", ref, agent.Ready, fork.NameCopy)

	// A worktree of the user's whose directory is gone for now (an
	// unmounted disk): gc must not prune it.
	userWT := filepath.Join(e.root, "user-wt")
	gitCmd(t, e.repo.Top, "worktree", "add", "-q", "--detach", userWT, e.c1)
	if err := os.RemoveAll(userWT); err != nil {
		t.Fatal(err)
	}

	want := gc.Result{Bases: []string{old, partial}, Kept: []string{cur, ref}}
	before := tree(t, e.s.Dir)
	want.DryRun = true
	checkResult(t, e.gc(t, true), want)
	if after := tree(t, e.s.Dir); after != before {
		t.Fatalf("dry run changed the store:\nbefore\n%s\nafter\n%s", before, after)
	}
	for _, id := range []string{old, partial, cur, ref} {
		if !e.registered(t, filepath.Join(e.s.BaseDir(id), "src")) {
			t.Fatalf("dry run unregistered base %s's checkout", id)
		}
	}

	want.DryRun = false
	checkResult(t, e.gc(t, false), want)
	for _, id := range []string{old, partial} {
		if exists(t, e.s.BaseDir(id)) {
			t.Errorf("base %s still on disk", id)
		}
		if exists(t, e.s.BaseLock(id)) {
			t.Errorf("base %s's lock file still on disk", id)
		}
		if e.registered(t, filepath.Join(e.s.BaseDir(id), "src")) {
			t.Errorf("base %s's checkout still registered with git", id)
		}
	}
	for _, id := range []string{cur, ref} {
		if _, err := base.Read(e.s, id); err != nil {
			t.Errorf("kept base %s: %v", id, err)
		}
		if !e.registered(t, filepath.Join(e.s.BaseDir(id), "src")) {
			t.Errorf("kept base %s's checkout unregistered", id)
		}
		if !exists(t, filepath.Join(e.s.BaseDir(id), "target", "debug", "artifact")) {
			t.Errorf("kept base %s lost its target", id)
		}
	}
	if got, err := agent.Read(e.s, a.Name); err != nil || got.State != agent.Ready {
		t.Errorf("agent a1 after gc: %+v, %v", got, err)
	}
	if !e.registered(t, a.Worktree) || !e.branchExists(a.Branch) {
		t.Errorf("agent a1's worktree or branch is gone")
	}
	if !e.registered(t, userWT) {
		t.Errorf("gc pruned the user's worktree %s", userWT)
	}
	if cur2, _ := e.s.Current(); cur2 != cur {
		t.Errorf("current = %q, want %q", cur2, cur)
	}

	// Nothing left to collect.
	checkResult(t, e.gc(t, false), gc.Result{Kept: []string{cur, ref}})
}

// A base whose lock is held (a build in progress), by another descriptor or
// by another process, is skipped without waiting, and collected once free.
func TestSkipsLockedBases(t *testing.T) {
	e := newEnv(t)
	cur := e.makeBase(t, e.c2, "00000000000000cc", false)
	e.setCurrent(t, cur)
	byFD := e.makeBase(t, e.c1, "00000000000000aa", true)
	byProc := e.makeBase(t, e.c1, "00000000000000bb", false)

	l, err := lock.Take(e.s.BaseLock(byFD))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	// A child inherits the lock's descriptor, as Ferry hands locks to the
	// processes it runs, and holds it alone once ours is closed.
	pl, err := lock.Take(e.s.BaseLock(byProc))
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "60")
	child.ExtraFiles = []*os.File{pl.File()}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if child.ProcessState == nil {
			child.Process.Kill()
			child.Wait()
		}
	})
	pl.Release()
	if held, err := lock.Held(e.s.BaseLock(byProc)); err != nil || !held {
		t.Fatalf("lock held by child: %v, %v", held, err)
	}

	want := gc.Result{Kept: []string{cur}, SkippedLocked: []string{byFD, byProc}}
	done := make(chan *gc.Result, 1)
	go func() {
		res, err := gc.Run(e.repo, e.s, false)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	select {
	case res := <-done:
		if res == nil {
			t.FailNow()
		}
		checkResult(t, res, want)
	case <-time.After(10 * time.Second):
		t.Fatal("gc waited for a base lock")
	}
	for _, id := range []string{byFD, byProc} {
		if !exists(t, filepath.Join(e.s.BaseDir(id), "target", "debug", "artifact")) ||
			!e.registered(t, filepath.Join(e.s.BaseDir(id), "src")) {
			t.Errorf("locked base %s was touched", id)
		}
	}
	if _, err := base.Read(e.s, byProc); err != nil {
		t.Errorf("locked ready base %s lost base.json: %v", byProc, err)
	}
	want.DryRun = true
	checkResult(t, e.gc(t, true), want)

	l.Release()
	child.Process.Kill()
	child.Wait()
	checkResult(t, e.gc(t, false), gc.Result{Kept: []string{cur}, Bases: []string{byFD, byProc}})
	for _, id := range []string{byFD, byProc} {
		if exists(t, e.s.BaseDir(id)) || e.registered(t, filepath.Join(e.s.BaseDir(id), "src")) {
			t.Errorf("unlocked base %s not deleted", id)
		}
		if exists(t, e.s.BaseLock(id)) {
			t.Errorf("unlocked base %s's lock file not deleted", id)
		}
	}
}

// A base whose target is still the lower layer of a mounted overlay (a
// process of a removed overlay agent, in a namespace nested in its sandbox)
// is kept; once that process is gone the next pass deletes it.
func TestKeepsBaseUnderLiveOverlay(t *testing.T) {
	e := newEnv(t)
	cur := e.makeBase(t, e.c2, "00000000000000cc", false)
	e.setCurrent(t, cur)
	inUse := e.makeBase(t, e.c1, "00000000000000aa", false)
	old := e.makeBase(t, e.c1, "00000000000000bb", false)

	// The store was opened through a link (root/link -> real): Open names
	// everything through the resolved parent, as the kernel prints it.
	lower := e.resolvedTarget(t, inUse)
	if lower != filepath.Join(e.s.BaseDir(inUse), "target") || !strings.Contains(lower, "/real/") {
		t.Fatalf("store %s opened through a link is not named by its resolved path (%s)", e.s.Dir, lower)
	}
	h := e.root + "/holder"
	holder := startHolder(t, sandbox.Overlay{Lower: lower, Upper: h + "/upper", Work: h + "/work", Target: h + "/mnt"})
	if !hasLower(lower)(sandbox.LiveOverlays()) {
		t.Fatalf("the holder's overlay on %s is not listed live: %+v", lower, sandbox.LiveOverlays())
	}

	want := gc.Result{DryRun: true, Kept: []string{cur}, Bases: []string{old}, SkippedInUse: []string{inUse}}
	checkResult(t, e.gc(t, true), want)
	if !exists(t, e.s.BaseDir(old)) {
		t.Fatal("dry run deleted a base")
	}
	want.DryRun = false
	checkResult(t, e.gc(t, false), want)
	if _, err := base.Read(e.s, inUse); err != nil {
		t.Errorf("base in use: %v", err)
	}
	if !exists(t, filepath.Join(lower, "debug", "artifact")) || !e.registered(t, filepath.Join(e.s.BaseDir(inUse), "src")) {
		t.Errorf("base in use was touched")
	}
	if exists(t, e.s.BaseDir(old)) {
		t.Errorf("unreferenced base %s not deleted", old)
	}

	holder.stop()
	waitOverlays(t, "after the holder was killed", not(hasLower(lower)))
	checkResult(t, e.gc(t, false), gc.Result{Kept: []string{cur}, Bases: []string{inUse}})
	if exists(t, e.s.BaseDir(inUse)) || e.registered(t, filepath.Join(e.s.BaseDir(inUse), "src")) {
		t.Errorf("base %s not deleted once no overlay used it", inUse)
	}
}

// Agent dirs without agent.json (an interrupted rm) are removed, read-only
// dirs and overlayfs's mode-0 work/work included, unless a live overlay
// still writes into them; an agent with a record is never touched.
func TestRemovesLeftoverAgentDirs(t *testing.T) {
	e := newEnv(t)
	cur := e.makeBase(t, e.c2, "00000000000000cc", false)
	e.setCurrent(t, cur)
	lower := e.resolvedTarget(t, cur)

	// A ready overlay agent whose fork was mounted once.
	rec := e.makeAgent(t, "recorded", cur, agent.Ready, fork.NameOverlay)
	mountOnce(t, e, "recorded", lower)

	// An rm interrupted after removing the record: the overlay mounted once
	// left a whiteout and a copied-up file in upper/, the agent made a
	// read-only dir, and work/work (mode 0) holds an entry.
	orphan := e.s.Agent("orphan").Dir
	for _, d := range []string{"upper", "work"} {
		if err := os.MkdirAll(filepath.Join(orphan, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mountOnce(t, e, "orphan", lower)
	if err := os.Chmod(filepath.Join(orphan, "upper", "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	ww := filepath.Join(orphan, "work", "work")
	if fi, err := os.Stat(ww); err != nil || fi.Mode().Perm() != 0 {
		t.Fatalf("overlayfs work dir %s: %v, %v; want mode 0", ww, fi, err)
	}
	os.Chmod(ww, 0o700)
	writeFile(t, filepath.Join(ww, "leftover"), "x\n")
	os.Chmod(ww, 0)

	// Leftovers where a live overlay still writes: one holding only its
	// upper dir (busy-upper), one only its work dir (busy-work), as a
	// process in a namespace nested in a removed agent's sandbox would.
	busyUpper := e.s.Agent("busy-upper").Dir
	busyWork := e.s.Agent("busy-work").Dir
	res := func(p string) string {
		t.Helper()
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	upperA := res(filepath.Join(busyUpper, "upper"))
	workB := res(filepath.Join(busyWork, "work"))
	h := e.root + "/holder"
	holder := startHolder(t,
		sandbox.Overlay{Lower: lower, Upper: upperA, Work: res(h + "/work-a"), Target: h + "/mnt-a"},
		sandbox.Overlay{Lower: lower, Upper: res(h + "/upper-b"), Work: workB, Target: h + "/mnt-b"})
	for _, u := range []string{upperA, h + "/upper-b"} {
		if !hasUpper(u)(sandbox.LiveOverlays()) {
			t.Fatalf("the holder's overlay on %s is not listed live", u)
		}
	}
	// Not agent dirs: ignored.
	writeFile(t, filepath.Join(e.s.AgentsDir(), "stray-file"), "x\n")

	recordedTree := tree(t, e.s.Agent("recorded").Dir)
	before := tree(t, e.s.AgentsDir())
	want := gc.Result{DryRun: true, Kept: []string{cur}, Leftovers: []string{"orphan"}}
	checkResult(t, e.gc(t, true), want)
	if after := tree(t, e.s.AgentsDir()); after != before {
		t.Fatalf("dry run changed agents/:\nbefore\n%s\nafter\n%s", before, after)
	}

	want.DryRun = false
	checkResult(t, e.gc(t, false), want)
	if exists(t, orphan) {
		t.Errorf("leftover %s still on disk", orphan)
	}
	for _, d := range []string{busyUpper, busyWork} {
		if !exists(t, d) {
			t.Errorf("leftover %s removed while a live overlay uses it", d)
		}
	}
	if !exists(t, filepath.Join(e.s.AgentsDir(), "stray-file")) {
		t.Errorf("a file in agents/ was removed")
	}

	holder.stop()
	waitOverlays(t, "after the holder was killed", func(live []sandbox.LiveOverlay) bool {
		return !hasUpper(upperA)(live) && !hasUpper(h+"/upper-b")(live)
	})
	checkResult(t, e.gc(t, false), gc.Result{Kept: []string{cur}, Leftovers: []string{"busy-upper", "busy-work"}})
	for _, d := range []string{busyUpper, busyWork} {
		if exists(t, d) {
			t.Errorf("leftover %s not removed once no overlay used it", d)
		}
	}

	if got := tree(t, e.s.Agent("recorded").Dir); got != recordedTree {
		t.Errorf("agent with a record was touched:\nbefore\n%s\nafter\n%s", recordedTree, got)
	}
	if got, err := agent.Read(e.s, "recorded"); err != nil || got.State != agent.Ready {
		t.Errorf("recorded agent: %+v, %v", got, err)
	}
	if !e.registered(t, rec.Worktree) || !e.branchExists(rec.Branch) {
		t.Errorf("recorded agent's worktree or branch is gone")
	}
	if ents, err := os.ReadDir(e.s.AgentsDir()); err != nil || len(ents) != 2 {
		t.Errorf("agents/ holds %v (%v), want recorded and stray-file", ents, err)
	}
}

// mountOnce mounts agent name's overlay (upper/, work/ in its dir) on lower
// in a sandbox that writes through it and exits, as an agent's build would:
// upper/ gets a dir ro/ with a file and a whiteout for the base's artifact,
// and work/work is left with mode 0.
func mountOnce(t *testing.T, e *env, name, lower string) {
	t.Helper()
	dir, err := filepath.EvalSymlinks(e.s.Agent(name).Dir)
	if err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(e.root, "mnt-"+name)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := sandbox.Command(sandbox.Plan{
		Overlays: []sandbox.Overlay{{Lower: lower, Upper: filepath.Join(dir, "upper"), Work: filepath.Join(dir, "work"), Target: mnt}},
		Argv:     []string{"sh", "-c", "mkdir ro && echo x > ro/f && rm debug/artifact"},
		Dir:      mnt,
		Env:      []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("write through %s's overlay: %v\n%s", name, err, out)
	}
	if !exists(t, filepath.Join(dir, "upper", "ro", "f")) || !exists(t, filepath.Join(dir, "upper", "debug", "artifact")) {
		t.Fatalf("the overlay wrote nothing into %s/upper", dir)
	}
}

// An unfinished spawn (state creating) whose spawner is gone (agent lock
// free) is rolled back, and no longer keeps its base; one whose spawner
// still holds the agent lock is left alone.
func TestRollsBackUnfinishedSpawns(t *testing.T) {
	e := newEnv(t)
	cur := e.makeBase(t, e.c2, "00000000000000cc", false)
	e.setCurrent(t, cur)
	deadBase := e.makeBase(t, e.c1, "00000000000000aa", false)
	liveBase := e.makeBase(t, e.c1, "00000000000000bb", false)
	dead := e.makeAgent(t, "dead", deadBase, agent.Creating, fork.NameCopy)
	live := e.makeAgent(t, "spawning", liveBase, agent.Creating, fork.NameCopy)
	// The fork of a read-only base dir is read-only too.
	if err := os.Chmod(filepath.Join(e.s.Agent("dead").Target, "debug"), 0o555); err != nil {
		t.Fatal(err)
	}

	l, err := lock.Take(e.s.Agent(live.Name).Lock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()

	intact := func(r *agent.Record, what string) {
		t.Helper()
		if got, err := agent.Read(e.s, r.Name); err != nil || got.State != agent.Creating {
			t.Errorf("%s: agent %s record %+v, %v", what, r.Name, got, err)
		}
		if !e.registered(t, r.Worktree) || !exists(t, filepath.Join(r.Worktree, "README")) || !e.branchExists(r.Branch) {
			t.Errorf("%s: agent %s's worktree or branch is gone", what, r.Name)
		}
		if !exists(t, filepath.Join(e.s.Agent(r.Name).Target, "debug", "artifact")) {
			t.Errorf("%s: agent %s's fork is gone", what, r.Name)
		}
	}
	rolledBack := func(r *agent.Record) {
		t.Helper()
		if exists(t, e.s.Agent(r.Name).Dir) {
			t.Errorf("agent %s's dir still on disk", r.Name)
		}
		if e.registered(t, r.Worktree) || exists(t, r.Worktree) {
			t.Errorf("agent %s's worktree not removed", r.Name)
		}
		if e.branchExists(r.Branch) {
			t.Errorf("agent %s's branch not deleted", r.Name)
		}
	}

	want := gc.Result{DryRun: true, Agents: []string{"dead"}, Bases: []string{deadBase}, Kept: []string{cur, liveBase}}
	checkResult(t, e.gc(t, true), want)
	intact(dead, "dry run")
	intact(live, "dry run")
	if _, err := base.Read(e.s, deadBase); err != nil {
		t.Errorf("dry run: %v", err)
	}

	want.DryRun = false
	checkResult(t, e.gc(t, false), want)
	rolledBack(dead)
	if exists(t, e.s.BaseDir(deadBase)) {
		t.Errorf("base %s of the rolled-back agent not deleted", deadBase)
	}
	intact(live, "lock held")
	if _, err := base.Read(e.s, liveBase); err != nil {
		t.Errorf("base of a spawn in progress: %v", err)
	}

	l.Release()
	checkResult(t, e.gc(t, false), gc.Result{Agents: []string{"spawning"}, Bases: []string{liveBase}, Kept: []string{cur}})
	rolledBack(live)
	if exists(t, e.s.BaseDir(liveBase)) {
		t.Errorf("base %s not deleted", liveBase)
	}
	if ents, err := os.ReadDir(e.s.AgentsDir()); err != nil || len(ents) != 0 {
		t.Errorf("agents/ holds %v (%v), want nothing", ents, err)
	}
}

// lockFiles lists the entries of bases/ named *.lock.
func (e *env) lockFiles(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(e.s.BasesDir())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range ents {
		if strings.HasSuffix(d.Name(), ".lock") {
			out = append(out, d.Name())
		}
	}
	return out
}

// holdInChild hands a held lock on path to a child process (as Ferry hands
// locks to the processes it runs) and drops its own descriptor: the child
// then holds the lock alone, until it is killed.
func holdInChild(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	l, err := lock.Take(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	child := exec.Command("sleep", "60")
	child.ExtraFiles = []*os.File{l.File()}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if child.ProcessState == nil {
			child.Process.Kill()
			child.Wait()
		}
	})
	return child
}

// A deleted base's lock file goes with it; a lock file whose base has no
// directory (a builder killed before making it, a gc killed between the
// two removals) is swept, unless a process holds it (a build starting);
// a symbolic link named like a lock file is neither followed nor removed;
// a dry run reports the same and deletes nothing.
func TestRemovesLockFiles(t *testing.T) {
	e := newEnv(t)
	cur := e.makeBase(t, e.c2, "00000000000000cc", false)
	e.setCurrent(t, cur)
	old := e.makeBase(t, e.c1, "00000000000000aa", false)
	partial := e.makeBase(t, e.c2, "00000000000000bb", true)

	// A builder killed with SIGKILL right after taking its lock.
	killed := base.ID(e.c1, "00000000000000dd")
	builder := holdInChild(t, e.s.BaseLock(killed))
	builder.Process.Kill()
	builder.Wait()
	// A gc killed after deleting a base's directory, before its lock file.
	halfDeleted := base.ID(e.c2, "00000000000000ee")
	l, err := lock.TryTake(e.s.BaseLock(halfDeleted))
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	// A builder that holds its lock and has not made its directory yet.
	starting := base.ID(e.c1, "00000000000000ff")
	builder = holdInChild(t, e.s.BaseLock(starting))
	// Not Ferry's: a symbolic link named like a lock, to a file that must
	// not come to exist.
	victim := filepath.Join(e.root, "victim")
	link := e.s.BaseLock(base.ID(e.c2, "0000000000000099"))
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}

	want := gc.Result{DryRun: true, Bases: []string{old, partial}, Kept: []string{cur},
		SweptLocks: []string{killed, halfDeleted}}
	before := tree(t, e.s.Dir)
	checkResult(t, e.gc(t, true), want)
	if after := tree(t, e.s.Dir); after != before {
		t.Fatalf("dry run changed the store:\nbefore\n%s\nafter\n%s", before, after)
	}

	want.DryRun = false
	checkResult(t, e.gc(t, false), want)
	wantLocks := []string{filepath.Base(e.s.BaseLock(cur)), filepath.Base(e.s.BaseLock(starting)), filepath.Base(link)}
	slices.Sort(wantLocks)
	if got := e.lockFiles(t); !slices.Equal(got, wantLocks) {
		t.Fatalf("lock files after gc: %v, want %v", got, wantLocks)
	}
	if held, err := lock.Held(e.s.BaseLock(starting)); err != nil || !held {
		t.Fatalf("the starting builder's lock: held %v, %v", held, err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("the symbolic link in bases/: %v, %v", fi, err)
	}
	if exists(t, victim) {
		t.Fatal("gc followed a symbolic link in bases/")
	}

	// The builder dies before making its directory: the next pass sweeps.
	builder.Process.Kill()
	builder.Wait()
	checkResult(t, e.gc(t, false), gc.Result{Kept: []string{cur}, SweptLocks: []string{starting}})
	wantLocks = []string{filepath.Base(e.s.BaseLock(cur)), filepath.Base(link)}
	slices.Sort(wantLocks)
	if got := e.lockFiles(t); !slices.Equal(got, wantLocks) {
		t.Fatalf("lock files after the second gc: %v, want %v", got, wantLocks)
	}
	checkResult(t, e.gc(t, false), gc.Result{Kept: []string{cur}})
}

// gc works for an ordinary user too: overlayfs's mode-0 work dirs and
// read-only fork dirs are then removable only by making them writable.
func TestGCAsUnprivilegedUser(t *testing.T) {
	unpriv.Rerun(t, "^Test(DeletesUnreferencedBases|SkipsLockedBases|KeepsBaseUnderLiveOverlay|RemovesLeftoverAgentDirs|RollsBackUnfinishedSpawns|RemovesLockFiles)$")
}
