//go:build !linux

package freshness

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// futimens sets both times of the open file f to t (futimes(2), microsecond
// precision; StampTime is a whole second).
func futimens(f *os.File, t time.Time) error {
	tv := unix.NsecToTimeval(t.UnixNano())
	return unix.Futimes(int(f.Fd()), []unix.Timeval{tv, tv})
}
