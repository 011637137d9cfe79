package base_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/store"
)

// setupWith is setup for a fixture generated with opts, and ferry.toml
// holding toml (none when empty).
func setupWith(t *testing.T, opts fixture.Options, toml string) *env {
	t.Helper()
	e := &env{repo: testenv.Repo(t, opts), home: filepath.Join(t.TempDir(), "ferry-home")}
	e.setToml(t, toml)
	e.vars = testenv.NewEnv(t.TempDir(), e.repo.Dir)
	e.vars.Set("FERRY_HOME", e.home)
	var err error
	if e.g, err = git.Open(e.repo.Dir); err != nil {
		t.Fatal(err)
	}
	common, _ := e.g.CommonDir()
	if e.store, err = store.Open(e.home, common, e.g.Top); err != nil {
		t.Fatal(err)
	}
	return e
}

// setToml writes an (untracked) ferry.toml, or removes it when toml is empty.
func (e *env) setToml(t *testing.T, toml string) {
	t.Helper()
	p := filepath.Join(e.repo.Dir, "ferry.toml")
	if toml == "" {
		os.Remove(p)
		return
	}
	if err := os.WriteFile(p, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hasLine reports whether one of lines contains want.
func hasLine(lines []string, want string) bool {
	return slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, want) })
}

// A configured command whose tests and benches do not compile fails the
// base as it always did, saying what did not compile and how to keep the
// base; with [base] keep-going it leaves a ready base whose incomplete
// names them, shown by ferry base --json and ferry base list.
func TestConfiguredKeepGoing(t *testing.T) {
	const warm = "[base]\nwarm = [\"cargo build -p " + fixture.ChainC + " --all-targets --keep-going\"]\n"
	e := setupWith(t, fixture.Options{NightlyBench: true, DeniedLintTest: true}, warm)
	bench := `bench "` + fixture.NightlyBench + `" of crate ` + fixture.ChainC
	test := `test "` + fixture.DeniedLintTest + `" of crate ` + fixture.ChainC

	// Without the key: exit 5, and the error says what did not compile,
	// after how long, and how to keep such a base.
	_, err := e.build(t, "")
	if failure.KindOf(err) != failure.BuildFailed {
		t.Fatalf("err = %v, want a failed warm command", err)
	}
	for _, want := range []string{bench, test, "after "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if hint := failure.HintOf(err); !strings.Contains(hint, "keep-going = true") {
		t.Errorf("the hint does not name the key: %q", hint)
	}
	if cur, _ := e.store.Current(); cur != "" {
		t.Fatalf("current = %q after a failed first build", cur)
	}

	// With it: a ready, current base without them.
	e.setToml(t, warm+"keep-going = true\n")
	res, err := e.build(t, "")
	if err != nil {
		t.Fatal(err)
	}
	r := res.Record
	if cur, _ := e.store.Current(); cur != r.ID {
		t.Fatalf("current = %q, want %q", cur, r.ID)
	}
	// (The nested workspace is the other entry: these builds run without the shim.)
	if !hasLine(r.Incomplete, bench+" did not compile") || !hasLine(r.Incomplete, test+" did not compile") || len(r.Incomplete) != 3 {
		t.Errorf("incomplete = %q, want the bench and the test", r.Incomplete)
	}
	if w := r.Warm[0]; !w.KeepGoing || w.ExitCode == 0 || len(w.Failed) != 2 || w.Seconds <= 0 {
		t.Errorf("warm = %+v, want the failure recorded", w)
	}
	if !hasLine(r.Warnings, "exited with status 101 after") || !hasLine(r.Warnings, bench) {
		t.Errorf("warnings = %q, want what the command cost", r.Warnings)
	}
	// The library was built: what the base holds is warm.
	if _, err := os.Stat(filepath.Join(r.Target, "debug", "libchain_c.rlib")); err != nil {
		t.Errorf("the library is missing from the base: %v", err)
	}

	// ferry base --json reuses it and names what is incomplete; list counts it.
	out, err := e.command("--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		ID         string   `json:"id"`
		Reused     bool     `json:"reused"`
		Incomplete []string `json:"incomplete"`
	}
	if err := json.Unmarshal(out, &got); err != nil || got.ID != r.ID || !got.Reused || !slices.Equal(got.Incomplete, r.Incomplete) {
		t.Errorf("ferry base --json = %s (%v)", out, err)
	}
	out, err = e.command("list").Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "INCOMPLETE") || !regexp.MustCompile(`\sready\s+3\s`).MatchString(lines[1]) {
		t.Errorf("ferry base list:\n%s", out)
	}
}

