package git

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/failure"
)

// A branch name git refuses, or one git expands to an existing branch, is
// bad input in Ferry's words; a good one passes.
func TestCheckBranchName(t *testing.T) {
	dir, r := newRepo(t)
	if err := r.CheckBranchName("ferry/fix-parser.2"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"bad..name", "-x", "HEAD", "a b", "x.lock", "", "a@{b"} {
		err := r.CheckBranchName(bad)
		wantKind(t, err, failure.Usage)
		if !strings.Contains(err.Error(), "is not a valid branch name") || failure.HintOf(err) == "" {
			t.Errorf("%q: %v (hint %q)", bad, err, failure.HintOf(err))
		}
	}
	gitT(t, dir, "checkout", "-q", "-b", "other")
	gitT(t, dir, "checkout", "-q", "main")
	err := r.CheckBranchName("@{-1}")
	wantKind(t, err, failure.Usage)
	if !strings.Contains(err.Error(), `existing branch "other"`) {
		t.Errorf("@{-1}: %v", err)
	}
}

// git saying "No space left on device" is an ENOSPC, with the path it
// quoted (relative to its working directory) for the printer.
func TestNoSpacePath(t *testing.T) {
	for _, c := range []struct{ stderr, path string }{
		{"fatal: cannot update the ref 'refs/heads/b2': unable to append to '.git/logs/refs/heads/b2': No space left on device", "/repo/.git/logs/refs/heads/b2"},
		{"error: unable to create '/r/.git/packed-refs.lock': No space left on device", "/r/.git/packed-refs.lock"},
		{"fatal: unable to write loose object file: No space left on device", "/repo"},
		{"fatal: 'x' is not a valid branch name", ""},
	} {
		if got, _ := noSpacePath("/repo", c.stderr); got != c.path {
			t.Errorf("%q: %q, want %q", c.stderr, got, c.path)
		}
	}
}

// On a full filesystem, a git call's error is kind NoSpace and names that
// filesystem; worktree add names the new worktree's filesystem when git
// does not quote a path.
func TestGitOnFullFilesystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root to mount a small tmpfs the test can fill")
	}
	mnt := tempDir(t)
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("skipping: cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	dir := filepath.Join(mnt, "repo")
	gitT(t, mnt, "init", "-q", "-b", "main", dir)
	write(t, filepath.Join(dir, "README"), "hello\n")
	gitT(t, dir, "add", ".")
	gitT(t, dir, "commit", "-q", "-m", "first")
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(mnt, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(st.Bavail*uint64(st.Bsize))); err != nil {
		t.Fatal(err)
	}
	f.Close()

	err = r.WorktreeAddBranch(filepath.Join(mnt, "wt"), "b2", "HEAD")
	if err == nil {
		t.Fatal("worktree add on a full filesystem succeeded")
	}
	if !errors.Is(err, syscall.ENOSPC) || failure.KindOf(err) != failure.NoSpace {
		t.Fatalf("err %v: not an ENOSPC of kind NoSpace", err)
	}
	full, ok := failure.Space(err)
	if !ok || full.MountPoint != mnt || !full.Measured || full.Size != 4<<20 {
		t.Fatalf("Space = %+v, %v; want mount point %s, 4 MiB", full, ok, mnt)
	}
	var ce *CommandError
	if !errors.As(err, &ce) || ce.ExitCode() <= 0 {
		t.Fatalf("the git error is no longer a CommandError with git's status: %v", err)
	}
}
