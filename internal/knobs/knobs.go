// Package knobs names the test knobs: the environment variables that only
// tests, and people running them, set. Nothing a user configures is here:
// Ferry's settings and their FERRY_* variables are package config's, and a
// test in package config fails on a FERRY_* name used anywhere else that is
// neither a setting, a knob, nor one of the variables Ferry passes between
// its own processes.
//
// The knobs Ferry's binaries read (OverlayHold, RemapNoProbe, NoDemand, and
// Failpoint through internal/failpoint) are read only in a build with the
// ferrytest tag, which `make test`, the tests' own binaries
// (testenv.Binaries) and `make bench` use: in any other build (make build,
// make install, go install) the functions below are constants, and no
// knob's name is in the binary (TestReleaseBuildHasNoKnobs).
package knobs

import "os"

const (
	// Failpoint arms internal/failpoint in the binaries under test: a crash
	// test stops a Ferry process at a named step.
	Failpoint = "FERRY_FAILPOINT"
	// TestXFS is a directory on an XFS filesystem with reflink, for the
	// reflink tests and figures (.ci/run mounts one).
	TestXFS = "FERRY_TEST_XFS"
	// TestUser is the unprivileged user the sandbox tests re-run as
	// (default ferrytest, which .ci/run creates).
	TestUser = "FERRY_TEST_USER"
	// UnprivChild marks the unprivileged re-run itself.
	UnprivChild = "FERRY_UNPRIV_CHILD"
	// OracleSeed, OracleAgents and OracleRounds replay a run of the
	// correctness oracle.
	OracleSeed   = "FERRY_ORACLE_SEED"
	OracleAgents = "FERRY_ORACLE_AGENTS"
	OracleRounds = "FERRY_ORACLE_ROUNDS"
	// Require, set to 1 (make test sets it), fails a test whose
	// prerequisite is missing where plain go test skips it.
	Require = "FERRY_TEST_REQUIRE"
	// Registry replaces Debian's directory of crate sources for the
	// fixture workspace; an empty directory shows a host without them.
	Registry = "FERRY_FIXTURE_REGISTRY"
	// OverlayHold shortens how long an overlay agent's namespace outlives
	// its last session (a Go duration; package fork's HoldIdle).
	OverlayHold = "FERRY_TEST_OVERLAY_HOLD"
	// RemapNoProbe, set to 1, lets ferry base build in remap mode without
	// toolchain.ProbeRemap: the wiring is tested on toolchains the probe
	// refuses (every one before Rust 1.98), whose builds are correct in
	// remap mode but recompile an edited crate from scratch.
	RemapNoProbe = "FERRY_TEST_REMAP_NOPROBE"
	// NoDemand, set to 1 in a cargo call's environment, makes the shim
	// run an agent's call without recording it in the demand log: the
	// bench's measure of what recording costs a call.
	NoDemand = "FERRY_TEST_NO_DEMAND"
	// NoConfine, set to 1 when an agent is spawned, records it as an
	// agent of a Ferry that confined only the store: the bench's measure
	// of what confining the host costs a call and a spawn.
	NoConfine = "FERRY_TEST_NO_CONFINE"
	// UpdateLists, set to 1, has the tests that hold a checked-in list
	// to the code rewrite it instead of comparing: the package lists of
	// the binaries run on every cargo and rustc call (cmd/*/deps.txt,
	// pkg/cli's TestHotBinariesKeepTheirBudget) and docs/internals.md's
	// packages by floor (docs' TestPackageFloors).
	UpdateLists = "FERRY_UPDATE_LISTS"
)

// Read are the knobs Ferry's binaries read in a ferrytest build, and none
// reads in another.
var Read = []string{Failpoint, OverlayHold, RemapNoProbe, NoDemand, NoConfine}

// DefaultTestUser is the account .ci/run creates for the unprivileged
// re-runs.
const DefaultTestUser = "ferrytest"

// XFS is the TestXFS directory, "" when unset.
func XFS() string { return os.Getenv(TestXFS) }

// User is the unprivileged test user's name.
func User() string {
	if u := os.Getenv(TestUser); u != "" {
		return u
	}
	return DefaultTestUser
}
