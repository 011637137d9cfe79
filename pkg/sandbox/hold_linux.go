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

// holdArg marks a re-executed process as a holder.
const holdArg = "__ferry_sandbox_hold__"

// holdEnv carries the Hold to the holder (the variable a sandbox child
// reads its plan from).
const holdEnv = planEnv

// holdMark starts the line in which a child that started a holder names it
// ("H<pid>\n").
const holdMark = "H"

// Hold asks for a holder in a created namespace.
type Hold struct {
	// Files are the indexes, in the command's ExtraFiles, of the
	// descriptors the holder keeps open (from fd 3 on, in order).
	Files []int         `json:"files"`
	Idle  time.Duration `json:"idle"`
	// Busy is a lock file: while any process holds it, the namespace is
	// in use. Touch's mtime is the latest entry into the namespace.
	Busy  string `json:"busy"`
	Touch string `json:"touch"`
	// Lock is a lock file the holder holds shared on a descriptor of its
	// own, then closes the ones it was given. /proc/locks names the
	// process that took a lock, so through an inherited descriptor the
	// holder's lock would be named after the session that started it,
	// long gone; on its own it is named after the holder.
	Lock string `json:"lock,omitempty"`
}

// HolderPid is the pid of the holder a started command's child started (0
// when the plan had no Hold).
func (c *Cmd) HolderPid() int { return c.holder }

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

// IsHolder reports whether pid is a holder this package started (by its
// command line), for those who must end it.
func IsHolder(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && string(b) == "ferry-hold\x00"+holdArg+"\x00"
}
