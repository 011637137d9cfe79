package base_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/store"
)

// buildLogged builds rev into e's store (cold when asked) and returns the
// result and the build's log.
func (e *env) buildLogged(t *testing.T, s *store.Store, rev string, cold bool) (*base.Result, string) {
	t.Helper()
	settings, err := config.Load(e.repo.Dir, e.vars)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	res, err := base.Build(context.Background(), base.Options{
		Repo: e.g, Settings: settings, Store: s, Rev: rev, Cold: cold, Progress: &log,
	})
	if err != nil {
		t.Fatalf("build %s: %v\n%s", rev, err, log.String())
	}
	return res, log.String()
}

var compiling = regexp.MustCompile(`Compiling ([a-z0-9_-]+) v`)

func compiled(log string) []string {
	var out []string
	for _, m := range compiling.FindAllStringSubmatch(log, -1) {
		out = append(out, m[1])
	}
	sort.Strings(out)
	return out
}

// appOutput runs a base's binary, which prints the marker of the sources it
// was built from.
func appOutput(t *testing.T, r *base.Record) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(r.Target, "debug", fixture.BinName)).Output()
	if err != nil {
		t.Fatalf("run %s's app: %v", r.ID, err)
	}
	return strings.TrimSpace(string(out))
}

// A seeded base is what a cold build of its commit gives (invariant 1 holds
// for bases too), and costs only what the commit changed: along a history
// that edits a leaf crate, the build script's watched directory and the
// symlink's target, and reverts an edit, each seeded base prints the marker
// of its own sources (fixture.ExpectedMarker, exact for these edits) and
// compiles only the crates the change reaches; the first and the deepest
// print the same as a cold base of the same commit too. A commit that
// changes a manifest has other unit inputs and builds cold.
func TestSeededBaseEqualsCold(t *testing.T) {
	e := setupLight(t, "cargo build --workspace --all-targets")
	cold := e.secondStore(t)
	first, _ := e.buildLogged(t, e.store, "HEAD", false)
	if first.Record.Seed != "" {
		t.Fatalf("the first base was seeded from %s", first.Record.Seed)
	}
	type step struct {
		name    string
		edit    func()
		seeded  bool
		compile []string // exactly these crates compile in the seeded build (nil: not checked)
		cold    bool     // compare with a cold base of the commit too
	}
	leaf := fixture.LibPath(fixture.ChainC)
	original := string(must(readFile(e.repo.Path(leaf))))
	steps := []step{
		{"leaf edit", func() { e.repo.Append(leaf, "\n// edited\n") }, true,
			[]string{"app", "chain-a", "chain-b", "chain-c"}, true},
		{"build script input", func() { e.repo.Write(fixture.AssetsDir+"/extra.txt", "more\n") }, true, nil, false},
		{"symlink target", func() { e.repo.Write(fixture.SharedData, "changed shared data\n") }, true, nil, false},
		{"retarget the symlink", func() {
			e.repo.Write("shared/other.txt", "the other shared data\n")
			link := e.repo.Path(fixture.SymlinkPath)
			os.Remove(link)
			if err := os.Symlink("../../../shared/other.txt", link); err != nil {
				t.Fatal(err)
			}
		}, true, nil, false},
		{"revert", func() { e.repo.Write(leaf, original) }, true, nil, true},
		{"manifest", func() { e.repo.Append(fixture.CrateDir(fixture.ChainC)+"/Cargo.toml", "\n# a comment\n") }, false, nil, false},
	}
	for _, s := range steps {
		s.edit()
		c, err := e.repo.Commit(s.name)
		if err != nil {
			t.Fatal(err)
		}
		res, log := e.buildLogged(t, e.store, c, false)
		r := res.Record
		if (r.Seed != "") != s.seeded {
			t.Errorf("%s: seed %q, want seeded=%v\n%s", s.name, r.Seed, s.seeded, log)
		}
		if s.compile != nil && strings.Join(compiled(log), " ") != strings.Join(s.compile, " ") {
			t.Errorf("%s: compiled %v, want %v", s.name, compiled(log), s.compile)
		}
		want, err := fixture.ExpectedMarker(r.Src)
		if err != nil {
			t.Fatal(err)
		}
		got := appOutput(t, r)
		if got != strings.TrimSpace(want) {
			t.Errorf("%s: the seeded base's app prints\n%s\nwant\n%s", s.name, got, want)
		}
		if s.cold {
			coldRes, _ := e.buildLogged(t, cold, c, true)
			if coldOut := appOutput(t, coldRes.Record); coldOut != got {
				t.Errorf("%s: seeded base prints %q, a cold base %q", s.name, got, coldOut)
			}
		}
	}
}

