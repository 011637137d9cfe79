package git

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/pkg/failure"
)

// TestMain isolates git from the machine's configuration and fixes the
// identities and dates of every commit the tests make.
func TestMain(m *testing.M) {
	tmp, err := filepath.EvalSymlinks(os.TempDir())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for k, v := range map[string]string{
		"GIT_CONFIG_GLOBAL":   "/dev/null",
		"GIT_CONFIG_NOSYSTEM": "1",
		"GIT_AUTHOR_NAME":     "Ferry Test",
		"GIT_AUTHOR_EMAIL":    "test@ferry.invalid",
		"GIT_AUTHOR_DATE":     "2026-01-02T03:04:05Z",
		"GIT_COMMITTER_NAME":  "Ferry Test",
		"GIT_COMMITTER_EMAIL": "test@ferry.invalid",
		"GIT_COMMITTER_DATE":  "2026-01-02T03:04:05Z",
		// Never discover a repository that happens to enclose the temp dir.
		"GIT_CEILING_DIRECTORIES": tmp,
	} {
		os.Setenv(k, v)
	}
	os.Exit(m.Run())
}

// gitT runs git for test setup, independently of the code under test.
func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out))
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tempDir is t.TempDir with symlinks resolved, so that it can be compared
// with what git reports.
func tempDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// newRepo makes a repository with one commit on main, in a directory whose
// name has a space.
func newRepo(t *testing.T) (dir string, r *Repo) {
	t.Helper()
	dir = filepath.Join(tempDir(t), "the repo")
	gitT(t, filepath.Dir(dir), "init", "-q", "-b", "main", dir)
	write(t, filepath.Join(dir, "README"), "hello\n")
	write(t, filepath.Join(dir, "src", "lib.rs"), "pub fn f() {}\n")
	gitT(t, dir, "add", ".")
	gitT(t, dir, "commit", "-q", "-m", "first")
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, r
}

func wantKind(t *testing.T, err error, kind failure.Kind) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want a %v error", kind)
	}
	if got := failure.KindOf(err); got != kind {
		t.Fatalf("error %q has kind %v, want %v", err, got, kind)
	}
}

func TestOpen(t *testing.T) {
	dir, r := newRepo(t)
	if r.Top != dir {
		t.Errorf("Top = %q, want %q", r.Top, dir)
	}

	// From a subdirectory, through a symlink.
	link := filepath.Join(tempDir(t), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	r2, err := Open(filepath.Join(link, "src"))
	if err != nil {
		t.Fatal(err)
	}
	if r2.Top != dir {
		t.Errorf("Top via symlink = %q, want %q", r2.Top, dir)
	}

	common, err := r.CommonDir()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, ".git"); common != want {
		t.Errorf("CommonDir = %q, want %q", common, want)
	}
	// Open learned it from a subdirectory (git may print it relative to
	// there), through the symlink: the same answer, without asking again.
	if r2.common == "" {
		t.Errorf("Open did not keep the common directory")
	}
	if common2, err := r2.CommonDir(); err != nil || common2 != common {
		t.Errorf("CommonDir via symlinked subdirectory = %q, %v; want %q", common2, err, common)
	}
	gd, err := r.GitDir()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, ".git"); gd != want {
		t.Errorf("GitDir = %q, want %q", gd, want)
	}
}

func TestOpenNotARepo(t *testing.T) {
	_, err := Open(tempDir(t))
	wantKind(t, err, failure.Prereq)
	if !strings.Contains(err.Error(), "not inside a git repository") {
		t.Errorf("error %q does not say it is not in a repository", err)
	}
	if failure.HintOf(err) == "" {
		t.Error("no hint")
	}
}

func TestOpenBare(t *testing.T) {
	bare := filepath.Join(tempDir(t), "bare.git")
	gitT(t, filepath.Dir(bare), "init", "-q", "--bare", bare)
	_, err := Open(bare)
	wantKind(t, err, failure.Prereq)
	if !strings.Contains(err.Error(), "bare") {
		t.Errorf("error %q does not mention the bare repository", err)
	}
}

