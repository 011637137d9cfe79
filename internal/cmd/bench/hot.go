package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/pkg/cargoenv"
	"github.com/ferrydev/ferry/pkg/fork"
)

// The hot section: what the shim adds to the cargo calls an agent tool
// makes dozens of times a session, against plain cargo, side by side. A
// trivial call (cargo -V) through the shim in an agent of each backend
// against the real cargo, and the first cargo build in a fresh agent of
// each backend against a no-op build in a warm plain checkout. The base is
// built with Ferry's generated warm commands (warm = "auto"), as users
// get it. Every sample is a whole process, timed from the bench.

// hotBuild is the call an agent makes first after its spawn.
const hotBuild = "cargo build"

// hotTrivial is the trivial call, through whatever cargo PATH finds first.
var hotTrivial = []string{"cargo", "-V"}

// hotAgent is one backend's row of the section.
type hotAgent struct {
	backend  string
	worktree string // an agent kept for the trivial calls
	trivial  []time.Duration
	first    []time.Duration // the first build in a fresh agent
	second   []time.Duration // the build right after it, in the same agent
	spawn    []time.Duration // ferry spawn of each fresh agent, whole process
	sync     []time.Duration // of it, making the fork durable (timings.sync)
	// storeOnly is the twin agent that confines only the store (spawned
	// with knobs.NoConfine), its trivial calls beside the agent's.
	storeOnly        string
	trivialStoreOnly []time.Duration
	confineCall      []time.Duration // trivial less the twin's, round by round
	confineSpawn     []time.Duration // a spawn less its twin's, pair by pair
	// Paired with the plain call or build beside each one.
	overhead                []time.Duration // trivial less plain's, round by round
	firstRatio, secondRatio []float64       // over the plain no-op beside it
}

// spread returns the least, the median and the greatest of ds, sorted in place.
func spread(ds []time.Duration) (lo, mid, hi time.Duration) {
	slices.Sort(ds)
	return ds[0], ds[len(ds)/2], ds[len(ds)-1]
}

// spreadF is spread for ratios.
func spreadF(fs []float64) (lo, mid, hi float64) {
	slices.Sort(fs)
	return fs[0], fs[len(fs)/2], fs[len(fs)-1]
}