// secondStore is a store of e's repository under another parent, for cold
// reference builds beside e's own.
func (e *env) secondStore(t *testing.T) *store.Store {
	t.Helper()
	common, _ := e.g.CommonDir()
	s, err := store.Open(filepath.Join(t.TempDir(), "cold-home"), common, e.g.Top)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func readFile(p string) ([]byte, error) { return os.ReadFile(p) }

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// buildShimmed builds rev with the shim installed, so the warm build is
// observed (only an observed base seeds across unit inputs).
func (e *env) buildShimmed(t *testing.T, s *store.Store, rev string, cold bool) (*base.Result, string) {
	t.Helper()
	settings, err := config.Load(e.repo.Dir, e.vars)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	res, err := base.Build(context.Background(), base.Options{
		Repo: e.g, Settings: settings, Store: s, Rev: rev, Cold: cold, Progress: &log,
		Shim: true, ShimBin: filepath.Join(testenv.Binaries(t), "ferry-shim"),
	})
	if err != nil {
		t.Fatalf("build %s: %v\n%s", rev, err, log.String())
	}
	return res, log.String()
}

// fingerprints lists the package names of the units in a target's debug
// profile (.fingerprint/<name>-<hash>).
func fingerprints(t *testing.T, target string) map[string]int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(target, "debug", ".fingerprint"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range ents {
		if i := strings.LastIndexByte(e.Name(), '-'); i > 0 {
			out[e.Name()[:i]]++
		}
	}
	return out
}

func treeBytes(t *testing.T, root string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// Invariant 2's third route: a base seeded from an observed base with other
// unit inputs (a member added or removed, a dependency added or removed, a
// feature declared) is pruned of every unit its commit does not use. Along
// ten such refreshes each base is seeded, prints the marker of its own
// sources, keeps no unit of a removed member or dependency, and the last
// one prints what a cold base of its commit prints and its target is
// within 10% of a cold base's size.
func TestSeededAcrossUnitInputsPrunes(t *testing.T) {
	e := setup(t, "cargo build --workspace --all-targets")
	cold := e.secondStore(t)
	first, _ := e.buildShimmed(t, e.store, "HEAD", false)
	if !first.Record.Observed {
		t.Fatalf("the first base's warm build was not observed: %v", first.Record.Unobserved)
	}
	manifest := fixture.CrateDir(fixture.ChainC) + "/Cargo.toml"
	baseManifest := string(must(readFile(e.repo.Path(manifest))))
	rootManifest := string(must(readFile(e.repo.Path("Cargo.toml"))))
	member := `"crates/extra-member",`
	addMember := func() {
		e.repo.Write("Cargo.toml", strings.Replace(rootManifest, "members = [", "members = [\n    "+member, 1))
		e.repo.Write("crates/extra-member/Cargo.toml", "[package]\nname = \"extra-member\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n")
		e.repo.Write("crates/extra-member/src/lib.rs", "pub fn extra() -> u32 { 7 }\n")
	}
	removeMember := func() {
		e.repo.Write("Cargo.toml", rootManifest)
		e.repo.Remove("crates/extra-member")
	}
	// libc: a registry crate (with a build script) nothing else uses.
	addDep := func() { e.repo.Write(manifest, baseManifest+"\n[dependencies]\nlibc = \"0.2\"\n") }
	removeDep := func() { e.repo.Write(manifest, baseManifest) }
	addFeature := func() { e.repo.Write(manifest, baseManifest+"\n[features]\nextra = []\n") }
	steps := []struct {
		name   string
		edit   func()
		absent string // a package no unit of which may be left
	}{
		{"add a member", addMember, ""},
		{"remove the member", removeMember, "extra-member"},
		{"add a dependency", addDep, ""},
		{"remove the dependency", removeDep, "libc"},
		{"declare a feature", addFeature, ""},
		{"drop the feature", removeDep, ""},
		{"add the member again", addMember, ""},
		{"add the dependency too", addDep, ""},
		{"remove both", func() { removeMember(); removeDep() }, "extra-member libc"},
		{"add the dependency again", addDep, ""},
	}
	last := first.Record
	for i, s := range steps {
		s.edit()
		// The lockfile follows the manifests, as a developer's cargo would
		// leave it.
		meta := exec.Command("cargo", "metadata", "--format-version", "1")
		meta.Dir = e.repo.Dir // where the fixture's .cargo/config.toml names the offline crate sources
		if out, err := meta.CombinedOutput(); err != nil {
			t.Fatalf("%s: cargo metadata: %v\n%s", s.name, err, out)
		}
		c, err := e.repo.Commit(s.name)
		if err != nil {
			t.Fatal(err)
		}
		res, log := e.buildShimmed(t, e.store, c, false)
		r := res.Record
		if r.Seed == "" || !r.Observed {
			t.Fatalf("%s: seed %q observed %v (%v)\n%s", s.name, r.Seed, r.Observed, r.Unobserved, log)
		}
		for _, pkg := range strings.Fields(s.absent) {
			if n := fingerprints(t, r.Target)[pkg]; n != 0 {
				t.Errorf("%s: %d unit(s) of %s left in the pruned target", s.name, n, pkg)
			}
		}
		if i > 0 && strings.Contains(steps[i-1].name, "add") && fingerprints(t, last.Target)["libc"]+fingerprints(t, last.Target)["extra-member"] == 0 {
			t.Errorf("%s: the previous base holds neither libc nor extra-member: the absence checks prove nothing", s.name)
		}
		// Each base prints the marker of its own sources (exact here: the
		// edits change manifests, which the marker digests, and no code);
		// the last one prints what a cold base of its commit prints, and is
		// about its size.
		got := appOutput(t, r)
		if want, err := fixture.ExpectedMarker(r.Src); err != nil || got != want {
			t.Errorf("%s: seeded base prints %q, its sources say %q (%v)", s.name, got, want, err)
		}
		if i == len(steps)-1 {
			coldRes, _ := e.buildShimmed(t, cold, c, true)
			if coldOut := appOutput(t, coldRes.Record); coldOut != got {
				t.Errorf("%s: seeded base prints %q, a cold base %q", s.name, got, coldOut)
			}
			sb, cb := treeBytes(t, r.Target), treeBytes(t, coldRes.Record.Target)
			t.Logf("after %d refreshes: seeded target %.1f MB, cold %.1f MB", len(steps), float64(sb)/1e6, float64(cb)/1e6)
			if float64(sb) > 1.1*float64(cb) {
				t.Errorf("the seeded target is %d bytes, more than 10%% over a cold one's %d", sb, cb)
			}
		}
		last = r
	}
}

// A warm build seeded across unit inputs that cannot be observed whole (here
// a cargo call asking for short messages, which the shim cannot read) is
// never published: the target is emptied and the base built again without a
// seed, and it says so.
func TestUnobservedSeededBuildIsRebuiltCold(t *testing.T) {
	e := setup(t, "cargo build --workspace $EXTRA_FLAGS")
	first, _ := e.buildShimmed(t, e.store, "HEAD", false)
	if !first.Record.Observed {
		t.Fatalf("the first base was not observed: %v", first.Record.Unobserved)
	}
	e.repo.Append(fixture.CrateDir(fixture.ChainC)+"/Cargo.toml", "\n[features]\nextra = []\n")
	c, err := e.repo.Commit("declare a feature")
	if err != nil {
		t.Fatal(err)
	}
	settings, err := config.Load(e.repo.Dir, e.vars)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	res, err := base.Build(context.Background(), base.Options{
		Repo: e.g, Settings: settings, Store: e.store, Rev: c, Progress: &log,
		Shim: true, ShimBin: filepath.Join(testenv.Binaries(t), "ferry-shim"),
		Env: append(os.Environ(), "EXTRA_FLAGS=--message-format=short"),
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	r := res.Record
	if r.Seed != "" || r.Observed || len(r.Unobserved) == 0 || !strings.Contains(log.String(), "building again without a seed") {
		t.Fatalf("seed %q observed %v unobserved %v\n%s", r.Seed, r.Observed, r.Unobserved, log.String())
	}
	if len(r.Warnings) == 0 || !strings.Contains(strings.Join(r.Warnings, "\n"), "could not be fully observed") {
		t.Errorf("no warning says why the seed was dropped: %v", r.Warnings)
	}
	want, err := fixture.ExpectedMarker(r.Src)
	if err != nil {
		t.Fatal(err)
	}
	if got := appOutput(t, r); got != strings.TrimSpace(want) {
		t.Errorf("the base prints\n%s\nwant\n%s", got, want)
	}
}
