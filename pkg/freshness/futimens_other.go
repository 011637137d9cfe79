//go:build !linux

package freshness

import (
	"time"

	"golang.org/x/sys/unix"
)

// futimens sets both times of the open file f to t (futimes(2), microsecond
// precision; StampTime is a whole second).
func futimens(f fd, t time.Time) error {
	tv := unix.NsecToTimeval(t.UnixNano())
	return unix.Futimes(int(f), []unix.Timeval{tv, tv})
}
