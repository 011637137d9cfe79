package platform

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// overlayChildArg marks this binary re-executed by OverlayBlocker as the
// probe's child, in a new user and mount namespace.
const overlayChildArg = "__ferry_overlay_probe_child__"

// runOverlayChild re-executes this binary in a new user and mount namespace
// as the overlay probe's child (overlayChild, below) and returns the step
// that failed with its error, or "" and nil when every step worked. Failing
// to create the namespace is reported as StepCreate. err is for a probe that
// could not run at all.
func runOverlayChild(probe string) (step string, cause, err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", nil, fmt.Errorf("overlay probe: %w", err)
	}
	defer r.Close()
	c := exec.Command("/proc/self/exe", overlayChildArg, probe)
	c.Env = []string{}
	c.ExtraFiles = []*os.File{w} // fd 3 in the child
	var stderr bytes.Buffer
	c.Stdout, c.Stderr = &stderr, &stderr
	uid, gid := os.Getuid(), os.Getgid()
	c.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		GidMappingsEnableSetgroups: false,
		// As in the sandbox, the caller keeps its own uid, so what the
		// mount needs is carried over the exec as ambient capabilities:
		// CAP_SYS_ADMIN to mount, and CAP_DAC_OVERRIDE because overlayfs
		// works in its work dir (work/work, mode 0) with the mounter's
		// credentials, which without it fail with EACCES for a uid mapped
		// to itself (found on Linux 6.18; root mapped to root has both).
		AmbientCaps: []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_DAC_OVERRIDE},
	}
	err = c.Start()
	w.Close()
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			// The binary was replaced or deleted since it started.
			return "", nil, fmt.Errorf("overlay probe: re-execute this binary: %w", err)
		}
		return StepCreate, err, nil
	}
	data, _ := io.ReadAll(io.LimitReader(r, 1<<16))
	waitErr := c.Wait()
	if len(data) == 0 {
		if waitErr != nil {
			return "", nil, fmt.Errorf("overlay probe: the child failed without a report: %w: %s", waitErr, bytes.TrimSpace(stderr.Bytes()))
		}
		return "", nil, nil
	}
	var rep overlayReport
	if err := json.Unmarshal(data, &rep); err != nil {
		return "", nil, fmt.Errorf("overlay probe: bad report from the child: %q", data)
	}
	if rep.Errno != 0 {
		return rep.Step, syscall.Errno(rep.Errno), nil
	}
	return rep.Step, errors.New(rep.Msg), nil
}

// init runs the overlay probe's child when this process is one, and exits.
// It is a package init rather than a function for main to call because the
// probe re-executes whatever binary calls it: every binary that can call
// OverlayBlocker links this package, so none can forget to serve the child.
// The marker is argv[1] and the report pipe must be fd 3, so an ordinary
// start of a binary never takes this path.
func init() {
	if len(os.Args) != 3 || os.Args[1] != overlayChildArg {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(3, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		os.Exit(2)
	}
	os.Exit(overlayChild(os.Args[2]))
}

// overlayChild mounts the throwaway overlay laid out by makeOverlayProbe in
// probe and uses it the way a build would. The first failing step goes to
// the parent over fd 3, with its errno; success is an exit without a report.
// The namespace, and the mount with it, ends with this process.
func overlayChild(probe string) int {
	report := os.NewFile(3, "report")
	fail := func(step string, err error) int {
		rep := overlayReport{Step: step, Msg: err.Error()}
		var errno unix.Errno
		if errors.As(err, &errno) {
			rep.Errno = int(errno)
		}
		data, _ := json.Marshal(rep)
		report.Write(data)
		return 1
	}
	p := func(rel string) string { return filepath.Join(probe, filepath.FromSlash(rel)) }
	if _, err := os.Stat(p("lower/gone")); err != nil {
		return fail(stepReadProbe, err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail(stepPrivate, err)
	}
	opts := "lowerdir=" + p("lower") + ",upperdir=" + p("upper") + ",workdir=" + p("work") + ",userxattr"
	// volatile spares the probe the sync of the whole upper filesystem that
	// unmounting an overlay does (over 100 ms with a build's unwritten
	// data, on every spawn); the probe's layers are thrown away. A kernel
	// that does not know it gets the backend's own options.
	if err := unix.Mount("overlay", p("merged"), "overlay", 0, opts+",volatile"); err != nil {
		if err := unix.Mount("overlay", p("merged"), "overlay", 0, opts); err != nil {
			return fail(stepMount, err)
		}
	}
	if err := os.WriteFile(p("merged/new"), []byte("ferry\n"), 0o644); err != nil {
		return fail(stepWrite, err)
	}
	if _, err := os.Stat(p("upper/new")); err != nil {
		return fail(stepUpper, err)
	}
	// A whiteout: a 0/0 character device in the upper dir.
	if err := os.Remove(p("merged/gone")); err != nil {
		return fail(stepWhiteout, err)
	}
	// An opaque directory: the user.overlay.opaque xattr in the upper dir.
	if err := os.RemoveAll(p("merged/dir")); err != nil {
		return fail(stepOpaque, err)
	}
	if err := os.Mkdir(p("merged/dir"), 0o755); err != nil {
		return fail(stepOpaque, err)
	}
	if _, err := os.Stat(p("merged/dir/file")); !errors.Is(err, os.ErrNotExist) {
		if err == nil {
			err = errors.New("the lower directory's file shows through the replaced directory")
		}
		return fail(stepOpaque, err)
	}
	unix.Unmount(p("merged"), unix.MNT_DETACH)
	return 0
}
