package platform

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRealOverlay runs the probe for real on this machine's temp dir and on
// XFS: with user namespaces allowed and a kernel from 5.11, an overlay with
// userxattr mounts, and the probe leaves nothing behind.
func TestRealOverlay(t *testing.T) {
	h := Real()
	if b := h.UsernsBlocker(); b != nil {
		t.Skipf("this host blocks user namespaces: %v", b)
	}
	release := h.KernelRelease()
	if h.kernelBefore(5, 11) {
		t.Skipf("Linux %s is older than 5.11", release)
	}
	dirs := map[string]func(*testing.T) string{"temp": func(t *testing.T) string { return t.TempDir() }, "xfs": xfsDir}
	for name, mk := range dirs {
		t.Run(name, func(t *testing.T) {
			dir := mk(t)
			fs, _ := FilesystemType(dir)
			b, err := h.OverlayBlocker(dir)
			if err != nil {
				t.Fatal(err)
			}
			noProbeLeft(t, dir)
			if b != nil {
				t.Fatalf("uid %d, Linux %s, %s: %v\n%s", h.Uid, release, fs, b, b.Remedy)
			}
			t.Logf("uid %d, Linux %s: an overlay with its upper on %s mounts", h.Uid, release, fs)
		})
	}
	if _, err := h.OverlayBlocker(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("a missing directory gave no error")
	}
}

// TestRealOverlayNoUserXattrs gives the probe a filesystem without user.*
// xattrs for real: a ramfs, which only root can mount here.
func TestRealOverlayNoUserXattrs(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mounting a ramfs takes root")
	}
	dir := t.TempDir()
	if err := unix.Mount("ferry-test", dir, "ramfs", 0, "mode=0755"); err != nil {
		t.Skipf("mount ramfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	b, err := Real().OverlayBlocker(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkBlockerOf(t, b, CheckOverlay, SettingFilesystem, FSRamfs)
	if !errors.Is(b, unix.EOPNOTSUPP) {
		t.Errorf("the blocker does not unwrap to EOPNOTSUPP: %v", b.Unwrap())
	}
	noProbeLeft(t, dir)
}

// TestRealOverlayNested gives the probe a directory that is itself on an
// overlay, as in a container: the kernel refuses it as an upper dir, and
// the probe names the filesystem.
func TestRealOverlayNested(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mounting the outer overlay takes root")
	}
	if b := Real().UsernsBlocker(); b != nil {
		t.Skipf("this host blocks user namespaces: %v", b)
	}
	root := t.TempDir()
	for _, d := range []string{"l", "u", "w", "m"} {
		os.Mkdir(filepath.Join(root, d), 0o755)
	}
	merged := filepath.Join(root, "m")
	opts := "lowerdir=" + filepath.Join(root, "l") + ",upperdir=" + filepath.Join(root, "u") + ",workdir=" + filepath.Join(root, "w")
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Skipf("mount the outer overlay: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(merged, unix.MNT_DETACH) })
	b, err := Real().OverlayBlocker(merged)
	if err != nil {
		t.Fatal(err)
	}
	checkBlockerOf(t, b, CheckOverlay, SettingFilesystem, FSOverlay)
	t.Logf("%v\n%s", b, b.Remedy)
}
