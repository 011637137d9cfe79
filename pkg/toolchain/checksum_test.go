package toolchain

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/failure"
)

func TestChecksumEnv(t *testing.T) {
	vv := func(release, date string) string {
		return "rustc " + release + " (e50aa6fba " + date + ")\nbinary: rustc\ncommit-date: " + date + "\nhost: x86_64-unknown-linux-gnu\nrelease: " + release + "\n"
	}
	switchOnly := []string{"CARGO_UNSTABLE_CHECKSUM_FRESHNESS=true"}
	both := []string{"CARGO_UNSTABLE_CHECKSUM_FRESHNESS=true", "CARGO_BUILD_FINGERPRINT=content"}
	for _, c := range []struct {
		name, vv string
		want     []string
	}{
		{"the nightly of 2026-05-19 here", vv("1.97.0-nightly", "2026-05-19"), switchOnly},
		{"nightly-2026-09-01 (commit of 08-31)", vv("1.99.0-nightly", "2026-08-31"), switchOnly},
		{"nightly-2026-09-02 (commit of 09-01)", vv("1.99.0-nightly", "2026-09-01"), both},
		{"a later nightly", vv("1.101.0-nightly", "2026-11-20"), both},
		{"a stable release is no nightly", vv("1.100.0", "2026-10-20"), switchOnly},
		{"no commit date", "release: 1.99.0-nightly\n", switchOnly},
	} {
		if got := ChecksumEnv(c.vv); !slices.Equal(got, c.want) {
			t.Errorf("%s: ChecksumEnv = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestProbeChecksum: the default stable toolchain ignores the switch and
// is refused with the fix; the nightly a toolchain file selects reads it.
func TestProbeChecksum(t *testing.T) {
	requireCargo(t)
	dir := t.TempDir()
	plain, err := Detect(dir, baseEnv())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.CargoVersion, "nightly") {
		t.Skip("the default toolchain is a nightly")
	}
	err = plain.ProbeChecksum(dir, baseEnv())
	if failure.KindOf(err) != failure.Prereq {
		t.Fatalf("stable %s: ProbeChecksum = %v, want a prerequisite error", plain.Cargo, err)
	}
	for _, s := range []string{"not a nightly", "rust-toolchain.toml", "cargo +nightly", `freshness = "mtime"`} {
		if !strings.Contains(err.Error()+failure.HintOf(err), s) {
			t.Errorf("refusal does not say %q: %v / %s", s, err, failure.HintOf(err))
		}
	}
	if !nightlyInstalled(t) {
		t.Skip("no rustup nightly toolchain installed (`rustup toolchain list`)")
	}
	nd := t.TempDir()
	if err := os.WriteFile(filepath.Join(nd, "rust-toolchain.toml"), []byte("[toolchain]\nchannel = \"nightly\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	nightly, err := Detect(nd, baseEnv())
	if err != nil {
		t.Fatal(err)
	}
	if err := nightly.ProbeChecksum(nd, baseEnv()); err != nil {
		t.Errorf("%s: %v", nightly.Cargo, err)
	}
}
