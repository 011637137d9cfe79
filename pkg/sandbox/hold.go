package sandbox

import (
	"os"
	"strconv"
	"time"
)

// holdArg marks a re-executed process as a holder.
const holdArg = "__ferry_sandbox_hold__"

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

// IsHolder reports whether pid is a holder this package started (by its
// command line), for those who must end it.
func IsHolder(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && string(b) == "ferry-hold\x00"+holdArg+"\x00"
}
