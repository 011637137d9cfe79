package oracle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/sandbox"
)

// Defaults of the Ferry run, sized for `make test` on a 2-core machine
// where other packages build beside it: 3 agents × 4 rounds give 12 edit
// rounds, enough for the schedule to cover every kind of edit (11), and
// every run draws a new seed. Alone, a round of the main run costs about
// 23 s, its base about 40 s and its seeded bases about 75 s. `make oracle`
// runs the main oracle deeper (FERRY_ORACLE_AGENTS, FERRY_ORACLE_ROUNDS).
// The variants (sandbox off, checksum freshness) run the same 3 agents,
// one of each backend and commit, for 2 rounds: 6 edit rounds, 6 kinds of
// the 11, another 6 each run (the seed chooses). What they change is how
// a unit is judged fresh and where it is built, which their base,
// relocation and seeded bases exercise whatever the edits; the kinds of
// edit are the main run's to cover. In a full `make test` the three runs
// took 582, 380 and 305 s with 4 rounds each.
const (
	defaultAgents = 3
	defaultRounds = 4
	variantRounds = 2
)

// Main runs a package of oracle tests: the sandbox's re-exec entry first,
// then the tests, then the removal of the shared directory and of what the
// tests left at exit. Each test package builds one template target for its
// tests; the oracle's variants sit in packages of their own
// (internal/oracle/hostpaths, internal/oracle/checksum) so that each test
// binary stays well inside its timeout on a loaded machine.
func Main(m *testing.M) {
	sandbox.Init()
	code := m.Run()
	if pkg.tmplDone != nil {
		pkg.cancel()
		<-pkg.tmplDone
	}
	if pkg.dir != "" {
		os.RemoveAll(pkg.dir)
	}
	testenv.Cleanup()
	os.Exit(code)
}

// pkg is what the tests of this package share: a CARGO_HOME and the
// template target dir the references are seeded from (one cold build).
var pkg struct {
	once      sync.Once
	dir       string
	cargo     string
	cargoHome string
	err       error

	tmplDone chan struct{}
	cancel   context.CancelFunc
	template string
	tmplErr  error
	tmplTime time.Duration
}

// setupPkg makes the shared directory and starts building the template in
// the background.
func setupPkg(t *testing.T) {
	t.Helper()
	fixture.RequireTools(t)
	pkg.once.Do(func() {
		pkg.cargo, pkg.err = exec.LookPath("cargo")
		if pkg.err != nil {
			return
		}
		if pkg.dir, pkg.err = os.MkdirTemp("", "ferry-oracle-"); pkg.err != nil {
			return
		}
		pkg.cargoHome = filepath.Join(pkg.dir, "cargo-home")
		if pkg.err = os.Mkdir(pkg.cargoHome, 0o755); pkg.err != nil {
			return
		}
		pkg.tmplDone = make(chan struct{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		pkg.cancel = cancel
		go func() {
			defer close(pkg.tmplDone)
			start := time.Now()
			src := filepath.Join(pkg.dir, "template-src")
			if _, err := fixture.Generate(src, fixture.Options{}); err != nil {
				pkg.tmplErr = err
				return
			}
			target := filepath.Join(pkg.dir, "template-target")
			pkg.tmplErr = BuildTemplate(ctx, src, target, pkg.cargo, baseEnv())
			pkg.template = target
			pkg.tmplTime = time.Since(start)
		}()
	})
	if pkg.err != nil {
		t.Fatal(pkg.err)
	}
}

func waitTemplate(t *testing.T) string {
	t.Helper()
	<-pkg.tmplDone
	if pkg.tmplErr != nil {
		t.Fatalf("building the reference template target: %v", pkg.tmplErr)
	}
	return pkg.template
}

// baseEnv is the environment of every cargo, git and ferry command: the
// package's CARGO_HOME, no inherited build redirection, git isolated from
// the user's configuration.
func baseEnv() []string {
	return fixture.CargoEnv(fixture.GitEnv(os.Environ()), pkg.cargoHome, "")
}

type config struct {
	seed           uint64
	agents, rounds int
}

// loadConfig reads FERRY_ORACLE_SEED, FERRY_ORACLE_AGENTS and
// FERRY_ORACLE_ROUNDS; the seed is random when unset.
func loadConfig(t *testing.T, agents, rounds int) config {
	t.Helper()
	c := config{seed: rand.Uint64(), agents: agents, rounds: rounds}
	if v := os.Getenv(knobs.OracleSeed); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("FERRY_ORACLE_SEED=%q: %v", v, err)
		}
		c.seed = s
	}
	for _, p := range []struct {
		name string
		v    *int
	}{{knobs.OracleAgents, &c.agents}, {knobs.OracleRounds, &c.rounds}} {
		if v := os.Getenv(p.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				t.Fatalf("%s=%q: want a positive number", p.name, v)
			}
			*p.v = n
		}
	}
	return c
}

