package freshness

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// futimens sets both times of the open file f to t. It is utimensat(2) on
// the descriptor with a NULL path, which is what futimens(3) is; x/sys only
// offers the path-taking form.
func futimens(f fd, t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	times := [2]unix.Timespec{ts, ts}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(f), 0, uintptr(unsafe.Pointer(&times)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
