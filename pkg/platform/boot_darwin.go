package platform

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// BootID names this boot of the kernel (its boot time), or "" when it
// cannot be read. What a process wrote is in the page cache for as long as
// the boot lasts, written back or not; after a crash it may be torn.
func BootID() string {
	tv, err := unix.SysctlTimeval("kern.boottime")
	if err != nil {
		return ""
	}
	return fmt.Sprintf("boot-%d.%06d", tv.Sec, tv.Usec)
}
