// Package failpoint lets crash tests stop a Ferry process at a named step, as
// a SIGKILL at that moment would: FERRY_FAILPOINT=<name> makes Hit(<name>)
// kill the process. Unset, Hit costs one string comparison.
package failpoint

import (
	"os"
	"syscall"

	"github.com/ferrydev/ferry/internal/knobs"
)

var armed = os.Getenv(knobs.Failpoint)

// Hit kills the process with SIGKILL when name is the armed failpoint.
func Hit(name string) {
	if armed != "" && armed == name {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