func runHot(bin string, n, large int, xfs string) error {
	if err := fixture.CheckTools(""); err != nil {
		return err
	}
	bin, _ = filepath.Abs(bin)
	// The store and the plain checkout share one filesystem: the one that
	// clones when there is one, so every backend is measured.
	parent, note := "", "reflink: no filesystem with clones given; pass -xfs DIR or set FERRY_TEST_XFS"
	if xfs != "" {
		if ok, _ := fork.CanReflink(xfs); ok {
			parent, note = xfs, ""
		} else {
			note = "reflink: " + xfs + " does not clone"
		}
	}
	root, err := os.MkdirTemp(parent, "ferry-bench-hot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	name, opts := "fixture", fixture.Options{}
	if large > 0 {
		name, opts = fmt.Sprintf("large(%d crates)", large), fixture.Options{ExtraCrates: large, ModulesPerCrate: 10}
	}
	w := &ws{name: name, dir: root, bin: bin, home: filepath.Join(root, "home")}
	if w.repo, err = fixture.Generate(filepath.Join(root, "repo"), opts); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: hot: %s: building the base with the default warm commands\n", name)
	out, _, _, err := w.ferry("base", "--json")
	if err != nil {
		return err
	}
	if err := json.Unmarshal(out, &w.base); err != nil {
		return err
	}

	// The plain checkout, warm: built, then one no-op build.
	plain := filepath.Join(root, "plain")
	if _, err := w.repo.Git("worktree", "add", "-q", "--detach", plain, "HEAD"); err != nil {
		return err
	}
	plainEnv := append(os.Environ(), "CARGO_TARGET_DIR="+filepath.Join(plain, "target"))
	fmt.Fprintf(os.Stderr, "bench: hot: building the plain checkout\n")
	for range 2 {
		if _, err := sh(plain, plainEnv, hotBuild); err != nil {
			return err
		}
	}

	backends := []string{fork.NameCopy, fork.NameReflink, fork.NameOverlay}
	if parent == "" {
		backends = []string{fork.NameCopy, fork.NameOverlay}
	}
	var agents []*hotAgent
	for _, b := range backends {
		t, err := w.spawnAgent("hot-"+b, b)
		if err != nil {
			return err
		}
		// Its twin confines only the store, as agents did before Ferry
		// confined the host (knobs.NoConfine at spawn).
		twin, err := w.spawnAgent("hot-"+b+"-store", b, knobs.NoConfine+"=1")
		if err != nil {
			return err
		}
		agents = append(agents, &hotAgent{backend: b, worktree: t.rec.Worktree, storeOnly: twin.rec.Worktree})
	}
	shimEnv := w.shimEnv()

	// Trivial calls, interleaved: plain, then each backend, m rounds. The
	// overhead is taken round by round (each agent's call less the plain
	// call beside it), so a machine whose speed drifts moves both.
	m := max(20*n, 60)
	var plainTrivial []time.Duration
	for range m + 1 { // the first round warms caches and is dropped
		d, err := timed(plain, os.Environ(), hotTrivial...)
		if err != nil {
			return err
		}
		plainTrivial = append(plainTrivial, d)
		for _, a := range agents {
			d, err := timed(a.worktree, shimEnv, hotTrivial...)
			if err != nil {
				return err
			}
			a.trivial = append(a.trivial, d)
			if d, err = timed(a.storeOnly, shimEnv, hotTrivial...); err != nil {
				return err
			}
			a.trivialStoreOnly = append(a.trivialStoreOnly, d)
		}
	}
	plainTrivial = plainTrivial[1:]
	for _, a := range agents {
		a.trivial, a.trivialStoreOnly = a.trivial[1:], a.trivialStoreOnly[1:]
		for i := range a.trivial {
			a.confineCall = append(a.confineCall, a.trivial[i]-a.trivialStoreOnly[i])
		}
	}

	// What recording a build in the demand log costs: a no-op build in
	// the first agent, recorded and not (knobs.NoDemand), interleaved.
	var recorded, unrecorded []time.Duration
	noDemand := append(shimEnv[:len(shimEnv):len(shimEnv)], knobs.NoDemand+"=1")
	for i := range max(10*n, 30) + 1 {
		r, err := sh(agents[0].worktree, shimEnv, hotBuild)
		if err != nil {
			return err
		}
		u, err := sh(agents[0].worktree, noDemand, hotBuild)
		if err != nil {
			return err
		}
		if i > 0 { // the first pair warms caches
			recorded, unrecorded = append(recorded, r), append(unrecorded, u)
		}
	}
	var recordCost []time.Duration
	for i := range recorded {
		recordCost = append(recordCost, recorded[i]-unrecorded[i])
	}

	// First builds: a fresh agent of each backend per round, beside a no-op
	// build in the plain checkout.
	rounds := max(3*n, 9)
	var plainNoop []time.Duration
	for i := range rounds {
		for _, a := range agents {
			agent := fmt.Sprintf("hot-%s-%d", a.backend, i)
			t, err := w.spawnAgent(agent, a.backend)
			if err != nil {
				return err
			}
			a.spawn, a.sync = append(a.spawn, t.wall), append(a.sync, secs(t.rec.Timings.Sync))
			d, err := sh(t.rec.Worktree, shimEnv, hotBuild)
			if err != nil {
				return err
			}
			a.first = append(a.first, d)
			if d, err = sh(t.rec.Worktree, shimEnv, hotBuild); err != nil {
				return err
			}
			a.second = append(a.second, d)
			if err := w.removeAgent(agent); err != nil {
				return err
			}
			twin, err := w.spawnAgent(agent+"-store", a.backend, knobs.NoConfine+"=1")
			if err != nil {
				return err
			}
			a.confineSpawn = append(a.confineSpawn, t.wall-twin.wall)
			if err := w.removeAgent(agent + "-store"); err != nil {
				return err
			}
			if d, err = sh(plain, plainEnv, hotBuild); err != nil {
				return err
			}
			plainNoop = append(plainNoop, d)
		}
		fmt.Fprintf(os.Stderr, "bench: hot: round %d of %d\n", i+1, rounds)
	}

	// Paired figures first: median sorts in place.
	for _, a := range agents {
		for i := range a.trivial {
			a.overhead = append(a.overhead, a.trivial[i]-plainTrivial[i])
		}
	}
	for k, a := range agents {
		for i := range a.first {
			noop := plainNoop[i*len(agents)+k].Seconds()
			a.firstRatio = append(a.firstRatio, a.first[i].Seconds()/noop)
			a.secondRatio = append(a.secondRatio, a.second[i].Seconds()/noop)
		}
	}
	pt, pn := median(plainTrivial), median(plainNoop)
	fmt.Printf("\n== Hot path: cargo calls through the shim against plain cargo, %s workspace, base warmed by the generated commands\n", name)
	fmt.Printf("  (wall ms, medians; %s: %d rounds interleaved, the overhead taken within each round; builds: %d fresh agents\n", "cargo -V", m, rounds)
	fmt.Printf("   per backend, each beside a plain no-op build, the ratio taken within each pair; [min..max] of the paired figures)\n")
	fmt.Printf("  %-52s %9s %12s\n", "measure", "ms", "vs plain")
	fmt.Printf("  %-52s %9.1f\n", "plain cargo -V", ms(pt))
	for _, a := range agents {
		goal := 5.0
		if a.backend == fork.NameOverlay {
			goal = 10
		}
		lo, mid, hi := spread(a.overhead)
		fmt.Printf("  %-52s %9.1f %+9.1f ms  [%+.1f..%+.1f]  (goal <= +%.0f ms)\n", "cargo -V through the shim, "+a.backend+" agent",
			ms(median(a.trivial)), ms(mid), ms(lo), ms(hi), goal)
	}
	fmt.Printf("  %-52s %9.1f\n", "no-op cargo build, warm plain checkout", ms(pn))
	for _, a := range agents {
		lo, mid, hi := spreadF(a.firstRatio)
		fmt.Printf("  %-52s %9.1f %10.2fx  [%.2f..%.2f]  (goal <= 1.3x)\n", "first cargo build in a fresh "+a.backend+" agent", ms(median(a.first)), mid, lo, hi)
	}
	for _, a := range agents {
		lo, mid, hi := spreadF(a.secondRatio)
		fmt.Printf("  %-52s %9.1f %10.2fx  [%.2f..%.2f]\n", "second cargo build in that "+a.backend+" agent", ms(median(a.second)), mid, lo, hi)
	}
	for _, a := range agents {
		fmt.Printf("  %-52s %9.1f   (of it, the fork made durable: %.1f ms)\n", "ferry spawn of that "+a.backend+" agent", ms(median(a.spawn)), ms(median(a.sync)))
	}
	for _, a := range agents {
		lo, mid, hi := spread(a.confineCall)
		fmt.Printf("  %-52s %9.1f %+9.1f ms  [%+.1f..%+.1f]  (goal <= +2 ms)\n", "cargo -V, "+a.backend+": what confining the host adds",
			ms(median(a.trivialStoreOnly)), ms(mid), ms(lo), ms(hi))
	}
	for _, a := range agents {
		lo, mid, hi := spread(a.confineSpawn)
		fmt.Printf("  %-52s %9s %+9.1f ms  [%+.1f..%+.1f]  (the probes of what the host allows)\n", "confining the host, per "+a.backend+" spawn", "",
			ms(mid), ms(lo), ms(hi))
	}
	lo, mid, hi := spread(recordCost)
	fmt.Printf("  %-52s %9.1f %+9.1f ms  [%+.1f..%+.1f]  (against the same build unrecorded, %.1f ms; %d pairs)\n",
		"no-op cargo build recorded in the demand log, "+agents[0].backend, ms(median(recorded)), ms(mid), ms(lo), ms(hi), ms(median(unrecorded)), len(recordCost))
	if err := hookRows(w, plain, plainEnv, shimEnv, n); err != nil {
		return err
	}
	if note != "" {
		fmt.Printf("  (%s)\n", note)
	}
	return nil
}

// timed runs argv in dir with env and returns its wall time.
func timed(dir string, env []string, argv ...string) (time.Duration, error) {
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir = dir
	c.Env = env
	// exec.Command resolves argv[0] with this process's PATH: resolve it
	// with the command's own, as a shell would.
	c.Path = lookPath(argv[0], env)
	t := time.Now()
	out, err := c.CombinedOutput()
	d := time.Since(t)
	if err != nil {
		return 0, fmt.Errorf("%v in %s: %v\n%s", argv, dir, err, out)
	}
	return d, nil
}

// lookPath finds name on env's PATH.
func lookPath(name string, env []string) string {
	for _, dir := range filepath.SplitList(cargoenv.Get(env, "PATH")) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return name
}
