package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/lock"
)

// Holding a namespace. An overlay exists only in the namespace that mounted
// it, and that namespace dies with its last process. Agent tools run each
// shell command as a process of its own (Claude Code's Bash tool does), so
// the namespace a `cargo build` created is gone by the time the next command
// runs `./target/debug/app` from the host. A plan with Hold therefore starts,
// in the namespace it creates, one more process: the holder. It runs nothing,
// keeps the namespace (and its mounts) alive, and lets processes outside
// reach them through /proc/<holder pid>/root, until the namespace has been
// idle for Hold.Idle: no process holds Hold.Busy and Hold.Touch's mtime (the
// latest entry) is older, or Hold.Touch is gone. SIGTERM ends it at once;
// whoever must remove what it keeps mounted sends that.
//
// The holder is started by the sandbox child after the mounts are made and
// before it execs the command, with no capabilities, in a session of its
// own, with /dev/null for its standard streams (a tool that waits for the
// command's output to close must not wait for it), and with only the
// descriptors Hold.Files names: never the status pipe, never the busy lock
// that would count it as a user of the agent.

// holdEnv carries the Hold to the holder (the variable a sandbox child
// reads its plan from).
const holdEnv = planEnv

// startHolder starts the holder of h from the sandbox child, whose command's
// ExtraFiles start at fd first, and returns its pid.
func startHolder(h *Hold, first int) (int, error) {
	data, err := json.Marshal(h)
	if err != nil {
		return 0, err
	}
	null, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(null)
	files := []uintptr{uintptr(null), uintptr(null), uintptr(null)}
	for _, i := range h.Files {
		files = append(files, uintptr(first+i))
	}
	// ForkExec passes on every descriptor not marked close-on-exec: the
	// status pipe and the command's files are not (the command needs
	// them). Mark them for the holder's exec and put them back after.
	open := inheritable()
	for _, fd := range open {
		unix.CloseOnExec(fd)
	}
	defer func() {
		for _, fd := range open {
			unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0)
		}
	}()
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"ferry-hold", holdArg}, &syscall.ProcAttr{
		Env:   []string{holdEnv + "=" + string(data)},
		Files: files,
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return 0, fmt.Errorf("start the namespace's holder: %w", err)
	}
	return pid, nil
}

// inheritable lists this process's descriptors from 3 up that an exec
// would pass on.
func inheritable() []int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var fds []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			fds = append(fds, fd)
		}
	}
	return fds
}

// hold is the holder's main: wait until the namespace is idle.
func hold() int {
	var h Hold
	if err := json.Unmarshal([]byte(os.Getenv(holdEnv)), &h); err != nil || h.Idle <= 0 {
		return 2
	}
	if h.Lock != "" {
		fd, err := unix.Open(h.Lock, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return 2
		}
		// Blocks until the session that started it shares its lock.
		if err := unix.Flock(fd, unix.LOCK_SH); err != nil {
			return 2
		}
		for i := range h.Files {
			unix.Close(3 + i)
		}
	}
	tick := min(time.Second, h.Idle/4)
	last := time.Now()
	for {
		time.Sleep(tick)
		now := time.Now()
		if len(lock.Holders(h.Busy)) > 0 {
			last = now
		}
		fi, err := os.Stat(h.Touch)
		if err != nil {
			return 0 // what it held the namespace for is gone (its agent removed)
		}
		if fi.ModTime().After(last) {
			last = fi.ModTime()
		}
		if now.Sub(last) >= h.Idle {
			return 0
		}
	}
}