func (c config) repro(test string) string {
	return fmt.Sprintf("FERRY_ORACLE_SEED=%d FERRY_ORACLE_AGENTS=%d FERRY_ORACLE_ROUNDS=%d go test %s -run '^%s$' -v -count=1",
		c.seed, c.agents, c.rounds, testPackage(), test)
}

// testPackage names the running test's package as go test takes it from
// the module's root: a test binary runs in its package's directory.
func testPackage() string {
	const all = "./internal/oracle/..."
	dir, err := os.Getwd()
	if err != nil {
		return all
	}
	for root := dir; ; root = filepath.Dir(root) {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			rel, err := filepath.Rel(root, dir)
			if err != nil {
				return all
			}
			return "./" + filepath.ToSlash(rel)
		}
		if filepath.Dir(root) == root {
			return all
		}
	}
}

// testContext ends 30 s before the test's deadline, so a hung build is
// reported by the harness with the seed rather than by a panic.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	if d, ok := t.Deadline(); ok {
		cancel()
		ctx, cancel = context.WithDeadline(context.Background(), d.Add(-30*time.Second))
	}
	t.Cleanup(cancel)
	return ctx
}

func newReferences(t *testing.T, n int, template string) []*Reference {
	t.Helper()
	refs := make([]*Reference, n)
	for i := range refs {
		r, err := NewReference(filepath.Join(t.TempDir(), fmt.Sprintf("ref-%d", i)), template, pkg.cargo, baseEnv())
		if err != nil {
			t.Fatal(err)
		}
		refs[i] = r
	}
	return refs
}

