package warming_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/agenttest"
	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/record/demand"
	"github.com/ferrydev/ferry/pkg/warmset"
)

// statsOut is the part of ferry stats --json these tests read.
type statsOut struct {
	Calls    int            `json:"calls"`
	Damaged  int            `json:"damaged"`
	Commands []commandStats `json:"commands"`
}

type commandStats struct {
	Command     string   `json:"command"`
	Calls       int      `json:"calls"`
	FirstBuilds int      `json:"first_builds"`
	HitRate     *float64 `json:"hit_rate"`
	ByBase      []struct {
		Base    string   `json:"base"`
		HitRate *float64 `json:"hit_rate"`
	} `json:"by_base"`
}

// command returns the statistics of command key, or nil.
func (s statsOut) command(key string) *commandStats {
	for i := range s.Commands {
		if s.Commands[i].Command == key {
			return &s.Commands[i]
		}
	}
	return nil
}

func stats(w *agenttest.World, t *testing.T) statsOut {
	t.Helper()
	var s statsOut
	if err := json.Unmarshal([]byte(w.MustFerry(t, "stats", "--json")), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// Demand, end to end with the real shim: three agents each build a
// release of a crate the generated warm commands do not hold, and miss;
// the next base warms that command, and says why; a fresh agent of it
// compiles nothing for it; ferry stats shows the rate rising from the
// miss to 100%, base by base.
func TestDemandWarmsWhatAgentsRun(t *testing.T) {
	w := &agenttest.World{Repo: testenv.Repo(t, fixture.Options{NoRegistry: true}), Bin: testenv.Binaries(t)}
	root := t.TempDir()
	w.Home, w.Worktrees = filepath.Join(root, "home"), filepath.Join(root, "worktrees")
	first := w.MustFerry(t, "base") // no ferry.toml: warm = "auto"
	if !strings.Contains(first, "demand  0 agent call(s)") {
		t.Errorf("ferry base does not say what it learned:\n%s", first)
	}
	release := []string{"build", "--release", "-p", fixture.ChainC}
	const key = "cargo build --release --package=" + fixture.ChainC
	for _, n := range []string{"rel1", "rel2", "rel3"} {
		a := w.Spawn(t, n)
		_, stderr, code := w.Cargo(a.Worktree, nil, release...)
		if code != 0 || len(builtIn(stderr)) == 0 {
			t.Fatalf("%s: cargo %s: exit %d, compiled %q; want a miss\n%s", n, strings.Join(release, " "), code, builtIn(stderr), stderr)
		}
	}
	s := stats(w, t)
	if c := s.command(key); c == nil || c.FirstBuilds != 3 || c.HitRate == nil || *c.HitRate != 0 {
		t.Fatalf("ferry stats: %+v, want %q with 3 first builds at 0%%", s, key)
	}

	// The next base (a new commit) warms it, and says why; a line of the
	// log damaged meanwhile is reported and dropped, nothing more.
	f, err := os.OpenFile(filepath.Join(w.StoreDir(t), "demand.log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("not json\n")
	f.Close()
	if err := w.Repo.Append("README.md", "more\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Repo.Commit("readme"); err != nil {
		t.Fatal(err)
	}
	var r struct {
		Warm []struct {
			Command  string `json:"command"`
			Why      string `json:"why"`
			Demanded int    `json:"demanded"`
		} `json:"warm"`
		Demand struct {
			Calls   int `json:"calls"`
			Damaged int `json:"damaged"`
			Picked  []struct {
				Command string `json:"command"`
			} `json:"picked"`
		} `json:"demand"`
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal([]byte(w.MustFerry(t, "base", "--json")), &r); err != nil {
		t.Fatal(err)
	}
	last := r.Warm[len(r.Warm)-1]
	if last.Command != key+" --keep-going" || last.Demanded != 3 || !strings.Contains(last.Why, "demanded 3 times in 7 days") {
		t.Fatalf("the base's warm set ends %+v, want %q demanded 3 times", last, key)
	}
	for _, w := range r.Warm[:len(r.Warm)-1] {
		if w.Why != "default" {
			t.Errorf("warm command %q: why %q, want default", w.Command, w.Why)
		}
	}
	if len(r.Demand.Picked) != 1 || r.Demand.Calls != 3 || r.Demand.Damaged != 1 {
		t.Errorf("base.json's demand: %+v", r.Demand)
	}
	if !slices.ContainsFunc(r.Warnings, func(s string) bool { return strings.Contains(s, "demand log had 1 line(s) that could not be read") }) {
		t.Errorf("the base does not warn of the damaged log: %q", r.Warnings)
	}

	// A fresh agent of it: nothing to compile for that command.
	a := w.Spawn(t, "rel4")
	_, stderr, code := w.Cargo(a.Worktree, nil, release...)
	if code != 0 || len(builtIn(stderr)) > 0 {
		t.Fatalf("a fresh agent of the base that warmed %q: exit %d, compiled %q\n%s", key, code, builtIn(stderr), stderr)
	}
	c := stats(w, t).command(key)
	if c == nil || len(c.ByBase) != 2 {
		t.Fatalf("ferry stats: %+v, want %q on two bases", c, key)
	}
	if b := c.ByBase; *b[0].HitRate != 0 || *b[1].HitRate != 1 {
		t.Errorf("by base: %v then %v, want 0 then 1", *b[0].HitRate, *b[1].HitRate)
	}
	human := w.MustFerry(t, "stats")
	if !strings.Contains(human, key) || !strings.Contains(human, ": 0% → ") || !strings.HasSuffix(strings.SplitN(human[strings.Index(human, key):], "\n", 2)[0], ": 100%") {
		t.Errorf("ferry stats does not show the rate rising:\n%s", human)
	}
}

// ferry why tells an agent's own edit from a feature set the base does not
// hold. The shared world's base warms only a build of every target, which
// turns on the fixture's dev-dependency feature: a plain build compiles
// the manifest crate with other features (a demand miss), and after an
// edit of chain-c, chain-c again (the agent's own).
func TestWhy(t *testing.T) {
	w := agenttest.Shared(t)
	a := w.Spawn(t, "why")
	out := w.MustFerry(t, "why", "why")
	if !strings.Contains(out, "has compiled nothing since it was spawned") {
		t.Errorf("ferry why before any build:\n%s", out)
	}
	if _, stderr, code := w.Cargo(a.Worktree, nil, "build", "--workspace"); code != 0 {
		t.Fatal(stderr)
	}
	type reasons struct {
		Reasons []warmset.Reason `json:"reasons"`
	}
	why := func() map[string]warmset.Reason {
		var r reasons
		out, stderr, err := w.Ferry(a.Worktree, nil, "why", "--json") // the agent of the working directory
		if err != nil {
			t.Fatalf("ferry why: %v\n%s", err, stderr)
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		m := map[string]warmset.Reason{}
		for _, x := range r.Reasons {
			m[x.Unit.Name+" "+x.Unit.Kind] = x
		}
		return m
	}
	m := why()
	man, ok := m[fixture.ManifestCrate+" lib"]
	if !ok || man.Kind != warmset.ReasonFeatures || !man.Unit.New || !strings.Contains(man.Detail, "features differ: the base built it with ["+fixture.DevFeature+"], this build with none") {
		t.Errorf("why the manifest crate: %+v", man)
	}
	if app := m[fixture.AppCrate+" bin"]; !app.Unit.New || app.Kind != warmset.ReasonDependency || !strings.Contains(app.Detail, "manifest") {
		t.Errorf("why app: %+v", app)
	}
	human := w.MustFerry(t, "why", "why")
	if !strings.Contains(human, "not in the base: features differ") || !strings.Contains(human, "demand misses") {
		t.Errorf("ferry why:\n%s", human)
	}

	if err := os.WriteFile(filepath.Join(a.Worktree, fixture.LibPath(fixture.ChainC)), append(mustRead(t, filepath.Join(a.Worktree, fixture.LibPath(fixture.ChainC))), "// edited\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := w.Cargo(a.Worktree, nil, "build", "--workspace"); code != 0 {
		t.Fatal(stderr)
	}
	m = why()
	c := m[fixture.ChainC+" lib"]
	if c.Kind != warmset.ReasonEdit || c.Unit.New || !slices.Contains(c.Files, fixture.LibPath(fixture.ChainC)) {
		t.Errorf("why chain-c after an edit: %+v", c)
	}
	if b := m[fixture.ChainB+" lib"]; b.Kind != warmset.ReasonDependency || !strings.Contains(b.Detail, fixture.ChainC) {
		t.Errorf("why chain-b after an edit of chain-c: %+v", b)
	}
	human = w.MustFerry(t, "why", "why")
	if !strings.Contains(human, "an edit in this worktree") || !strings.Contains(human, "own edits") {
		t.Errorf("ferry why after an edit:\n%s", human)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The shim records an agent's build-type calls and nothing else, leaves
// their output as cargo gives it, and survives a damaged log: the build
// goes on, and the next reader reports the damage and rebuilds the log.
func TestShimRecordsDemand(t *testing.T) {
	w := agenttest.Shared(t)
	a := w.Spawn(t, "demand")
	logPath := filepath.Join(w.StoreDir(t), "demand.log")
	entries := func() []demand.Entry {
		t.Helper()
		l, err := demand.Read(logPath)
		if err != nil {
			t.Fatal(err)
		}
		var mine []demand.Entry
		for _, e := range l.Entries {
			if e.Agent == a.Name {
				mine = append(mine, e)
			}
		}
		return mine
	}
	// A warm build, observed: every unit fresh, as Cargo's messages say.
	stdout, stderr, code := w.Cargo(a.Worktree, nil, "build", "--workspace", "--all-targets")
	if code != 0 || stdout != "" {
		t.Fatalf("cargo build: exit %d, stdout %q (the shim's JSON must not reach it)\n%s", code, stdout, stderr)
	}
	es := entries()
	if len(es) != 1 {
		t.Fatalf("%d entries after one build, want 1: %+v", len(es), es)
	}
	e := es[0]
	if e.Command != "cargo build --workspace --all-targets" || !e.First || !e.Observed || e.Compiled != 0 || e.Fresh == 0 || !e.InBase || e.Exit != 0 {
		t.Errorf("entry %+v: want the first, observed, all-fresh call of what the base warmed", e)
	}
	// Asked for JSON: it gets Cargo's messages, and the call is counted.
	stdout, _, code = w.Cargo(a.Worktree, nil, "build", "--workspace", "--all-targets", "--message-format=json")
	if code != 0 || strings.Count(stdout, `"reason":"compiler-artifact"`) != e.Fresh {
		t.Errorf("cargo build --message-format=json printed %d artifacts, want %d", strings.Count(stdout, `"reason":"compiler-artifact"`), e.Fresh)
	}
	// Short messages: left alone, recorded without counts. Calls that
	// build nothing: not recorded.
	w.Cargo(a.Worktree, nil, "check", "--message-format=short")
	w.Cargo(a.Worktree, nil, "-V")
	w.Cargo(a.Worktree, nil, "metadata", "--format-version", "1", "--no-deps")
	es = entries()
	if len(es) != 3 {
		t.Fatalf("%d entries, want 3 (two builds, one check): %+v", len(es), es)
	}
	if e := es[1]; e.First || !e.Observed || e.Fresh != es[0].Fresh {
		t.Errorf("the second build: %+v", e)
	}
	if e := es[2]; e.Command != "cargo check" || e.Observed || e.Fresh != 0 {
		t.Errorf("the check asking for short messages: %+v", e)
	}

	// A damaged log: the next build still runs and is recorded.
	f, err := os.OpenFile(logPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("{\"time\": garbage\n\x00\x00\x00")
	f.Close()
	if _, stderr, code := w.Cargo(a.Worktree, nil, "build", "--workspace"); code != 0 {
		t.Fatalf("a build with a damaged demand log: exit %d\n%s", code, stderr)
	}
	out, stderr, err := w.Ferry(w.Repo.Dir, nil, "stats", "--json")
	if err != nil || !strings.Contains(stderr, "2 line(s) that could not be read: rebuilt without them") {
		t.Fatalf("ferry stats on a damaged log: %v\n%s", err, stderr)
	}
	var s statsOut
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Damaged != 2 {
		t.Errorf("ferry stats --json: damaged %d (%v), want 2", s.Damaged, err)
	}
	if es := entries(); len(es) != 4 {
		t.Errorf("%d entries after the repair, want 4", len(es))
	}
	if _, stderr, _ := w.Ferry(w.Repo.Dir, nil, "stats"); strings.Contains(stderr, "could not be read") {
		t.Errorf("the damage is reported again after the repair:\n%s", stderr)
	}
}
