package fork

import (
	"testing"

	"github.com/ferrydev/ferry/internal/treetest"
)

// The overlay backend's tests mount the fork the way the sandbox does, in
// this test binary re-executed in a user and mount namespace
// (treetest.RunInNamespace).
func TestMain(m *testing.M) { treetest.Main(m) }
