package toolchain

import (
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/failure"
)

// Checksum freshness ([base] freshness = "checksum") is Cargo's
// -Zchecksum-freshness: a nightly feature, switched on for a whole process
// tree with an environment variable. Nightlies from ContentFingerprintSince
// on also want build.fingerprint = "content" (CARGO_BUILD_FINGERPRINT).
//
// A stable Cargo ignores CARGO_UNSTABLE_* variables without a word (Cargo
// 1.95: the build compares mtimes and succeeds), so the version alone
// would let a base recorded as checksum be built by mtime. ProbeChecksum
// asks Cargo itself: one that reads the variable rejects a value that is
// not a boolean, naming it, before it looks for a manifest.

// The variables of checksum freshness.
const (
	ChecksumFreshnessVar = "CARGO_UNSTABLE_CHECKSUM_FRESHNESS"
	FingerprintVar       = "CARGO_BUILD_FINGERPRINT"
)

// ContentFingerprintSince is the first nightly (by its date) that takes
// CARGO_BUILD_FINGERPRINT=content.
var ContentFingerprintSince = time.Date(2026, 9, 2, 0, 0, 0, 0, time.UTC)

// ChecksumEnv returns the variables that switch checksum freshness on for
// the toolchain whose `rustc -vV` is rustcVerbose: the unstable switch,
// and CARGO_BUILD_FINGERPRINT=content on a nightly dated
// ContentFingerprintSince or later. A nightly is published the day after
// its commit, so its date is the commit-date line's plus a day.
func ChecksumEnv(rustcVerbose string) []string {
	env := []string{ChecksumFreshnessVar + "=true"}
	if d, ok := nightlyDate(rustcVerbose); ok && !d.Before(ContentFingerprintSince) {
		env = append(env, FingerprintVar+"=content")
	}
	return env
}

// nightlyDate is the date of the nightly whose `rustc -vV` is v, if it is one.
func nightlyDate(v string) (time.Time, bool) {
	var release, date string
	for line := range strings.Lines(v) {
		key, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch key {
		case "release":
			release = strings.TrimSpace(val)
		case "commit-date":
			date = strings.TrimSpace(val)
		}
	}
	if !strings.Contains(release, "-nightly") && !strings.Contains(release, "-dev") {
		return time.Time{}, false
	}
	d, err := time.Parse(time.DateOnly, date)
	if err != nil {
		return time.Time{}, false
	}
	return d.AddDate(0, 0, 1), true
}

// checksumProbeValue is what ProbeChecksum sets the variable to: no boolean.
const checksumProbeValue = "ferry-probe"

// ProbeChecksum runs `cargo pkgid` in dir (which must hold no Cargo.toml:
// the toolchain files' scratch directory of the base) with env and the
// switch set to a value that is no boolean, and returns nil when Cargo
// rejected it, naming the variable: that Cargo reads it. Otherwise the
// error (failure.Prereq) says why the toolchain cannot, and the fix.
func (t *Toolchain) ProbeChecksum(dir string, env []string) error {
	if env == nil {
		env = os.Environ()
	}
	path, _ := lookupEnv(env, "PATH")
	cargo, err := lookPath("cargo", path)
	if err != nil {
		return failure.Wrap(failure.Prereq, err, installHint, "cargo not found on PATH")
	}
	cmd := exec.Command(cargo, "pkgid")
	cmd.Dir = dir
	cmd.Env = append(env[:len(env):len(env)], ChecksumFreshnessVar+"="+checksumProbeValue)
	out, _ := cmd.CombinedOutput()
	if strings.Contains(string(out), ChecksumFreshnessVar) {
		return nil
	}
	why := "it is not a nightly: a stable or beta Cargo ignores " + ChecksumFreshnessVar
	if strings.Contains(t.CargoVersion, "-nightly") || strings.Contains(t.CargoVersion, "-dev") {
		why = "it ignored " + ChecksumFreshnessVar
	}
	return failure.New(failure.Prereq,
		`build the repository with a nightly: pin one in a rust-toolchain.toml at the repository root ([toolchain] channel = "nightly", the toolchain `+"`cargo +nightly`"+` picks for one call), or set [base] freshness = "mtime" in ferry.toml`,
		"[base] freshness = \"checksum\" needs Cargo's -Zchecksum-freshness, and %s cannot: %s", strings.TrimSpace(t.Cargo), why)
}
