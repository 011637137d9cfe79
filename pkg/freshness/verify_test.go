package freshness

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/git"
)

// The standard test tree: regular files in nested directories, an
// executable, a symlink to a file, a chain of links, and a symlink to a
// directory.
var (
	testFiles = map[string]string{
		"Cargo.toml":    "[package]\nname = \"t\"\n",
		"src/lib.rs":    "pub fn a() -> u32 { 1 }\n",
		"src/util.rs":   "pub fn b() {}\n",
		"data/a.txt":    "alpha\n",
		"data/b.txt":    "bravo\n",
		"d1/x.txt":      "d1 x\n",
		"d1/sub/y.txt":  "d1 y\n",
		"d2/x.txt":      "d2 x\n",
		"d2/sub/y.txt":  "d2 y\n",
		"bin/run.sh":    "#!/bin/sh\n",
		"deep/a/b/c.rs": "// c\n",
	}
	testLinks = map[string]string{
		"link":  "data/a.txt",
		"link2": "link",
		"dlink": "d1",
	}
)

// testRepo is a repository whose commits make the base and agent checkouts.
type testRepo struct {
	t   *testing.T
	r   *fixture.Repo
	tmp string
	A   string // the first commit: testFiles and testLinks
}

func newTestRepo(t *testing.T) *testRepo {
	t.Helper()
	fixture.RequireGit(t)
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "repo")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &fixture.Repo{Dir: dir}
	try(r.Git("init", "-q", "-b", "main")).must(t)
	for p, c := range testFiles {
		if err := r.Write(p, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(r.Path("bin/run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	for p, target := range testLinks {
		if err := os.Symlink(target, r.Path(p)); err != nil {
			t.Fatal(err)
		}
	}
	a, err := r.Commit("A")
	if err != nil {
		t.Fatal(err)
	}
	return &testRepo{t: t, r: r, tmp: tmp, A: a}
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// result carries a call's value and error to must, so that a call
// returning both fits on one line: try(f()).must(t).
type result[T any] struct {
	v   T
	err error
}

func try[T any](v T, err error) result[T] { return result[T]{v, err} }

func (r result[T]) must(t *testing.T) T {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.v
}

// commit applies change to the main checkout and commits it.
func (tr *testRepo) commit(change func(r *fixture.Repo)) string {
	tr.t.Helper()
	change(tr.r)
	return try(tr.r.Commit("change")).must(tr.t)
}

// checkout adds a detached worktree of commit at tmp/rel.
func (tr *testRepo) checkout(rel, commit string) string {
	tr.t.Helper()
	dir := filepath.Join(tr.tmp, rel)
	try(tr.r.Git("worktree", "add", "-q", "--detach", dir, commit)).must(tr.t)
	return dir
}

// base makes the stamped base checkout of commit, as the base builder does.
func (tr *testRepo) base(commit string) string {
	tr.t.Helper()
	dir := tr.checkout("bases/b/src", commit)
	entries := try(try(git.Open(dir)).must(tr.t).LsFiles("")).must(tr.t)
	try(StampBaseCheckout(dir, entries)).must(tr.t)
	return dir
}

// input lists the agent's index and the base commit's tree.
func input(t *testing.T, agent, base, baseCommit string) Input {
	t.Helper()
	return Input{
		AgentDir:   agent,
		AgentIndex: try(try(git.Open(agent)).must(t).LsFiles("")).must(t),
		BaseDir:    base,
		BaseTree:   try(try(git.Open(base)).must(t).LsTree(baseCommit)).must(t),
	}
}

// spawn verifies, applies and freshens the agent checkout against the base.
func spawn(t *testing.T, in Input, notBefore time.Time) *StampPlan {
	t.Helper()
	p := try(Verify(in)).must(t)
	try(p.Apply()).must(t)
	try(FreshenSkipped(in.AgentDir, p, notBefore)).must(t)
	return p
}

func mtime(t *testing.T, p string) time.Time {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime()
}

func isStamped(t *testing.T, root, rel string) bool {
	t.Helper()
	return mtime(t, filepath.Join(root, filepath.FromSlash(rel))).Equal(StampTime)
}

func reasonOf(p *StampPlan, rel string) string {
	for _, s := range p.Skipped() {
		if s.Path == rel {
			return s.Reason
		}
	}
	return ""
}

// checkSkipped fails unless each path is absent from the plan, skipped for
// the given reason ("" for any), and on disk not at the stamp time.
func checkSkipped(t *testing.T, p *StampPlan, agent string, want map[string]string) {
	t.Helper()
	for rel, reason := range want {
		if slices.Contains(p.Files(), rel) || slices.Contains(p.Dirs(), rel) {
			t.Errorf("%q is in the plan", rel)
		}
		got := reasonOf(p, rel)
		if got == "" || (reason != "" && got != reason) {
			t.Errorf("%q: skipped for %q, want %q", rel, got, reason)
		}
		if isStamped(t, agent, rel) {
			t.Errorf("%q carries the stamp time", rel)
		}
	}
}

// checkStamped fails unless each path is in the plan and stamped on disk.
func checkStamped(t *testing.T, p *StampPlan, agent string, rels ...string) {
	t.Helper()
	for _, rel := range rels {
		if !slices.Contains(p.Files(), rel) && !slices.Contains(p.Dirs(), rel) {
			t.Errorf("%q is not in the plan (%s)", rel, reasonOf(p, rel))
		}
		if !isStamped(t, agent, rel) {
			t.Errorf("%q does not carry the stamp time", rel)
		}
	}
}

func TestVerifyIdenticalTreeStampsEverything(t *testing.T) {
	tr := newTestRepo(t)
	base := tr.base(tr.A)
	agent := tr.checkout("agent", tr.A)
	in := input(t, agent, base, tr.A)
	p := spawn(t, in, time.Now())

	var files []string
	for _, e := range in.AgentIndex {
		if e.Mode != git.ModeSymlink {
			files = append(files, e.Path)
		}
	}
	slices.Sort(files)
	if got := p.Files(); !slices.Equal(got, files) {
		t.Errorf("files %q, want %q", got, files)
	}
	if got, want := p.Dirs(), git.TrackedDirs(in.AgentIndex); !slices.Equal(got, want) {
		t.Errorf("dirs %q, want %q", got, want)
	}
	checkStamped(t, p, agent, append(files, git.TrackedDirs(in.AgentIndex)...)...)
	checkSkipped(t, p, agent, map[string]string{"link": ReasonSymlink, "link2": ReasonSymlink, "dlink": ReasonSymlink})
	if links := try(LinkRetargeted(in)).must(t); len(links) != 0 {
		t.Errorf("retargeted links %q in identical checkouts", links)
	}
	if _, err := p.Apply(); err == nil {
		t.Error("a plan was applied twice")
	}
}

func TestVerifyComparesContent(t *testing.T) {
	tr := newTestRepo(t)
	B := tr.commit(func(r *fixture.Repo) { check(t, r.Write("src/util.rs", "pub fn b() { /* B */ }\n")) })
	base := tr.base(tr.A)

	// At commit A: one file edited in place (same size, other bytes, and the
	// stamp time forced on it, as a hook restoring times would), one edited
	// and put back (new mtime, the base's bytes).
	agent := tr.checkout("agent-a", tr.A)
	edited := filepath.Join(agent, "src/lib.rs")
	check(t, os.WriteFile(edited, []byte("pub fn a() -> u32 { 2 }\n"), 0o644))
	check(t, os.Chtimes(edited, StampTime, StampTime))
	reverted := filepath.Join(agent, "data/a.txt")
	check(t, os.WriteFile(reverted, []byte("changed\n"), 0o644))
	check(t, os.WriteFile(reverted, []byte(testFiles["data/a.txt"]), 0o644))
	notBefore := time.Now()
	p := spawn(t, input(t, agent, base, tr.A), notBefore)
	checkSkipped(t, p, agent, map[string]string{"src/lib.rs": ReasonContent})
	checkStamped(t, p, agent, "data/a.txt", "src", "data")
	if m := mtime(t, edited); m.Before(notBefore) {
		t.Errorf("edited file left at %v, before %v", m, notBefore)
	}

	// At commit B the index holds another blob for src/util.rs: bytes put
	// back to the base's do not make it stampable.
	agent = tr.checkout("agent-b", B)
	check(t, os.WriteFile(filepath.Join(agent, "src/util.rs"), []byte(testFiles["src/util.rs"]), 0o644))
	p = spawn(t, input(t, agent, base, tr.A), time.Now())
	checkSkipped(t, p, agent, map[string]string{"src/util.rs": ReasonIndexDiffers})
	checkStamped(t, p, agent, "src/lib.rs", "src")
}

func TestVerifyModeChange(t *testing.T) {
	tr := newTestRepo(t)
	B := tr.commit(func(r *fixture.Repo) { check(t, os.Chmod(r.Path("data/a.txt"), 0o755)) })
	base := tr.base(tr.A)
	agent := tr.checkout("agent", B)
	p := spawn(t, input(t, agent, base, tr.A), time.Now())
	checkSkipped(t, p, agent, map[string]string{"data/a.txt": ReasonIndexDiffers})
	checkStamped(t, p, agent, "data/b.txt", "bin/run.sh", "data")
}

func TestVerifyDeletionUnstampsItsDirectory(t *testing.T) {
	tr := newTestRepo(t)
	B := tr.commit(func(r *fixture.Repo) { check(t, r.Remove("d2/x.txt")) })
	base := tr.base(tr.A)
	agent := tr.checkout("agent", B)
	// Deleted in the working tree only: still in the index.
	check(t, os.Remove(filepath.Join(agent, "deep/a/b/c.rs")))
	p := spawn(t, input(t, agent, base, tr.A), time.Now())
	checkSkipped(t, p, agent, map[string]string{
		"d2":       ReasonEntries,
		"deep/a/b": ReasonEntries,
	})
	if r := reasonOf(p, "deep/a/b/c.rs"); r != ReasonNotRegular {
		t.Errorf("deleted file skipped for %q", r)
	}
	checkStamped(t, p, agent, "d2/sub", "d2/sub/y.txt", "deep/a", "deep", "")
}

func TestVerifyUntrackedFile(t *testing.T) {
	tr := newTestRepo(t)
	base := tr.base(tr.A)
	agent := tr.checkout("agent", tr.A)
	old := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	untracked := filepath.Join(agent, "data/new.txt")
	check(t, os.WriteFile(untracked, []byte("new"), 0o644))
	check(t, os.Chtimes(untracked, old, old))
	notBefore := time.Now()
	p := spawn(t, input(t, agent, base, tr.A), notBefore)
	checkSkipped(t, p, agent, map[string]string{"data": ReasonEntries})
	checkStamped(t, p, agent, "data/a.txt", "data/b.txt", "d1", "")
	if m := mtime(t, untracked); m.Before(notBefore) {
		t.Errorf("untracked file left at %v", m)
	}
}

// TestVerifySymlinks covers links that resolve differently in the agent:
// both ends of each are unstamped, with everything below them.
func TestVerifySymlinks(t *testing.T) {
	cases := []struct {
		name    string
		commit  func(t *testing.T, r *fixture.Repo) // the agent's commit, on top of A
		hook    func(t *testing.T, agent string)    // a change to the agent's working tree
		links   []string                            // LinkRetargeted
		skipped []string                            // unstamped for ReasonLink
		stamped []string
	}{{
		name: "file link retargeted",
		commit: func(t *testing.T, r *fixture.Repo) {
			check(t, os.Remove(r.Path("link")))
			check(t, os.Symlink("data/b.txt", r.Path("link")))
		},
		links:   []string{"link", "link2"}, // link2 reaches the new target through link
		skipped: []string{"data/a.txt", "data/b.txt"},
		stamped: []string{"data", "src/lib.rs", "d1/x.txt"},
	}, {
		name: "link replaced by a file",
		commit: func(t *testing.T, r *fixture.Repo) {
			check(t, os.Remove(r.Path("link")))
			check(t, r.Write("link", "now a file\n"))
		},
		links:   []string{"link", "link2"},
		skipped: []string{"data/a.txt", "link"},
		stamped: []string{"data/b.txt", "data"},
	}, {
		name: "dir link retargeted",
		commit: func(t *testing.T, r *fixture.Repo) {
			check(t, os.Remove(r.Path("dlink")))
			check(t, os.Symlink("d2", r.Path("dlink")))
		},
		links:   []string{"dlink"},
		skipped: []string{"d1", "d1/x.txt", "d1/sub", "d1/sub/y.txt", "d2", "d2/x.txt", "d2/sub", "d2/sub/y.txt"},
		stamped: []string{"data/a.txt", "src", ""},
	}, {
		name: "tracked directory replaced by a link to a copy",
		hook: func(t *testing.T, agent string) {
			check(t, os.Rename(filepath.Join(agent, "d2"), filepath.Join(agent, "d2real")))
			check(t, os.Symlink("d2real", filepath.Join(agent, "d2")))
		},
		links:   []string{"d2"},
		skipped: []string{"d2", "d2/x.txt", "d2/sub/y.txt"},
		stamped: []string{"d1/x.txt"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := newTestRepo(t)
			commit := tr.A
			if c.commit != nil {
				commit = tr.commit(func(r *fixture.Repo) { c.commit(t, r) })
			}
			base := tr.base(tr.A)
			agent := tr.checkout("agent", commit)
			if c.hook != nil {
				c.hook(t, agent)
			}
			in := input(t, agent, base, tr.A)
			if got := try(LinkRetargeted(in)).must(t); !slices.Equal(got, c.links) {
				t.Errorf("LinkRetargeted = %q, want %q", got, c.links)
			}
			p := spawn(t, in, time.Now())
			for _, rel := range c.skipped {
				if slices.Contains(p.Files(), rel) || slices.Contains(p.Dirs(), rel) {
					t.Errorf("%q is in the plan", rel)
				}
				if r := reasonOf(p, rel); r != ReasonLink && !(rel == "link" && r == ReasonIndexDiffers) {
					t.Errorf("%q skipped for %q, want %q", rel, r, ReasonLink)
				}
				if fi, err := os.Lstat(filepath.Join(agent, rel)); err == nil && fi.ModTime().Equal(StampTime) {
					t.Errorf("%q carries the stamp time", rel)
				}
			}
			checkStamped(t, p, agent, c.stamped...)
		})
	}
}

func TestVerifyLinksOutsideTheCheckout(t *testing.T) {
	tr := newTestRepo(t)
	outside := t.TempDir()
	check(t, os.WriteFile(filepath.Join(outside, "o.txt"), []byte("o"), 0o644))
	B := tr.commit(func(r *fixture.Repo) {
		check(t, os.Symlink(filepath.Join(outside, "o.txt"), r.Path("abs")))
		check(t, os.Symlink(outside, r.Path("absdir")))
		// Leaves the checkout: the base (at bases/b/src) and the agent (at
		// agent) sit at different depths, so it lands in different places.
		check(t, os.Symlink("../escape", r.Path("up")))
		check(t, os.Symlink("missing/file", r.Path("dangling")))
	})
	base := tr.base(B)
	agent := tr.checkout("agent", B)
	in := input(t, agent, base, B)
	if got := try(LinkRetargeted(in)).must(t); !slices.Equal(got, []string{"up"}) {
		t.Errorf("LinkRetargeted = %q, want [up]", got)
	}
	p := spawn(t, in, time.Now())
	for _, s := range p.Skipped() {
		if s.Reason != ReasonSymlink {
			t.Errorf("%s skipped for %q", s.Path, s.Reason)
		}
	}
	checkStamped(t, p, agent, "", "data/a.txt")
}

func TestVerifyUnmerged(t *testing.T) {
	tr := newTestRepo(t)
	base := tr.base(tr.A)
	dir := filepath.Join(tr.tmp, "agent")
	try(tr.r.Git("worktree", "add", "-q", "-b", "agent", dir, tr.A)).must(t)
	agent := &fixture.Repo{Dir: dir}
	check(t, agent.Write("src/lib.rs", "pub fn a() -> u32 { 3 }\n"))
	try(agent.Commit("agent")).must(t)
	B := tr.commit(func(r *fixture.Repo) { check(t, r.Write("src/lib.rs", "pub fn a() -> u32 { 4 }\n")) })
	if _, err := agent.Git("merge", "-q", "--no-edit", B); err == nil {
		t.Fatal("merge did not conflict")
	}
	in := input(t, dir, base, tr.A)
	if !slices.ContainsFunc(in.AgentIndex, func(e git.Entry) bool { return e.Stage == 2 }) {
		t.Fatal("no conflict in the index")
	}
	p := spawn(t, in, time.Now())
	checkSkipped(t, p, dir, map[string]string{"src/lib.rs": ReasonUnmerged})
	checkStamped(t, p, dir, "src/util.rs", "data/a.txt")
}

// TestApplyRechecksMetadata changes files and a directory between Verify
// and Apply: none of them is stamped, and FreshenSkipped raises them.
func TestApplyRechecksMetadata(t *testing.T) {
	tr := newTestRepo(t)
	base := tr.base(tr.A)
	agent := tr.checkout("agent", tr.A)
	p := try(Verify(input(t, agent, base, tr.A))).must(t)
	for _, rel := range []string{"data/a.txt", "data/b.txt", "src/util.rs", "d2"} {
		if !slices.Contains(p.Files(), rel) && !slices.Contains(p.Dirs(), rel) {
			t.Fatalf("%s not verified", rel)
		}
	}
	path := func(rel string) string { return filepath.Join(agent, rel) }
	// Touched to the very stamp time: ctime still moves.
	check(t, os.Chtimes(path("data/a.txt"), StampTime, StampTime))
	// Rewritten in place with the same bytes.
	check(t, os.WriteFile(path("data/b.txt"), []byte(testFiles["data/b.txt"]), 0o644))
	// Replaced by a renamed copy with the same bytes and times.
	fi := try(os.Stat(path("src/util.rs"))).must(t)
	check(t, os.WriteFile(path("src/util.rs.tmp"), []byte(testFiles["src/util.rs"]), 0o644))
	check(t, os.Chtimes(path("src/util.rs.tmp"), fi.ModTime(), fi.ModTime()))
	check(t, os.Rename(path("src/util.rs.tmp"), path("src/util.rs")))
	// A file created and removed again: the directory's names are the same.
	check(t, os.WriteFile(path("d2/tmp"), nil, 0o644))
	check(t, os.Remove(path("d2/tmp")))

	st := try(p.Apply()).must(t)
	if st.Files != len(testFiles)-3 {
		t.Errorf("stamped %d files, want %d", st.Files, len(testFiles)-3)
	}
	notBefore := time.Now().Add(time.Hour) // the clock is an hour behind
	try(FreshenSkipped(agent, p, notBefore)).must(t)
	// The rename also changed src.
	for _, rel := range []string{"data/a.txt", "data/b.txt", "src/util.rs", "d2", "src"} {
		if r := reasonOf(p, rel); r != ReasonChanged {
			t.Errorf("%s skipped for %q, want %q", rel, r, ReasonChanged)
		}
		if slices.Contains(p.Files(), rel) || slices.Contains(p.Dirs(), rel) {
			t.Errorf("%s still in the plan after Apply", rel)
		}
		if m := mtime(t, path(rel)); m.Before(notBefore) {
			t.Errorf("%s: mtime %v, before %v", rel, m, notBefore)
		}
	}
	checkStamped(t, p, agent, "src/lib.rs", "d2/x.txt", "data", "d1")
}

func TestFreshenSkipped(t *testing.T) {
	tr := newTestRepo(t)
	base := tr.base(tr.A)
	// Well before the checkout: the kernel's file clock may lag time.Now.
	notBefore := time.Now().Add(-time.Minute)
	agent := tr.checkout("agent", tr.A)
	old := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	oldTS := unix.NsecToTimespec(old.UnixNano())
	setOld := func(rel string) {
		t.Helper()
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(agent, rel), []unix.Timespec{oldTS, oldTS}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
	}
	check(t, os.MkdirAll(filepath.Join(agent, "newdir/sub"), 0o755))
	check(t, os.WriteFile(filepath.Join(agent, "newdir/sub/f"), nil, 0o644))
	check(t, os.Symlink("data/a.txt", filepath.Join(agent, "newlink")))
	for _, rel := range []string{"newdir/sub/f", "newdir/sub", "newdir", "newlink", "link", ".git"} {
		setOld(rel)
	}

	p := try(Verify(input(t, agent, base, tr.A))).must(t)
	try(p.Apply()).must(t)
	n := try(FreshenSkipped(agent, p, notBefore)).must(t)
	// The five old paths, nothing else: the rest is newer than notBefore
	// or stamped.
	if n != 5 {
		t.Errorf("freshened %d paths, want 5", n)
	}
	for _, rel := range []string{"", "newdir/sub/f", "newdir/sub", "newdir", "newlink", "link"} {
		if m := mtime(t, filepath.Join(agent, rel)); m.Before(notBefore) {
			t.Errorf("%q: mtime %v, before %v", rel, m, notBefore)
		}
	}
	// Links were changed as links: their targets keep the stamp time.
	checkStamped(t, p, agent, "data/a.txt", "data")
	if m := mtime(t, filepath.Join(agent, ".git")); !m.Equal(old) {
		t.Errorf(".git was touched: %v", m)
	}

	// Without an applied plan, nothing counts as stamped.
	var zero StampPlan
	if st, err := zero.Apply(); err != nil || st != (Stats{}) {
		t.Errorf("zero plan applied: %+v, %v", st, err)
	}
	n = try(FreshenSkipped(agent, nil, notBefore.Add(time.Hour))).must(t)
	if isStamped(t, agent, "data/a.txt") || isStamped(t, agent, "") || n < len(testFiles) {
		t.Errorf("FreshenSkipped without a plan left stamped paths (%d freshened)", n)
	}
	if m := mtime(t, filepath.Join(agent, ".git")); !m.Equal(old) {
		t.Errorf(".git was touched: %v", m)
	}
}

func TestVerifyRefusesBadInput(t *testing.T) {
	tr := newTestRepo(t)
	base := tr.base(tr.A)
	in := input(t, base, base, tr.A)
	if _, err := Verify(in); err == nil {
		t.Error("verified a checkout against itself")
	}
	in.AgentDir = filepath.Join(tr.tmp, "missing")
	if _, err := Verify(in); err == nil {
		t.Error("verified a missing agent checkout")
	}
}

func TestResolve(t *testing.T) {
	root := try(canonicalDir(t.TempDir())).must(t)
	check(t, os.MkdirAll(filepath.Join(root, "c/d"), 0o755))
	check(t, os.WriteFile(filepath.Join(root, "c/d/f"), nil, 0o644))
	for link, target := range map[string]string{
		"a": "b", "b": "c/d/../d", "f": "a/f", "loop1": "loop2", "loop2": "loop1",
		"dangling": "nope/x", "abs": "/", "up": "../x", "c/d/back": "../../f",
		"through": "c/d/f/x",
	} {
		check(t, os.Symlink(target, filepath.Join(root, link)))
	}
	for rel, want := range map[string]string{
		"a": "in:c/d", "f": "in:c/d/f", "c/d/back": "in:c/d/f", "loop1": "loop",
		"dangling": "in:nope/x", "abs": "out:/", "up": "out:" + filepath.Join(filepath.Dir(root), "x"),
		"through": "in:c/d/f/x", "c/d/f": "in:c/d/f",
	} {
		if got := resolve(root, rel).key(root); got != want {
			t.Errorf("resolve %s = %s, want %s", rel, got, want)
		}
	}
}

func TestExclusionCovers(t *testing.T) {
	x := exclusion{"a/b": true}
	for p, want := range map[string]bool{"a/b": true, "a/b/c": true, "a": false, "a/bc": false, "": false} {
		if x.covers(p) != want {
			t.Errorf("covers(%q) = %v", p, !want)
		}
	}
	if !(exclusion{"": true}).covers("x/y") {
		t.Error("the top level does not cover everything")
	}
}

// A stamped file or directory gets its base twin's mtime, whatever it is: a
// seeded base's checkout carries the refresh's time on what it changed, and
// Cargo compares some mtime-valued fingerprints (a build script's newest
// package file) for equality.
func TestApplyCopiesTheBaseMtime(t *testing.T) {
	tr := newTestRepo(t)
	base := tr.base(tr.A)
	agent := tr.checkout("agent", tr.A)
	in := input(t, agent, base, tr.A)
	p, err := Verify(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Files()) == 0 || len(p.Dirs()) == 0 {
		t.Fatal("nothing to stamp")
	}
	file, dir := p.Files()[0], p.Dirs()[len(p.Dirs())-1]
	refreshed := time.Date(2026, 11, 30, 8, 15, 7, 123456789, time.UTC)
	for _, rel := range []string{file, dir} {
		if err := os.Chtimes(filepath.Join(base, filepath.FromSlash(rel)), refreshed, refreshed); err != nil {
			t.Fatal(err)
		}
	}
	// Verify again: the plan records the base's mtime when it verifies.
	p, err = Verify(in)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{file, dir} {
		if got := mtime(t, filepath.Join(agent, filepath.FromSlash(rel))); !got.Equal(refreshed) {
			t.Errorf("%q: mtime %v, want the base's %v", rel, got, refreshed)
		}
	}
	for _, rel := range p.Files()[1:] {
		if !isStamped(t, agent, rel) {
			t.Errorf("%q: mtime %v, want the base's, the stamp time", rel, mtime(t, filepath.Join(agent, rel)))
		}
	}
}

// TestSameBytes compares files around the read chunk's size: equal bytes,
// one byte changed at the end, and a size other than the one lstat gave
// (a file that grew or shrank while verified).
func TestSameBytes(t *testing.T) {
	const chunk = 64 << 10
	dir := t.TempDir()
	var bufs compareBuffers // reused across sizes, as a comparing goroutine does
	for _, size := range []int{0, 1, 100, chunk - 1, chunk, chunk + 1, 3 * chunk, 3*chunk + 7} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*7 + i/251)
		}
		a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		check(t, os.WriteFile(a, data, 0o644))
		check(t, os.WriteFile(b, data, 0o644))
		compare := func() (bool, error) {
			am, err := lstatMeta(a)
			check(t, err)
			bm, err := lstatMeta(b)
			check(t, err)
			return bufs.sameBytes(pathPlace(a), am, pathPlace(b), bm)
		}
		if same, err := compare(); err != nil || !same {
			t.Errorf("size %d: equal files compared %t, %v", size, same, err)
		}
		if size > 0 {
			other := slices.Clone(data)
			other[size-1] ^= 0xff
			check(t, os.WriteFile(b, other, 0o644))
			if same, err := compare(); err != nil || same {
				t.Errorf("size %d: files differing in their last byte compared %t, %v", size, same, err)
			}
			check(t, os.WriteFile(b, data, 0o644))
		}
		// Both files one byte longer than their lstat said.
		am, err := lstatMeta(a)
		check(t, err)
		bm, err := lstatMeta(b)
		check(t, err)
		for _, p := range []string{a, b} {
			check(t, os.WriteFile(p, append(slices.Clone(data), 'x'), 0o644))
		}
		if same, err := bufs.sameBytes(pathPlace(a), am, pathPlace(b), bm); err != errRacy {
			t.Errorf("size %d: files grown after lstat compared %t, %v; want errRacy", size, same, err)
		}
		// And one byte shorter.
		if size > 0 {
			for _, p := range []string{a, b} {
				check(t, os.WriteFile(p, data[:size-1], 0o644))
			}
			am.size, bm.size = int64(size), int64(size)
			if same, err := bufs.sameBytes(pathPlace(a), am, pathPlace(b), bm); err != errRacy {
				t.Errorf("size %d: files shrunk after lstat compared %t, %v; want errRacy", size, same, err)
			}
		}
	}
}

