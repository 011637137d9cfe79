package testenv

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// SmallFS mounts a tmpfs of size (as mount(8) takes it: "64m") on a new
// temporary directory and returns it, for tests of what a full filesystem
// does; it is unmounted when the test ends. Mounting needs root: without
// it, or where the mount is refused, the test is skipped with the reason.
// A test fills it with Fill, never the machine's own filesystems.
func SmallFS(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root to mount a small tmpfs the test can fill")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+size+",mode=0755"); err != nil {
		t.Skipf("skipping: cannot mount a tmpfs on %s: %v", dir, err)
	}
	// Registered after TempDir's removal, so it runs before it.
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// Fill allocates a file in dir so that about leave bytes stay free on dir's
// filesystem, and returns the file (remove it to free the space again).
func Fill(t testing.TB, dir string, leave int64) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free <= leave {
		t.Fatalf("%s has %d bytes free, not more than the %d to leave", dir, free, leave)
	}
	f, err := os.CreateTemp(dir, "filler-")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, free-leave); err != nil {
		t.Fatalf("fill %s: %v", dir, err)
	}
	return filepath.Clean(f.Name())
}