func TestOpenInsideGitDir(t *testing.T) {
	dir, _ := newRepo(t)
	_, err := Open(filepath.Join(dir, ".git"))
	wantKind(t, err, failure.Prereq)
}

func TestOpenMissingDir(t *testing.T) {
	_, err := Open(filepath.Join(tempDir(t), "nope"))
	if err == nil {
		t.Fatal("Open of a missing directory succeeded")
	}
}

// An inherited GIT_DIR (as in a hook) must not redirect git.
func TestInheritedGitDirIgnored(t *testing.T) {
	dir, _ := newRepo(t)
	other, _ := newRepo(t)
	t.Setenv("GIT_DIR", filepath.Join(other, ".git"))
	t.Setenv("GIT_WORK_TREE", other)
	t.Setenv("GIT_INDEX_FILE", filepath.Join(other, ".git", "index"))
	r, err := Open(filepath.Join(dir, "src"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Top != dir {
		t.Errorf("Top = %q, want %q", r.Top, dir)
	}
	common, err := r.CommonDir()
	if err != nil {
		t.Fatal(err)
	}
	if common != filepath.Join(dir, ".git") {
		t.Errorf("CommonDir = %q", common)
	}
}

func TestGitNotOnPath(t *testing.T) {
	dir, _ := newRepo(t)
	t.Setenv("PATH", tempDir(t))
	_, err := Open(dir)
	wantKind(t, err, failure.Prereq)
	if failure.HintOf(err) == "" {
		t.Error("no hint")
	}
}

func TestResolveCommit(t *testing.T) {
	dir, r := newRepo(t)
	head := gitT(t, dir, "rev-parse", "HEAD")
	gitT(t, dir, "branch", "feature")
	gitT(t, dir, "tag", "-a", "-m", "annotated", "v1")
	tree := gitT(t, dir, "rev-parse", "HEAD^{tree}")

	for _, rev := range []string{"HEAD", "main", "feature", "v1", head[:7], head, "refs/heads/main"} {
		got, err := r.ResolveCommit(rev)
		if err != nil {
			t.Errorf("ResolveCommit(%q): %v", rev, err)
			continue
		}
		if got != head {
			t.Errorf("ResolveCommit(%q) = %q, want %q", rev, got, head)
		}
	}

	outFile := filepath.Join(tempDir(t), "out")
	for _, rev := range []string{"nope", "", "HEAD~5", tree, "--help", "-h", "--all", "--output=" + outFile, "-q"} {
		_, err := r.ResolveCommit(rev)
		wantKind(t, err, failure.Usage)
		if rev != "" && !strings.Contains(err.Error(), fmt.Sprintf("revision %q names no commit", rev)) {
			t.Errorf("ResolveCommit(%q) error %q", rev, err)
		}
		if failure.HintOf(err) == "" {
			t.Errorf("ResolveCommit(%q): no hint", rev)
		}
	}
	if _, err := os.Stat(outFile); err == nil {
		t.Error("a revision was taken as an option: --output wrote a file")
	}
}

func TestWorktreeLifecycle(t *testing.T) {
	dir, r := newRepo(t)
	head, err := r.ResolveCommit("HEAD")
	if err != nil {
		t.Fatal(err)
	}
	wtDir := tempDir(t)
	detached := filepath.Join(wtDir, "base with space")
	branched := filepath.Join(wtDir, "agent 1")

	if err := r.WorktreeAddDetached(detached, head); err != nil {
		t.Fatal(err)
	}
	if err := r.WorktreeLock(detached, "ferry base"); err != nil {
		t.Fatal(err)
	}
	if err := r.WorktreeAddBranch(branched, "agent-1", head); err != nil {
		t.Fatal(err)
	}
	if err := r.WorktreeAddBranch(filepath.Join(wtDir, "x"), "agent-1", head); err == nil {
		t.Error("adding a second worktree on an existing branch succeeded")
	} else if !strings.Contains(err.Error(), "already exists") {
		t.Errorf("error %q lacks git's stderr", err)
	}

	wts, err := r.Worktrees()
	if err != nil {
		t.Fatal(err)
	}
	want := []Worktree{
		{Path: dir, Head: head, Branch: "main"},
		{Path: branched, Head: head, Branch: "agent-1"},
		{Path: detached, Head: head, Detached: true, Locked: true, LockReason: "ferry base"},
	}
	sortLinked(wts)
	if !slices.Equal(wts, want) {
		t.Fatalf("Worktrees =\n%+v\nwant\n%+v", wts, want)
	}

	// The worktree's own view.
	wr, err := Open(detached)
	if err != nil {
		t.Fatal(err)
	}
	if wr.Top != detached {
		t.Errorf("Top = %q", wr.Top)
	}
	gd, err := wr.GitDir()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(gd) != filepath.Join(dir, ".git", "worktrees") {
		t.Errorf("GitDir of linked worktree = %q", gd)
	}
	common, err := wr.CommonDir()
	if err != nil {
		t.Fatal(err)
	}
	if common != filepath.Join(dir, ".git") {
		t.Errorf("CommonDir of linked worktree = %q", common)
	}

	if wt, ok, err := r.FindWorktree(branched); err != nil || !ok || wt.Branch != "agent-1" {
		t.Errorf("FindWorktree = %+v, %v, %v", wt, ok, err)
	}

	// Removing a locked worktree with changes in it.
	write(t, filepath.Join(detached, "README"), "changed\n")
	write(t, filepath.Join(detached, "untracked"), "x\n")
	if err := r.WorktreeRemove(detached); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(detached); !os.IsNotExist(err) {
		t.Errorf("worktree directory still there: %v", err)
	}
	if err := r.WorktreeRemove(branched); err != nil {
		t.Fatal(err)
	}
	wts, err = r.Worktrees()
	if err != nil {
		t.Fatal(err)
	}
	if len(wts) != 1 {
		t.Errorf("after removal: %+v", wts)
	}
	// Removing again: gone and unregistered is not an error.
	if err := r.WorktreeRemove(branched); err != nil {
		t.Errorf("second removal: %v", err)
	}
	// The branch is not Ferry's to delete here.
	gitT(t, dir, "rev-parse", "--verify", "refs/heads/agent-1")

	err = r.WorktreeRemove(dir)
	wantKind(t, err, failure.Refused)
	if _, err := os.Stat(filepath.Join(dir, "README")); err != nil {
		t.Fatal("main worktree damaged:", err)
	}

	unrelated := filepath.Join(wtDir, "plain dir")
	if err := os.Mkdir(unrelated, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := r.WorktreeRemove(unrelated); err == nil {
		t.Error("removing an unregistered existing directory succeeded")
	}
	if _, err := os.Stat(unrelated); err != nil {
		t.Error("unregistered directory was touched:", err)
	}
}

// A worktree directory that git no longer lists while a git still works in
// it, as a `git worktree add` that fails leaves it while it deletes what it
// made (its admin dir first, then the directory; a spawn killed mid-add
// leaves its git to die so on its next write), is waited for: its removal
// is not an error once that git has deleted it.
func TestWorktreeRemoveWhileAFailedAddDeletesIt(t *testing.T) {
	_, r := newRepo(t)
	dying := filepath.Join(tempDir(t), "dying")
	write(t, filepath.Join(dying, "src", "lib.rs"), "pub fn f() {}\n")
	// The stand-in for the failing git: a git working in the directory
	// until the directory is deleted (then its input closes).
	git := exec.Command("git", "-C", dying, "hash-object", "--stdin")
	in, err := git.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := git.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); git.Wait() })
	// It works there once it has changed into the directory.
	for start, cwd := time.Now(), ""; cwd != dying; cwd, _ = os.Readlink(fmt.Sprintf("/proc/%d/cwd", git.Process.Pid)) {
		if time.Since(start) > time.Minute {
			t.Fatalf("git never worked in %s (it is in %q)", dying, cwd)
		}
		time.Sleep(time.Millisecond)
	}
	deleted := time.AfterFunc(500*time.Millisecond, func() {
		os.RemoveAll(dying)
		in.Close()
	})
	defer deleted.Stop()
	if err := r.WorktreeRemove(dying); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dying); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("directory left: %v", err)
	}
	// A shell left in a directory git does not list is no git: the
	// removal is refused at once, and the directory left alone.
	plain := filepath.Join(tempDir(t), "plain")
	write(t, filepath.Join(plain, "keep"), "mine\n")
	shell := exec.Command("sleep", "30")
	shell.Dir = plain
	if err := shell.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shell.Process.Kill(); shell.Wait() })
	start := time.Now()
	if err := r.WorktreeRemove(plain); err == nil || !strings.Contains(err.Error(), "not a registered worktree") {
		t.Errorf("removing an unregistered directory: %v", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("waited %v for a process that is no git", waited)
	}
	if _, err := os.Stat(filepath.Join(plain, "keep")); err != nil {
		t.Error("unregistered directory was touched:", err)
	}
}

