package base_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/record/demand"
)

// A progressive build makes the base of its first warm command ready and
// current before the rest warm: a spawn in between forks it. The full base
// is then built at the same commit seeded from it, so its first command
// compiles nothing (every artifact the first base holds keeps its mtime),
// and it replaces the first as current.
func TestProgressiveBaseIsCurrentAfterItsFirstCommand(t *testing.T) {
	e := setupLight(t)
	if err := os.WriteFile(filepath.Join(e.repo.Dir, "ferry.toml"),
		[]byte("[base]\nwarm = [\"cargo build --workspace\", \"cargo test --workspace --no-run\"]\nprogressive = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	settings, err := config.Load(e.repo.Dir, e.vars)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	var during string
	var first *base.Record
	res, err := base.Build(context.Background(), base.Options{
		Repo: e.g, Settings: settings, Store: e.store, Progress: &log,
		OnFirstReady: func(r *base.Record) {
			first = r
			during, _ = e.store.Current()
		},
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	r := res.Record
	if first == nil || res.First == nil || res.First.ID != first.ID || res.FirstSeconds <= 0 {
		t.Fatalf("no first base reported: hook %v, result %+v\n%s", first, res, log.String())
	}
	if len(first.Warm) != 1 || first.Warm[0].Command != "cargo build --workspace" || first.Commit != r.Commit || first.ID == r.ID {
		t.Fatalf("first base %s warm %+v at %s; want the first command alone at %s", first.ID, first.Warm, first.Commit, r.Commit)
	}
	if during != first.ID {
		t.Fatalf("current while the rest warmed = %q, want the first base %s", during, first.ID)
	}
	if cur, _ := e.store.Current(); cur != r.ID || len(r.Warm) != 2 {
		t.Fatalf("current = %q, want the full base %s, warm for both commands (%+v)", cur, r.ID, r.Warm)
	}
	if r.Seed != first.ID {
		t.Fatalf("the full base's seed = %q, want the first base %s\n%s", r.Seed, first.ID, log.String())
	}
	if !strings.Contains(log.String(), "warm for its first command") {
		t.Errorf("the log does not say the full base was seeded from the first:\n%s", log.String())
	}
	// What the first command built, the full base did not build again.
	libs, _ := filepath.Glob(filepath.Join(first.Target, "debug", "deps", "*.rlib"))
	if len(libs) == 0 {
		t.Fatalf("no libraries in the first base's target %s", first.Target)
	}
	for _, lib := range libs {
		was, err1 := os.Stat(lib)
		now, err2 := os.Stat(filepath.Join(r.Target, "debug", "deps", filepath.Base(lib)))
		if err1 != nil || err2 != nil || !now.ModTime().Equal(was.ModTime()) {
			t.Errorf("%s: rebuilt by the full base (%v, %v)", filepath.Base(lib), err1, err2)
		}
	}
	// A second build of the commit reuses the full base, with no first step.
	again, err := e.build(t, "")
	if err != nil || !again.Reused || again.Record.ID != r.ID || again.First != nil {
		t.Fatalf("again: %+v, %v; want the full base %s reused", again, err, r.ID)
	}
}

// A list of warm commands is not progressive unless ferry.toml asks.
func TestProgressiveOnlyWhenAsked(t *testing.T) {
	e := setupLight(t, "cargo build --workspace", "cargo test --workspace --no-run")
	res, err := e.build(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if res.First != nil || res.Record.Seed != "" {
		t.Fatalf("a configured list built progressively: first %v, seed %q", res.First, res.Record.Seed)
	}
}

// A progressive build stopped after its first base (here interrupted)
// leaves that base ready and current: agents keep spawning warm. The next
// build seeds from it; one changed since it was built is refused, naming
// the fix, and `--rebuild` builds it again. A later command that fails
// does not hold the base back: it is kept, the failure recorded as
// incomplete, and the commands after it warm.
func TestProgressiveFirstBaseOutlivesAFailure(t *testing.T) {
	e := setupLight(t)
	toml := func(later ...string) {
		t.Helper()
		warm := `"cargo build --workspace"`
		for _, c := range later {
			warm += fmt.Sprintf(", %q", c)
		}
		if err := os.WriteFile(filepath.Join(e.repo.Dir, "ferry.toml"),
			[]byte("[base]\nprogressive = true\nwarm = ["+warm+"]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	toml("true")
	var first *base.Record
	settings, err := config.Load(e.repo.Dir, e.vars)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = base.Build(ctx, base.Options{Repo: e.g, Settings: settings, Store: e.store,
		OnFirstReady: func(r *base.Record) { first = r; cancel() }})
	if err == nil || first == nil {
		t.Fatalf("interrupted after its first base: err %v, first %v; want the build to fail after its first base", err, first)
	}
	if cur, _ := e.store.Current(); cur != first.ID {
		t.Fatalf("current = %q after the failure, want the first base %s", cur, first.ID)
	}
	if err := base.Verify(first); err != nil {
		t.Fatalf("the first base after the failure: %v", err)
	}

	// Changed outside Ferry: not a seed, and not reused.
	planted := filepath.Join(first.Target, "debug", "planted")
	if err := os.WriteFile(planted, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = e.build(t, "")
	if err == nil || !strings.Contains(err.Error(), first.ID) || !strings.Contains(failure.HintOf(err), "--rebuild") {
		t.Fatalf("a changed first base: %v (hint %q); want it refused with the --rebuild fix", err, failure.HintOf(err))
	}
	settings, err = config.Load(e.repo.Dir, e.vars)
	if err != nil {
		t.Fatal(err)
	}
	res, err := base.Build(context.Background(), base.Options{Repo: e.g, Settings: settings, Store: e.store, Rebuild: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.First == nil || res.First.ID != first.ID || res.Record.Seed != first.ID {
		t.Fatalf("--rebuild: first %v, seed %q; want the first base %s built again and seeding", res.First, res.Record.Seed, first.ID)
	}
	if _, err := os.Stat(planted); err == nil {
		t.Fatal("the rebuilt first base still holds the planted file")
	}

	// A later command fails: the base is ready without it, and the
	// command after it warmed.
	marker := filepath.Join(t.TempDir(), "after")
	toml("exit 3", "touch "+marker)
	res, err = e.build(t, "")
	if err != nil {
		t.Fatalf("a failing later command: %v; want the base kept", err)
	}
	if !slices.Contains(res.Record.Incomplete, "exit 3") {
		t.Errorf("incomplete = %q, want the failed command", res.Record.Incomplete)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the command after the failed one did not run: %v", err)
	}
	if cur, _ := e.store.Current(); cur != res.Record.ID {
		t.Errorf("current = %q, want the kept base %s", cur, res.Record.ID)
	}
	if err := base.Verify(res.Record); err != nil {
		t.Errorf("the kept base: %v", err)
	}
	if n := len(res.Record.Warm); n != 3 || res.Record.Warm[1].ExitCode != 3 {
		t.Errorf("warm records %+v, want three, the second exiting 3", res.Record.Warm)
	}

	// Its first command failing discards it: nothing would serve agents.
	if err := os.WriteFile(filepath.Join(e.repo.Dir, "ferry.toml"),
		[]byte("[base]\nprogressive = true\nwarm = [\"exit 4\", \"true\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.build(t, ""); failure.KindOf(err) != failure.BuildFailed {
		t.Errorf("a failing first command: %v, want the build failed", err)
	}
}

// With commands demand added, the full base's unit inputs hash them in;
// the first base (which warms none of them) records the same inputs, and
// seeds the full base as one with the same inputs does, not as one across
// inputs, which only an observed base may be.
func TestProgressiveSeedsDespiteDemandedCommands(t *testing.T) {
	e := setupLight(t)
	cmd, ok := demand.Normalize([]string{"check", "--all-targets"}, ".")
	if !ok {
		t.Fatal("cargo check --all-targets: not a command demand counts")
	}
	if err := e.store.Init(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := demand.Append(e.store.DemandLog(), demand.Entry{Time: time.Now(), Agent: fmt.Sprintf("a%d", i), Command: cmd.String(), Cmd: cmd}); err != nil {
			t.Fatal(err)
		}
	}
	settings, err := config.Load(e.repo.Dir, e.vars)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	res, err := base.Build(context.Background(), base.Options{Repo: e.g, Settings: settings, Store: e.store, Progress: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	r := res.Record
	if !slices.ContainsFunc(r.Warm, func(w base.WarmCommand) bool { return w.Demanded > 0 }) {
		t.Fatalf("no demanded command warmed: %+v", r.Warm)
	}
	if res.First == nil || r.Seed != res.First.ID || r.SeedBy == "" {
		t.Fatalf("first %v, seed %q: the full base was not seeded from the first\n%s", res.First != nil, r.Seed, log.String())
	}
	// Demand's command is in the inputs both record: without it they
	// would differ.
	settings.Demand = false
	plain, err := base.Resolve(base.Options{Repo: e.g, Settings: settings, Store: e.store})
	if err != nil {
		t.Fatal(err)
	}
	if res.First.UnitInputs != r.UnitInputs || plain.UnitInputs == r.UnitInputs {
		t.Fatalf("unit inputs: first %s, full %s, without demand %s; want the first's the full's, and demand's command in them",
			res.First.UnitInputs, r.UnitInputs, plain.UnitInputs)
	}
}
