package units_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/units"
)

// warmCommand is the test's warm command: every target of the workspace
// (libs, bins, tests, examples, build scripts).
var warmCommand = []string{"build", "--all-targets"}

// The property a refresh across unit inputs relies on. A target built for
// one version of the workspace is built again, through the recording shim,
// for the next version, in which a member is gone, a dependency dropped,
// another bumped and a feature changed, as a seeded refresh would build
// it. After the analysis and the prune, no unit of what went is left,
// every unit the new build used is kept, the target holds exactly what a
// cold build of the new version holds (rustc's incremental dirs too: those
// of the units that went go with them), a following build compiles nothing,
// and the binary does what a cold build's does. The warm commands are
// Ferry's default ones.
func TestRefreshAcrossUnitInputs(t *testing.T) {
	testRefresh(t, "/debug/app")
}

// The same with Cargo's build-units layout (-Zbuild-dir-new-layout),
// which needs a nightly Cargo that has it.
func TestRefreshAcrossUnitInputsBuildUnitsLayout(t *testing.T) {
	needCargo(t)
	out, err := exec.Command("cargo", "+nightly", "-Zbuild-dir-new-layout", "build", "--help").CombinedOutput()
	if err != nil {
		t.Skipf("skipping: no nightly cargo with -Zbuild-dir-new-layout (`cargo +nightly -Zbuild-dir-new-layout build --help`: %v: %s)", err, firstLine(string(out)))
	}
	// Set in the environment rather than with -Z, so that the cargo
	// check cargo clippy runs gets it too.
	t.Setenv("CARGO_UNSTABLE_BUILD_DIR_NEW_LAYOUT", "true")
	testRefresh(t, "/debug/app", "+nightly")
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

// warmCommands are Ferry's default warm commands: the build of every
// target, and clippy over the same targets where clippy runs.
func warmCommands(t *testing.T, toolchain []string) [][]string {
	cmds := [][]string{warmCommand}
	if err := exec.Command("cargo", append(append([]string(nil), toolchain...), "clippy", "--version")...).Run(); err != nil {
		t.Logf("warming without clippy: cargo clippy --version: %v", err)
		return cmds
	}
	return append(cmds, []string{"clippy", "--workspace", "--all-targets"})
}

func testRefresh(t *testing.T, app string, toolchain ...string) {
	cmds := warmCommands(t, toolchain)
	warmAll := func(w *ws, dir string) {
		for _, c := range cmds {
			w.mustWarm(dir, c...)
		}
	}
	// The seed: version 1, built cold through the shim.
	w := newWS(t, v1, toolchain...)
	seed, _ := unitsDir(t)
	warmAll(w, seed)
	o1 := w.observe(seed)
	requireComplete(t, o1)
	if n := len(o1.Unused()); n != 0 {
		t.Fatalf("a cold build left %d units unused: %v", n, dirs(o1.Unused()))
	}
	var goneUnits []*units.Unit // of the member, the dropped dependency, and tiny 1.0.0
	for _, u := range o1.Units {
		if u.Package == "gone" || u.Package == "dropme" || u.Package == "tiny" {
			goneUnits = append(goneUnits, u)
		}
	}
	if len(goneUnits) < 4 {
		t.Fatalf("the seed has %d units of gone, dropme and tiny: %v", len(goneUnits), dirs(goneUnits))
	}
	for _, u := range o1.Units {
		if u.Layout != layoutOf(toolchain) {
			t.Fatalf("unit %s has layout %v", u.Dir, u.Layout)
		}
	}

	// The refresh: the next commit's checkout, built into the seed's target.
	refresh, _ := unitsDir(t)
	w.write(v2)
	warmAll(w, refresh)
	o2 := w.observe(refresh)
	requireComplete(t, o2)
	used := o2.Used()
	for _, u := range used {
		if u.Package == "gone" || u.Package == "dropme" {
			t.Errorf("unit %s of %s counts as used", u.Dir, u.Package)
		}
	}
	p, err := units.Prune(o2)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pruned %+v; %d units used", p, len(used))
	if p.Units < len(goneUnits) {
		t.Errorf("pruned %d units, fewer than the seed's %d of what went", p.Units, len(goneUnits))
	}

	// Nothing of what went is left: not its fingerprint dir, nor anything
	// carrying its hash.
	left := entries(t, w.target)
	for _, u := range goneUnits {
		for _, e := range left {
			if strings.Contains(e, u.Hash) {
				t.Errorf("%s of the seed's unit %s (%s) is left", e, u.Dir, u.Package)
			}
		}
	}
	// Every unit the new build used is kept.
	for _, u := range used {
		for _, q := range u.Paths {
			if _, err := os.Lstat(filepath.Join(w.target, q)); err != nil {
				t.Errorf("used unit %s lost %s: %v", u.Dir, q, err)
			}
		}
	}

	// A cold build of a fresh copy of the new version holds the same.
	cold := newWS(t, v2, toolchain...)
	for _, c := range cmds {
		cold.mustPlain(c...)
	}
	if got, want := entries(t, w.target), entries(t, cold.target); !slices.Equal(got, want) {
		t.Errorf("the pruned target differs from a cold build's:\n%s", diff(got, want))
	}

	// The next build compiles nothing.
	for _, c := range cmds {
		r := w.mustPlain(append(append([]string(nil), c...), "--message-format=json")...)
		for _, a := range artifacts(t, r.stdout) {
			if !a.Fresh {
				t.Errorf("cargo %s after the prune compiled %s %v of %s", strings.Join(c, " "), a.Target.Name, a.Target.Kind, a.PackageID)
			}
		}
	}
	// And the binary does what the cold build's does.
	got := runBin(t, filepath.Join(w.target, app))
	want := runBin(t, filepath.Join(cold.target, app))
	if got != want || !strings.Contains(got, "tiny 1.1.0") || strings.Contains(got, "fancy") || strings.Contains(got, "gone") {
		t.Errorf("the refreshed binary prints %q, a cold build's %q", got, want)
	}
}

func layoutOf(toolchain []string) units.Layout {
	if os.Getenv("CARGO_UNSTABLE_BUILD_DIR_NEW_LAYOUT") == "true" {
		return units.BuildUnits
	}
	return units.Legacy
}

func runBin(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
	return strings.TrimSpace(string(out))
}

func dirs(us []*units.Unit) []string {
	var out []string
	for _, u := range us {
		out = append(out, u.Dir)
	}
	return out
}

// diff lists what only got and only want hold.
func diff(got, want []string) string {
	var b strings.Builder
	for _, g := range got {
		if !slices.Contains(want, g) {
			b.WriteString("  only in the pruned target: " + g + "\n")
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			b.WriteString("  only in the cold build's: " + w + "\n")
		}
	}
	return b.String()
}
