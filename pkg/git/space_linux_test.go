package git

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/failure"
)

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