// RunFerry runs the oracle of Ferry agents under sandbox mode mode,
// defaultRounds rounds (variantRounds for a variant: another mode, or a
// with) unless a knob says otherwise; each of with changes the Ferry
// driver before the base is built.
func RunFerry(t *testing.T, mode string, with ...func(*Ferry)) {
	// The variant builds (release, another feature set) check that a
	// fork's other units are the agent's own too; the first release build
	// of each agent is a cold one, so only the main run makes them: the
	// variants of the run (host paths, checksum freshness) change how
	// units are judged fresh, which the default profile's builds cover.
	variants := mode == "auto" && len(with) == 0
	start := time.Now()
	setupPkg(t) // starts the template build, which runs beside ferry base
	rounds := defaultRounds
	if !variants {
		rounds = variantRounds
	}
	cfg := loadConfig(t, defaultAgents, rounds)
	repro := cfg.repro(t.Name())
	t.Logf("seed %d, %d agents, %d rounds; reproduce with: %s", cfg.seed, cfg.agents, cfg.rounds, repro)
	fatalf := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\n(seed %d; reproduce with: %s)", append(args, cfg.seed, repro)...)
	}
	bin := testenv.Binaries(t)
	ctx := testContext(t)

	repo, err := fixture.Generate(filepath.Join(t.TempDir(), "repo"), fixture.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	f := &Ferry{Bin: bin, Home: filepath.Join(tmp, "ferry-home"), Worktrees: filepath.Join(tmp, "worktrees"),
		Repo: repo.Dir, Env: append(baseEnv(), "FERRY_SANDBOX="+mode)}
	for _, w := range with {
		w(f)
	}
	tBase := time.Now()
	// The main run's base also warms what the variant checks build
	// (Variant), as a base warms what agents demanded: their units are
	// forked, and checked, too. The runs without variant checks leave
	// them out: a release build of every crate is the costliest part of
	// a cold base, and nothing of theirs would check it.
	warm := []string{"cargo build --workspace --all-targets"}
	if variants {
		warm = append(warm, "cargo build -p "+fixture.AppCrate+" --release",
			"cargo build -p "+fixture.AppCrate+" --features "+FeatureVariant.Features)
	}
	if err := f.Base(ctx, warm...); err != nil {
		var ce *CommandError
		if errors.As(err, &ce) && ce.ExitCode() == 4 {
			t.Skipf("skipping: the host blocks user namespaces, so Ferry refuses to build (exit 4): %v", err)
		}
		fatalf("ferry base: %v", err)
	}
	baseTime := time.Since(tBase)
	baseDigest, err := digestTree(f.BaseTarget())
	if err != nil {
		t.Fatal(err)
	}

	// Odd agents start at a later commit than the base's, so that stamping
	// has files to leave alone: the base stays current and is forked anyway.
	baseCommit := repo.Head
	diverged, descs, err := Diverge(repo, cfg.seed)
	if err != nil {
		fatalf("diverge: %v", err)
	}
	t.Logf("odd agents spawn from %.12s, which differs from the base's commit %.12s by:\n  %s",
		diverged, baseCommit, strings.Join(descs, "\n  "))

	tSpawn := time.Now()
	agents := make([]Agent, cfg.agents)
	bases := make([]string, cfg.agents)
	for i := range agents {
		from := baseCommit
		if i%2 == 1 {
			from = diverged
		}
		// Agents 0 and 1 (one at each commit) take the backend Ferry
		// chooses here (overlay on ext4, reflink on XFS); 2 and 3 copy.
		backend := "auto"
		if (i/2)%2 == 1 {
			backend = "copy"
		}
		if agents[i], err = f.SpawnWith(ctx, fmt.Sprintf("agent-%d", i), from, backend); err != nil {
			fatalf("ferry spawn --from %s: %v", from, err)
		}
		bases[i] = f.BaseSrc()
	}
	spawnTime := time.Since(tSpawn)
	template := waitTemplate(t)
	refs := newReferences(t, cfg.agents, template)
	setupTime := time.Since(start)

	h := &Harness{Agents: agents, References: refs, Bases: bases, Options: Options{
		Seed: cfg.seed, Rounds: cfg.rounds, Repro: repro, Logf: t.Logf, Variants: variants,
	}}
	rep, err := h.Run(ctx)
	if err != nil {
		fatalf("%v", err)
	}
	failOn(t, rep)
	if cfg.agents*cfg.rounds >= len(AllKinds()) && len(rep.Errors) == 0 {
		for _, k := range AllKinds() {
			if rep.Kinds[k] == 0 {
				t.Errorf("no %s edit was made (seed %d): the edit schedule must cover every kind", k, cfg.seed)
			}
		}
	}
	t.Logf("edits: %s", rep.KindSummary())
	t.Logf("%d builds checked, %d mismatches, %d harness errors (seed %d)", rep.Checks, len(rep.Mismatches), len(rep.Errors), cfg.seed)

	// The base is immutable (invariant 2) and agents own their build state
	// (invariant 3): after every agent built, a newly spawned agent's
	// unedited build, which trusts the base entirely, is still the base's
	// code, and the base target did not change by a byte or an mtime.
	tLate := time.Now()
	late, err := f.Spawn(ctx, "agent-late", baseCommit)
	if err != nil {
		fatalf("ferry spawn agent-late: %v", err)
	}
	lh := &Harness{Agents: []Agent{late}, References: newReferences(t, 1, template), Bases: []string{f.BaseSrc()},
		Options: Options{Seed: cfg.seed, Rounds: 1, Repro: repro, Logf: t.Logf,
			Script: func(int, int) ([]Kind, bool) { return nil, true }}}
	lrep, err := lh.Run(ctx)
	if err != nil {
		fatalf("%v", err)
	}
	failOn(t, lrep)
	if d, err := digestTree(f.BaseTarget()); err != nil {
		t.Error(err)
	} else if d != baseDigest {
		t.Errorf("the base target %s changed while agents built (seed %d)", f.BaseTarget(), cfg.seed)
	}
	lateTime := time.Since(tLate)

	// Invariant 2's other routes: the diverged commit's base is seeded from
	// the first across unit inputs (the divergence bumps a version and
	// changes a path dependency) and pruned; two commits that then edit
	// only sources are seeded with the same unit inputs, each from the one
	// before: three refreshes deep. On a store that cannot clone (ext4)
	// each is a layered refresh, whose unchanged files are its seed's.
	// Agents spawned from the first and the deepest build exactly their
	// own code, and no refresh changed its seed. The variants (host paths,
	// checksum freshness) stop at the pruned base: how a refresh lays its
	// seed down does not depend on them, and the main run goes deep.
	tSeeded := time.Now()
	sourceEdits, seededRounds := []string{fixture.ChainB, fixture.ChainC}, 3
	if !variants {
		sourceEdits, seededRounds = nil, 2
	}
	pruned, err := f.BaseAt(ctx, diverged)
	if err != nil {
		fatalf("ferry base --rev diverged: %v", err)
	}
	if pruned.Seed == "" || !pruned.Observed {
		fatalf("the diverged commit's base was not seeded from an observed base: %+v", pruned)
	}
	prunedDigest, err := digestTree(pruned.Target)
	if err != nil {
		t.Fatal(err)
	}
	seeded := pruned
	for i, crate := range sourceEdits {
		if err := repo.Append(fixture.LibPath(crate), fmt.Sprintf("\n// oracle: source edit %d after the divergence\n", i+1)); err != nil {
			t.Fatal(err)
		}
		later, err := repo.Commit(fmt.Sprintf("oracle: source edit %d after the divergence", i+1))
		if err != nil {
			t.Fatal(err)
		}
		next, err := f.BaseAt(ctx, later)
		if err != nil {
			fatalf("ferry base --rev later: %v", err)
		}
		if next.Seed != seeded.ID {
			fatalf("the base of source edit %d was seeded from %q, want %s", i+1, next.Seed, seeded.ID)
		}
		if want := wantSeedBy(t, f.Home, mode); next.SeedBy != want {
			fatalf("the base of source edit %d started from its seed by %q, want %q on this store", i+1, next.SeedBy, want)
		}
		seeded = next
	}
	if d, err := digestTree(pruned.Target); err != nil {
		t.Error(err)
	} else if d != prunedDigest {
		t.Errorf("the diverged base's target %s changed while later bases were seeded from it (seed %d)", pruned.Target, cfg.seed)
	}
	froms, seededBases := []string{diverged}, []string{pruned.Src}
	if seeded != pruned {
		froms, seededBases = append(froms, seeded.Commit), append(seededBases, seeded.Src)
	}
	var seededAgents []Agent
	for i, from := range froms {
		a, err := f.Spawn(ctx, fmt.Sprintf("agent-seeded-%d", i), from)
		if err != nil {
			fatalf("ferry spawn --from %s: %v", from, err)
		}
		seededAgents = append(seededAgents, a)
	}
	sh := &Harness{Agents: seededAgents, References: newReferences(t, len(froms), template), Bases: seededBases,
		Options: Options{Seed: cfg.seed + 1, Rounds: seededRounds, Repro: repro, Logf: t.Logf}}
	srep, err := sh.Run(ctx)
	if err != nil {
		fatalf("%v", err)
	}
	failOn(t, srep)
	t.Logf("seeded and pruned bases (pruned %d unit(s), seeded by %s; %d later refresh(es), the last by %s): %d builds checked, %d mismatches",
		pruned.Pruned.Units, pruned.SeedBy, len(sourceEdits), seeded.SeedBy, srep.Checks, len(srep.Mismatches))
	seededTime := time.Since(tSeeded)

	for _, a := range append(append(agents, late), seededAgents...) {
		if err := f.Remove(ctx, a.Name()); err != nil {
			t.Logf("ferry rm --force %s: %v", a.Name(), err)
		}
	}
	t.Logf("time: %.1fs total; ferry base %.1fs, template %.1fs (beside it), spawn %.1fs, setup %.1fs, rounds %.1fs, late agent %.1fs, seeded bases and their agents %.1fs",
		time.Since(start).Seconds(), baseTime.Seconds(), pkg.tmplTime.Seconds(), spawnTime.Seconds(),
		setupTime.Seconds(), rep.Elapsed.Seconds(), lateTime.Seconds(), seededTime.Seconds())
	if t.Failed() {
		t.Logf("reproduce with: %s", repro)
	}
}

