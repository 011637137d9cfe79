package treetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// nsEnv marks a test binary re-executed in a new user and mount namespace
// (RunInNamespace), where the overlay tests mount overlays the way the
// sandbox does. Its value is the mount namespace of the process that
// started it, which the child checks it has left before it touches any
// mount.
const nsEnv = "FERRY_TEST_OVERLAY_NS"

// InNamespace reports whether this process is the re-executed child.
func InNamespace() bool { return os.Getenv(nsEnv) != "" }

// Main is TestMain for a package whose tests call RunInNamespace: in the
// re-executed child it makes the mounts private first.
func Main(m *testing.M) {
	if from := os.Getenv(nsEnv); from != "" {
		if err := privateMounts(from); err != nil {
			fmt.Fprintf(os.Stderr, "tests in a mount namespace: %v\n", err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}

// mountNS names this process's mount namespace, e.g. "mnt:[4026531841]".
func mountNS() (string, error) { return os.Readlink("/proc/self/ns/mnt") }

// privateMounts makes / recursively private, so the overlays the tests
// mount stay in this namespace, after checking that this is not the mount
// namespace from, where that would change the host's mounts.
func privateMounts(from string) error {
	self, err := mountNS()
	if err != nil {
		return err
	}
	if self == from {
		return fmt.Errorf("%s is set but this process is still in mount namespace %s; not touching its mounts", nsEnv, self)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	return nil
}

// RunInNamespace runs the test t is (and its subtests) again in this test
// binary re-executed in a new user and mount namespace, with the
// capabilities the sandbox mounts an overlay with (see platform's
// runOverlayChild), and fails t with the child's output unless the test ran
// there and passed. As root and as an unprivileged user alike, the uid and
// gid are mapped to themselves. The package's TestMain must be Main.
func RunInNamespace(t *testing.T) {
	t.Helper()
	from, err := mountNS()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var levels []string
	for _, name := range strings.Split(t.Name(), "/") {
		levels = append(levels, "^"+regexp.QuoteMeta(name)+"$")
	}
	pattern := strings.Join(levels, "/")
	var out bytes.Buffer
	cmd := exec.Command(exe, "-test.run="+pattern, "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), nsEnv+"="+from)
	cmd.Stdout, cmd.Stderr = &out, &out
	uid, gid := os.Getuid(), os.Getgid()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		GidMappingsEnableSetgroups: false,
		AmbientCaps:                []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_DAC_OVERRIDE},
		Pdeathsig:                  syscall.SIGKILL,
	}
	err = cmd.Run()
	t.Logf("in a new user and mount namespace (uid %d, -test.run=%s):\n%s", uid, pattern, out.String())
	if err != nil {
		t.Fatalf("%s failed in its user and mount namespace: %v", t.Name(), err)
	}
	if !bytes.Contains(out.Bytes(), []byte("--- PASS: "+t.Name()+" (")) {
		t.Fatalf("%s did not pass in its user and mount namespace (skipped, or not run by -test.run=%s)", t.Name(), pattern)
	}
}

// MountView mounts the overlay of lower, upper and work on a fresh
// mountpoint with the sandbox's options, detached at the end of the test,
// and returns the mountpoint.
func MountView(t *testing.T, lower, upper, work string) string {
	t.Helper()
	mnt := t.TempDir()
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work + ",userxattr"
	if err := unix.Mount("overlay", mnt, "overlay", 0, opts); err != nil {
		t.Fatalf("mount -t overlay -o %s %s: %v", opts, mnt, err)
	}
	// Registered after t.TempDir's removal, so it runs before it.
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	return mnt
}

// UnmountView unmounts the view v.
func UnmountView(t *testing.T, v string) {
	t.Helper()
	if err := unix.Unmount(v, 0); err != nil {
		t.Fatalf("unmount %s: %v", v, err)
	}
}
