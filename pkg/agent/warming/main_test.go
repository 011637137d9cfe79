// Package warming_test holds the tests of how agents come to be warm:
// adopting the worktrees agent tools make, the tools' setups (local and
// cloud), and the warm sets bases learn from what agents run. They share
// internal/agenttest with pkg/agent's own tests and sit in a package of
// their own so that each test binary stays well inside its timeout on a
// loaded machine.
package warming_test

import (
	"testing"

	"github.com/ferrydev/ferry/internal/agenttest"
)

func TestMain(m *testing.M) { agenttest.Main(m) }
