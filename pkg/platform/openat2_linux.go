package platform

import (
	"errors"

	"golang.org/x/sys/unix"
)

// openat2Missing reports whether this kernel lacks openat2 (ENOSYS).
func openat2Missing() bool {
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC})
	if err == nil {
		unix.Close(fd)
	}
	return errors.Is(err, unix.ENOSYS)
}
