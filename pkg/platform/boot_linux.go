package platform

import (
	"os"
	"strings"
)

// BootID names this boot of the kernel (its boot_id), or "" when it cannot
// be read. What a process wrote is in the page cache for as long as the
// boot lasts, written back or not; after a crash it may be torn.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
