// Package hostile_test holds the tests of agents under attack: build
// scripts that try to escape their sandbox or plant hooks, agents that try
// to write their base, tampered and damaged records, and kills at random
// instants. They share internal/agenttest with pkg/agent's own tests and sit
// in a package of their own so that each test binary stays well inside its
// timeout on a loaded machine.
package hostile_test

import (
	"testing"

	"github.com/ferrydev/ferry/internal/agenttest"
)

func TestMain(m *testing.M) { agenttest.Main(m) }
