// Package hostpaths_test runs the oracle (internal/oracle) without the
// namespace sandbox: bases and agents build at host paths. It sits in a
// package of its own, beside the main oracle's, so that each test binary
// stays well inside its timeout on a loaded machine.
package hostpaths_test

import (
	"testing"

	"github.com/ferrydev/ferry/internal/oracle"
)

func TestMain(m *testing.M) { oracle.Main(m) }

// TestFerryAgentsBuildTheirOwnCodeOff is the oracle without the namespace
// sandbox (sandbox mode off): bases and agents build at host paths, every
// fork relocated, and each agent's app must report its own worktree where
// the reference's reports the reference's copy.
func TestFerryAgentsBuildTheirOwnCodeOff(t *testing.T) { oracle.RunFerry(t, "off") }
