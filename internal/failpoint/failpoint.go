// Package failpoint lets crash tests stop a Ferry process at a named step, as
// a SIGKILL at that moment would: FERRY_FAILPOINT=<name> makes Hit(<name>)
// kill the process, in a build with the ferrytest tag (package knobs). In
// any other build Hit does nothing and the variable is never read.
package failpoint

import (
	"os"
	"syscall"

	"github.com/ferrydev/ferry/internal/knobs"
)

var armed = knobs.FailpointArmed()

// Hit kills the process with SIGKILL when name is the armed failpoint.
func Hit(name string) {
	if knobs.Enabled && armed != "" && armed == name {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
