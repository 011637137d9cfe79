package fold

import (
	"testing"

	"github.com/ferrydev/ferry/internal/treetest"
)

// The fold tests mount overlays to see what the fold must equal, in this
// test binary re-executed in a user and mount namespace
// (treetest.RunInNamespace).
func TestMain(m *testing.M) { treetest.Main(m) }
