package units_test

import (
	"os"
	"testing"
)

// withoutDACOverride runs f when not root; root on macOS cannot drop what
// lets it read any directory on one thread, so the test is skipped.
func withoutDACOverride(t *testing.T, f func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		f()
		return
	}
	t.Skip("skipping: running as root, which only Linux can drop to an ordinary user's reading rights per thread")
}