// A library that does not compile discards the base even under
// keep-going: the commit does not build. The previous current base stays.
func TestBrokenLibraryDiscardsBase(t *testing.T) {
	e := setupWith(t, fixture.Options{DeniedLintTest: true},
		"[base]\nwarm = [\"cargo build -p "+fixture.ChainA+" -p "+fixture.ChainC+" --all-targets --keep-going\"]\nkeep-going = true\n")
	first, err := e.build(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if !hasLine(first.Record.Incomplete, `test "`+fixture.DeniedLintTest+`"`) {
		t.Fatalf("incomplete = %q, want the denied test", first.Record.Incomplete)
	}

	if err := e.repo.Append(fixture.LibPath(fixture.ChainC), "\npub fn broken() -> u32 { \"not a number\" }\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.repo.Commit("Break chain-c"); err != nil {
		t.Fatal(err)
	}
	_, err = e.build(t, "")
	if failure.KindOf(err) != failure.BuildFailed || failure.KindOf(err).ExitCode() != 5 {
		t.Fatalf("err = %v, want a failed warm command (exit 5)", err)
	}
	if !strings.Contains(err.Error(), "library of crate "+fixture.ChainC) || !strings.Contains(failure.HintOf(err), "does not build") {
		t.Errorf("the error does not name the library: %v (hint %q)", err, failure.HintOf(err))
	}
	if cur, _ := e.store.Current(); cur != first.Record.ID {
		t.Fatalf("current = %q, want the previous %q", cur, first.Record.ID)
	}
	ents, _ := os.ReadDir(e.store.BasesDir())
	for _, d := range ents {
		if d.IsDir() && d.Name() != first.Record.ID {
			t.Errorf("the failed base left directory %s", d.Name())
		}
	}
}

// A configured clippy command after a build keeps the base when it hits a
// lint clippy denies by default in a library, with keep-going: the build
// decided that the commit compiles.
func TestConfiguredClippyLintKeepsBase(t *testing.T) {
	if err := exec.Command("cargo", "clippy", "--version").Run(); err != nil {
		t.Skipf("cargo clippy is not installed: %v", err)
	}
	clippy := "cargo clippy -p " + fixture.ChainC + " --keep-going"
	e := setupWith(t, fixture.Options{}, "[base]\nwarm = [\"cargo build -p "+fixture.ChainC+"\", \""+clippy+"\"]\nkeep-going = true\n")
	// clippy::approx_constant is deny-by-default; rustc has no objection.
	if err := e.repo.Append(fixture.LibPath(fixture.ChainC), "\n/// Close enough for rustc.\npub fn pi() -> f64 {\n    3.14\n}\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.repo.Commit("Add pi"); err != nil {
		t.Fatal(err)
	}
	res, err := e.build(t, "")
	if err != nil {
		t.Fatal(err)
	}
	r := res.Record
	want := "library of crate " + fixture.ChainC + " failed clippy (" + clippy + ")"
	if !slices.Contains(r.Incomplete, want) || r.Warm[0].ExitCode != 0 || r.Warm[1].ExitCode == 0 {
		t.Errorf("incomplete = %q, warm = %+v; want %q", r.Incomplete, r.Warm, want)
	}
	if cur, _ := e.store.Current(); cur != r.ID {
		t.Fatalf("current = %q, want %q", cur, r.ID)
	}
}