// failOn reports every mismatch and harness error of rep as a test error.
func failOn(t *testing.T, rep *Report) {
	t.Helper()
	for _, m := range rep.Mismatches {
		t.Errorf("%s", m)
	}
	for _, e := range rep.Errors {
		t.Errorf("harness error: %s", e)
	}
}

// digestTree hashes every entry under dir: path, type, permission bits,
// mtime, and the bytes of files or the text of links.
func digestTree(dir string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s\x00%v\x00%d\x00", rel, info.Mode(), info.ModTime().UnixNano())
		switch {
		case d.Type().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(h, f); err != nil {
				return err
			}
		case d.Type()&fs.ModeSymlink != 0:
			text, err := os.Readlink(p)
			if err != nil {
				return err
			}
			io.WriteString(h, text)
		}
		h.Write([]byte{0})
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}

// wantSeedBy is how a refresh in a store under home must start from its
// seed under sandbox mode mode, by the host's own probes: a clone where the
// filesystem clones, else, in the namespace sandbox, a layer where an
// unprivileged overlay mounts, else a copy.
func wantSeedBy(t *testing.T, home, mode string) string {
	t.Helper()
	if ok, err := fork.CanReflink(home); err != nil {
		t.Fatal(err)
	} else if ok {
		return "reflink"
	}
	if mode == "off" {
		return "copy"
	}
	b, err := platform.Real().OverlayBlocker(home)
	if err != nil {
		t.Fatal(err)
	}
	if b != nil {
		return "copy"
	}
	return "layer"
}
