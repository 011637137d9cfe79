package units_test

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// withoutDACOverride runs f as if it were not root, when it is: on a
// thread of its own that drops the capabilities that let root read any
// directory (the thread ends with f, capabilities and all).
func withoutDACOverride(t *testing.T, f func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		f()
		return
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			errc <- err
			return
		}
		data[0].Effective &^= 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_DAC_READ_SEARCH
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			errc <- err
			return
		}
		f()
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Skipf("skipping: cannot drop root's capabilities on a thread: %v", err)
	}
}