// symlinks, which stats each directory's entries relative to it, finds
// exactly the links a full-path lstat of each path finds: through a
// linked directory, below a link that dangles or a regular file, and in a
// directory that is not there.
func TestSymlinksIsLstat(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"d1/sub", "d2"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"a.txt", "d1/x.txt", "d1/sub/y.txt", "d2/z.txt"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, to := range map[string]string{"link": "a.txt", "dlink": "d1", "d1/sub/up": "../x.txt", "gone": "nowhere", "d2/loop": "loop"} {
		if err := os.Symlink(to, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	paths := []string{"a.txt", "link", "dlink", "dlink/x.txt", "dlink/sub", "dlink/sub/up", "dlink/sub/y.txt",
		"d1/sub/up", "d1/x.txt", "gone", "gone/x", "a.txt/x", "d2/loop", "d2/loop/x", "missing/x", "missing/deeper/y", "d2", "d2/z.txt"}
	got := symlinks(root, paths)
	for _, p := range paths {
		if want := isSymlink(root, p); got[p] != want {
			t.Errorf("%s: symlinks says %t, lstat %t", p, got[p], want)
		}
	}
	if len(got) != 6 { // link, dlink, dlink/sub/up, d1/sub/up, gone, d2/loop
		t.Errorf("found %d links: %v", len(got), got)
	}
}