// A worktree whose .git file is gone while the rest of it stays, as a
// `git worktree remove` killed part way through its delete leaves it, is
// removed and unregistered; git alone refuses it.
func TestWorktreeRemoveHalfDeleted(t *testing.T) {
	dir, r := newRepo(t)
	head := gitT(t, dir, "rev-parse", "HEAD")
	half := filepath.Join(tempDir(t), "half")
	if err := r.WorktreeAddDetached(half, head); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(half, ".git")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "-C", dir, "worktree", "remove", "--force", "--force", "--", half).CombinedOutput(); err == nil {
		t.Fatalf("git removed the half-deleted worktree itself; the case is untested:\n%s", out)
	}
	if err := r.WorktreeRemove(half); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(half); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("directory left: %v", err)
	}
	if wts, err := r.Worktrees(); err != nil || len(wts) != 1 {
		t.Errorf("still registered: %+v %v", wts, err)
	}
}

// A worktree whose directory was deleted by hand is unregistered without
// touching another worktree whose directory is also missing: that proves
// `git worktree prune` was not used, since it would drop both.
func TestWorktreeRemoveMissingDirectory(t *testing.T) {
	dir, r := newRepo(t)
	head := gitT(t, dir, "rev-parse", "HEAD")
	parent := tempDir(t)
	// Reach the worktrees through a symlinked parent, as when /tmp is a link.
	link := filepath.Join(tempDir(t), "link")
	if err := os.Symlink(parent, link); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(link, "mine 1")
	users := filepath.Join(link, "users")
	lockedGone := filepath.Join(link, "locked")
	for _, p := range []string{mine, users, lockedGone} {
		if err := r.WorktreeAddDetached(p, head); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.WorktreeLock(lockedGone, "held"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{mine, users, lockedGone} {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	wts, err := r.Worktrees()
	if err != nil {
		t.Fatal(err)
	}
	sortLinked(wts) // locked, mine 1, users
	if len(wts) != 4 || wts[1].Prunable || !wts[1].Locked || !wts[2].Prunable || !wts[3].Prunable {
		t.Fatalf("before removal: %+v", wts)
	}

	if err := r.WorktreeRemove(mine); err != nil {
		t.Fatal(err)
	}
	if err := r.WorktreeRemove(lockedGone); err != nil {
		t.Fatal(err)
	}
	wts, err = r.Worktrees()
	if err != nil {
		t.Fatal(err)
	}
	if len(wts) != 2 || wts[1].Path != filepath.Join(parent, "users") || !wts[1].Prunable {
		t.Fatalf("after removal: %+v", wts)
	}
	admins, err := os.ReadDir(filepath.Join(dir, ".git", "worktrees"))
	if err != nil {
		t.Fatal(err)
	}
	if len(admins) != 1 || admins[0].Name() != "users" {
		t.Errorf("admin dirs left: %v", admins)
	}
	// Gone and no longer registered: not an error.
	if err := r.WorktreeRemove(mine); err != nil {
		t.Errorf("second removal: %v", err)
	}
}

// sortLinked sorts the linked worktrees by path; git lists them in the
// order of their administrative directories.
func sortLinked(wts []Worktree) {
	if len(wts) > 1 {
		slices.SortFunc(wts[1:], func(a, b Worktree) int { return strings.Compare(a.Path, b.Path) })
	}
}

func TestLsFilesConflictStages(t *testing.T) {
	dir, r := newRepo(t)
	gitT(t, dir, "checkout", "-q", "-b", "other")
	write(t, filepath.Join(dir, "README"), "other\n")
	gitT(t, dir, "commit", "-q", "-am", "other")
	gitT(t, dir, "checkout", "-q", "main")
	write(t, filepath.Join(dir, "README"), "main\n")
	gitT(t, dir, "commit", "-q", "-am", "main")
	cmd := exec.Command("git", "-C", dir, "merge", "-q", "other")
	if err := cmd.Run(); err == nil {
		t.Fatal("merge did not conflict")
	}

	// From a subdirectory: still the whole index, paths from the top.
	entries, err := r.LsFiles(filepath.Join(dir, "src"))
	if err != nil {
		t.Fatal(err)
	}
	var stages []int
	for _, e := range entries {
		if e.Path == "README" {
			stages = append(stages, e.Stage)
			if e.Mode != ModeFile || len(e.Object) != 40 {
				t.Errorf("conflict entry %+v", e)
			}
		}
	}
	if !slices.Equal(stages, []int{1, 2, 3}) {
		t.Errorf("README stages = %v, want [1 2 3] (entries %+v)", stages, entries)
	}
	blob := gitT(t, dir, "rev-parse", ":src/lib.rs")
	if !slices.Contains(entries, Entry{Mode: ModeFile, Object: blob, Stage: 0, Path: "src/lib.rs"}) {
		t.Errorf("src/lib.rs missing or wrong: %+v", entries)
	}
}

func TestLsTreeModes(t *testing.T) {
	dir, r := newRepo(t)
	if err := os.WriteFile(filepath.Join(dir, "run me.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("src/lib.rs", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "a", "b", "deep.txt"), "deep\n")
	gitT(t, dir, "add", ".")
	sub := gitT(t, dir, "rev-parse", "HEAD")
	gitT(t, dir, "update-index", "--add", "--cacheinfo", "160000,"+sub+",vendor/sub")
	gitT(t, dir, "commit", "-q", "-m", "modes")

	entries, err := r.LsTree("HEAD")
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]uint32{}
	for _, e := range entries {
		if e.Stage != 0 {
			t.Errorf("stage %d in tree entry %+v", e.Stage, e)
		}
		modes[e.Path] = e.Mode
	}
	want := map[string]uint32{
		"README":       ModeFile,
		"src/lib.rs":   ModeFile,
		"run me.sh":    ModeExecutable,
		"link":         ModeSymlink,
		"a/b/deep.txt": ModeFile,
		"vendor/sub":   ModeGitlink,
	}
	if fmt.Sprint(modes) != fmt.Sprint(want) {
		t.Errorf("modes = %v, want %v", modes, want)
	}
	for _, e := range entries {
		if e.Path == "vendor/sub" && e.Object != sub {
			t.Errorf("gitlink object %s, want %s", e.Object, sub)
		}
	}

	// The index agrees with the tree after the commit.
	idx, err := r.LsFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(idx, entries) {
		t.Errorf("LsFiles = %+v\nLsTree = %+v", idx, entries)
	}

	got := TrackedDirs(entries)
	wantDirs := []string{"", "a", "a/b", "src", "vendor"}
	if !slices.Equal(got, wantDirs) {
		t.Errorf("TrackedDirs = %q, want %q", got, wantDirs)
	}

	if _, err := r.LsTree("-x"); err == nil {
		t.Error("LsTree of -x succeeded")
	}
}

func TestDirty(t *testing.T) {
	dir, r := newRepo(t)
	st, err := r.Dirty(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 0 {
		t.Fatalf("fresh repo is dirty: %+v", st)
	}

	write(t, filepath.Join(dir, ".gitignore"), "/target/\n*.log\n")
	gitT(t, dir, "add", ".gitignore")
	gitT(t, dir, "commit", "-q", "-m", "ignore")
	write(t, filepath.Join(dir, "README"), "modified\n")
	write(t, filepath.Join(dir, "new dir", "new file.rs"), "x\n")
	write(t, filepath.Join(dir, "target", "debug", "app"), "bin\n")
	write(t, filepath.Join(dir, "build.log"), "log\n")
	gitT(t, dir, "mv", "src/lib.rs", "src/main.rs")

	st, err = r.Dirty(filepath.Join(dir, "src"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]StatusEntry{
		"README":              {X: ' ', Y: 'M', Path: "README"},
		"src/main.rs":         {X: 'R', Y: ' ', Path: "src/main.rs", Orig: "src/lib.rs"},
		"new dir/new file.rs": {X: '?', Y: '?', Path: "new dir/new file.rs"},
		"target/":             {X: '!', Y: '!', Path: "target/"},
		"build.log":           {X: '!', Y: '!', Path: "build.log"},
	}
	if len(st) != len(want) {
		t.Errorf("Dirty = %+v", st)
	}
	for _, e := range st {
		if w, ok := want[e.Path]; !ok || w != e {
			t.Errorf("entry %+v, want %+v", e, w)
		}
	}
	// No optional lock was left behind, and none was needed.
	if _, err := os.Stat(filepath.Join(dir, ".git", "index.lock")); err == nil {
		t.Error("index.lock left behind")
	}
}

func TestParseStatus(t *testing.T) {
	in := "R  new\x00old\x00 M a b\x00C  c2\x00c1\x00?? u\x00"
	got, err := parseStatus([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []StatusEntry{
		{X: 'R', Y: ' ', Path: "new", Orig: "old"},
		{X: ' ', Y: 'M', Path: "a b"},
		{X: 'C', Y: ' ', Path: "c2", Orig: "c1"},
		{X: '?', Y: '?', Path: "u"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v", got)
	}
	for _, bad := range []string{"R  new\x00", "M\x00", "?? x"} {
		if _, err := parseStatus([]byte(bad)); err == nil {
			t.Errorf("parseStatus(%q) succeeded", bad)
		}
	}
}

func TestRunErrorCarriesStderr(t *testing.T) {
	dir, r := newRepo(t)
	_, err := r.Run(dir, "cat-file", "-p", "deadbeef")
	if err == nil {
		t.Fatal("no error")
	}
	var ce *CommandError
	if !errors.As(err, &ce) || ce.ExitCode() != 128 || ce.Stderr == "" {
		t.Fatalf("error %#v", err)
	}
	if !strings.Contains(err.Error(), ce.Stderr) || !strings.Contains(err.Error(), `"`+dir+`"`) {
		t.Errorf("error %q lacks stderr or dir", err)
	}
	out, err := r.Run("", "rev-parse", "--abbrev-ref", "HEAD")
	if err != nil || out != "main\n" {
		t.Errorf("Run = %q, %v", out, err)
	}
}

func TestResolvePath(t *testing.T) {
	real := tempDir(t)
	link := filepath.Join(tempDir(t), "l")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	got, err := ResolvePath(filepath.Join(link, "missing", "deeper"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(real, "missing", "deeper"); got != want {
		t.Errorf("ResolvePath = %q, want %q", got, want)
	}
	if !SamePath(link+"/x/../y", real+"/y") {
		t.Error("SamePath false")
	}
}

// Exclude makes a linked worktree ignore a symbolic link of that name at
// its root (what remap mode's .ferry-target is), keeps the file's lines
// and adds the pattern once.
func TestExclude(t *testing.T) {
	dir, r := newRepo(t)
	head, err := r.ResolveCommit("HEAD")
	if err != nil {
		t.Fatal(err)
	}
	exclude := filepath.Join(dir, ".git", "info", "exclude")
	write(t, exclude, "# mine\n*.tmp") // no final newline
	wt := filepath.Join(tempDir(t), "wt")
	if err := r.WorktreeAddDetached(wt, head); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(wt, ".ferry-target")); err != nil {
		t.Fatal(err)
	}
	if st, err := r.Untracked(wt, ".ferry-target"); err != nil || len(st) != 1 {
		t.Fatalf("before Exclude the link is untracked: %q %v", st, err)
	}
	for range 2 {
		if err := r.Exclude("/.ferry-target"); err != nil {
			t.Fatal(err)
		}
	}
	if ignored, err := r.Ignored(wt, ".ferry-target"); err != nil || !ignored {
		t.Errorf("the linked worktree does not ignore the link: %v %v", ignored, err)
	}
	if st, err := r.Untracked(wt, ".ferry-target"); err != nil || len(st) != 0 {
		t.Errorf("after Exclude git status still lists the link: %q %v", st, err)
	}
	b, _ := os.ReadFile(exclude)
	if string(b) != "# mine\n*.tmp\n/.ferry-target\n" {
		t.Errorf("exclude file holds %q", b)
	}
}

// Another process locking and unlocking a worktree while Worktrees lists
// them never fails the listing. git checks that a lock file exists, then
// reads it, and dies when it vanished in between; a concurrent base build
// that took the spare checkout failed a discard that way. The lock file
// here comes and goes as fast as the machine allows, which loses git that
// race within a few hundred listings.
func TestWorktreesWhileAnotherProcessUnlocks(t *testing.T) {
	dir, r := newRepo(t)
	head := gitT(t, dir, "rev-parse", "HEAD")
	wt := filepath.Join(tempDir(t), "spare")
	if err := r.WorktreeAddDetached(wt, head); err != nil {
		t.Fatal(err)
	}
	locked := filepath.Join(dir, ".git", "worktrees", "spare", "locked")
	stop := make(chan struct{})
	toggled := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				toggled <- n
				return
			default:
			}
			os.WriteFile(locked, []byte("ferry spare"), 0o644)
			os.Remove(locked)
			n++
		}
	}()
	const listings = 300
	var failed []error
	for range listings {
		if _, err := r.Worktrees(); err != nil {
			failed = append(failed, err)
		}
	}
	close(stop)
	n := <-toggled
	if len(failed) > 0 {
		t.Fatalf("%d of %d listings failed while the lock file came and went %d times; the first: %v", len(failed), listings, n, failed[0])
	}
	if n < listings {
		t.Fatalf("the lock file came and went only %d times in %d listings: the race was not run", n, listings)
	}
}

func TestLockFileRace(t *testing.T) {
	for stderr, want := range map[string]bool{
		"fatal: failed to read '.git/worktrees/src6/locked': No such file or directory":   true,
		"fatal: failed to read '/r/.git/worktrees/a b/locked': No such file or directory": true,
		"fatal: failed to read '.git/worktrees/src6/locked': Permission denied":           false,
		"fatal: failed to read '.git/worktrees/src6/gitdir': No such file or directory":   false,
		"fatal: not a git repository": false,
		"":                            false,
	} {
		if got := lockFileRace(stderr); got != want {
			t.Errorf("lockFileRace(%q) = %v, want %v", stderr, got, want)
		}
	}
}
