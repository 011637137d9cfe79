package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// Init runs the sandbox child when this process is one, and never returns
// then. Call it first thing in main.
func Init() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case childArg:
		runtime.LockOSThread()
		os.Exit(child())
	case holdArg:
		os.Exit(hold())
	}
}

func child() int {
	report := os.NewFile(3, "status")
	failPath := func(step, path string, err error) int {
		st := status{Step: step, Msg: err.Error(), Path: path}
		var errno unix.Errno
		if e, ok := err.(unix.Errno); ok {
			errno = e
		} else if pe, ok := err.(*os.PathError); ok {
			errno, _ = pe.Err.(unix.Errno)
		} else if ee, ok := err.(*exec.Error); ok {
			_ = ee
		}
		st.Errno = int(errno)
		data, _ := json.Marshal(st)
		report.Write(data)
		return 127
	}
	fail := func(step string, err error) int { return failPath(step, "", err) }
	var cp childPlan
	if err := json.Unmarshal([]byte(os.Getenv(planEnv)), &cp); err != nil {
		return fail("read plan", err)
	}
	p := cp.Plan
	if cp.Joined {
		report.Write([]byte(joinedMark))
		// The namespace's descriptors (fds 4 and 5) must not outlive
		// this exec: they would keep a namespace alive for nothing.
		unix.CloseOnExec(4)
		unix.CloseOnExec(5)
		if err := checkMounts(p); err != nil {
			return fail("check the joined namespace", err)
		}
		if err := checkSealed(p.Store); err != nil {
			return fail("check the joined namespace", err)
		}
		if err := checkMasked(p.Masked); err != nil {
			return fail("check the joined namespace", err)
		}
		if p.World {
			if err := checkWorld(p); err != nil {
				return fail("check the joined namespace", err)
			}
		}
		if p.World || p.Store != "" {
			if err := dropMountCap(); err != nil {
				return fail("drop the capability to mount", err)
			}
		}
	} else {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fail("make / private", err)
		}
		if st, path, err := runSteps(cp.Steps); err != nil {
			return failPath(st, path, err)
		}
	}
	if !cp.Joined && (len(p.Overlays) > 0 || len(p.Private) > 0) {
		// The parent records the namespace an overlay lives in; reading
		// /proc/<pid>/ns from there races with a command that exits at once.
		user, err1 := os.Readlink("/proc/self/ns/user")
		mnt, err2 := os.Readlink("/proc/self/ns/mnt")
		if err := errors.Join(err1, err2); err != nil {
			return fail("read the namespace's identity", err)
		}
		report.Write([]byte(nsMark + user + " " + mnt + "\n"))
		if p.Hold != nil {
			// The holder gets no capability: clear them on this (locked)
			// thread, which forks it.
			if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
				return fail("drop capabilities", err)
			}
			pid, err := startHolder(p.Hold, 4) // a created namespace: the command's files follow the status pipe
			if err != nil {
				return fail("start the namespace's holder", err)
			}
			// A failure from here on returns, and the holder must not keep
			// a namespace nobody will record; a successful exec never
			// runs this.
			defer unix.Kill(pid, unix.SIGKILL)
			report.Write([]byte(holdMark + strconv.Itoa(pid) + "\n"))
		}
	}
	if p.Argv == nil {
		return 0
	}
	if err := unix.Chdir(p.Dir); err != nil {
		return fail("chdir", &os.PathError{Op: "chdir", Path: p.Dir, Err: err})
	}
	path, err := lookPath(p.Argv[0], p.Env)
	if err != nil {
		return fail("exec", err)
	}
	// The command runs without the capability that made the mounts.
	// Capabilities are per thread; this thread is locked and does the exec.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fail("drop capabilities", err)
	}
	unix.CloseOnExec(3)
	err = unix.Exec(path, p.Argv, p.Env)
	return fail("exec", &os.PathError{Op: "exec", Path: path, Err: err})
}

// checkMounts confirms that a joined namespace shows the plan's mounts: each
// bind target is its source, and each overlay target is exactly the plan's
// overlay (IsOverlay: its upper and its work dir both match).
func checkMounts(p Plan) error {
	for _, b := range p.Binds {
		src, err := os.Stat(b.Source)
		if err != nil {
			return err
		}
		dst, err := os.Stat(b.Target)
		if err != nil {
			return err
		}
		if !os.SameFile(src, dst) {
			return fmt.Errorf("%s is not %s in the joined namespace", b.Target, b.Source)
		}
	}
	if len(p.Overlays) == 0 {
		return nil
	}
	mounts, err := ReadMountinfo("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	for _, o := range p.Overlays {
		for _, at := range []string{o.Target, o.View} {
			if at == "" {
				continue
			}
			m := TopMount(mounts, at)
			if m == nil || !m.IsOverlay(o.Upper, o.Work) {
				return fmt.Errorf("%s is not the overlay on %s in the joined namespace", at, o.Upper)
			}
		}
	}
	return nil
}
