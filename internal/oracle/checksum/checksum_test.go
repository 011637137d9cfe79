// Package checksum_test runs the oracle (internal/oracle) in checksum
// freshness mode on the nightly toolchain. It sits in a package of its
// own, beside the main oracle's, so that each test binary stays well
// inside its timeout on a loaded machine.
package checksum_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/oracle"
)

func TestMain(m *testing.M) { oracle.Main(m) }

// TestFerryAgentsBuildTheirOwnCodeChecksum is the oracle in checksum
// freshness mode ([base] freshness = "checksum"), with bases and agents
// on the rustup nightly (RUSTUP_TOOLCHAIN=nightly for Ferry's commands
// only: the references stay on the default toolchain, whose template they
// reuse, and compare the programs' output, not the compiler's). The
// registry's proc-macro2 1.0.47 turns on nightly features today's nightly
// no longer has unless -Zallow-features leaves them out (its build script
// reads the flag), so Ferry's commands also get RUSTFLAGS=-Zallow-features=.
func TestFerryAgentsBuildTheirOwnCodeChecksum(t *testing.T) {
	out, err := exec.Command("rustup", "toolchain", "list").Output()
	if err != nil || !strings.Contains(string(out), "nightly") {
		t.Skipf("no rustup nightly toolchain (`rustup toolchain list`: %v)", err)
	}
	oracle.RunFerry(t, "auto", func(f *oracle.Ferry) {
		f.Freshness = "checksum"
		f.Env = append(oracle.DropEnv(f.Env, "RUSTUP_TOOLCHAIN", "RUSTFLAGS"), "RUSTUP_TOOLCHAIN=nightly", "RUSTFLAGS=-Zallow-features=")
	})
}
