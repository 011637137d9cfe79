package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/diskuse"
	"github.com/ferrydev/ferry/pkg/fork"
)

// scaleRow is what one workspace size measured, once each.
type scaleRow struct {
	crates                             int
	chained                            bool // the extra crates form one chain, whose last crate is the root edit's
	baseCold, plainCold                time.Duration
	leaf, plainLeaf, chain, plainChain time.Duration
	spawn, first                       time.Duration
	agentDisk, plainDisk               int64 // physical bytes: the agent after its first build; a plain worktree's target
	crowds                             []crowd
}

// crowd is k agents spawned at once, then their first builds run at once.
type crowd struct {
	k                     int
	spawnMedian, spawnMax time.Duration
	firstMedian, firstMax time.Duration
	compiled              int // crates the k first builds compiled, together: 0 when every agent was warm
}

// runScale measures how Ferry grows with the workspace (generated leaf
// crates beside the fixture's chain) and with agents spawned at once:
// base, refreshes, spawn, first build and disk, each beside plain cargo.
func runScale(bin string, sizes, crowds string, chain int, xfs string) error {
	if err := fixture.CheckTools(""); err != nil {
		return err
	}
	bin, _ = filepath.Abs(bin)
	ns, err := ints(sizes)
	if err != nil {
		return fmt.Errorf("-scale: %w", err)
	}
	ks, err := ints(crowds)
	if err != nil {
		return fmt.Errorf("-crowds: %w", err)
	}
	root, err := os.MkdirTemp("", "ferry-bench-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	// The store where a fork is a reflink when there is one: spawn's cost
	// then grows with files, not bytes.
	storeRoot, where := root, "the temporary directory"
	if xfs != "" {
		if ok, _ := fork.CanReflink(xfs); ok {
			d, err := os.MkdirTemp(xfs, "ferry-bench-scale-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(d)
			storeRoot, where = d, xfs
		}
	}
	var rows []scaleRow
	defer func() { printScale(rows, where) }() // what was measured, also when a size fails
	for _, n := range ns {
		r, err := scaleOne(bin, root, storeRoot, n, false, ks)
		if err != nil {
			return err
		}
		rows = append(rows, r)
	}
	if chain > 0 {
		r, err := scaleOne(bin, root, storeRoot, chain, true, nil)
		if err != nil {
			return err
		}
		rows = append(rows, r)
	}
	return nil
}

// scaleWarm is the scaling section's warm command: the libraries and
// binaries, whose targets stay small enough for a 500-crate workspace's
// base, agents and plain checkout to fit on a small test filesystem.
const scaleWarm = "cargo build --workspace"

func scaleOne(bin, root, storeRoot string, n int, chained bool, ks []int) (scaleRow, error) {
	r := scaleRow{crates: n, chained: chained}
	name := fmt.Sprintf("scale-%d", n)
	if chained {
		name += "-chain"
	}
	w := &ws{name: name, dir: filepath.Join(root, name), bin: bin, home: filepath.Join(storeRoot, name, "home")}
	// Each size's files go before the next size's are made.
	defer os.RemoveAll(w.dir)
	defer os.RemoveAll(filepath.Dir(w.home))
	var err error
	if w.repo, err = fixture.Generate(filepath.Join(w.dir, "repo"), fixture.Options{ExtraCrates: n, ChainExtras: chained}); err != nil {
		return r, err
	}
	if err := os.WriteFile(filepath.Join(w.repo.Dir, "ferry.toml"), []byte(fmt.Sprintf("[base]\nwarm = [%q]\n", scaleWarm)), 0o644); err != nil {
		return r, err
	}
	if _, err := w.repo.Git("add", "ferry.toml"); err != nil {
		return r, err
	}
	if _, err := w.repo.Commit("bench: warm command"); err != nil {
		return r, err
	}
	fmt.Fprintf(os.Stderr, "bench: scale: %d extra crates: ferry base, cold\n", n)
	if _, r.baseCold, _, err = w.ferry("base", "--json"); err != nil {
		return r, err
	}
	plain := filepath.Join(w.dir, "plain")
	if _, err := w.repo.Git("worktree", "add", "-q", "--detach", plain, "HEAD"); err != nil {
		return r, err
	}
	plainEnv := append(os.Environ(), "CARGO_TARGET_DIR="+filepath.Join(plain, "target"))
	fmt.Fprintf(os.Stderr, "bench: scale: %d extra crates: plain cargo, cold\n", n)
	if r.plainCold, err = sh(plain, plainEnv, scaleWarm); err != nil {
		return r, err
	}
	if r.plainDisk, err = physical(filepath.Join(plain, "target")); err != nil {
		return r, err
	}

	// One agent: spawn, first build through the shim, what it takes on disk.
	var a struct{ Worktree string }
	out, d, _, err := w.ferry("spawn", "solo", "--json")
	if err != nil {
		return r, err
	}
	r.spawn = d
	json.Unmarshal(out, &a)
	if r.first, _, err = shimBuild(w, a.Worktree); err != nil {
		return r, err
	}
	if r.agentDisk, err = agentPhysical(w, "solo"); err != nil {
		return r, err
	}

	// Refreshes: a leaf crate's edit, then the chain's root's, each beside
	// the same edit built in the warm plain checkout (the limit). In a
	// chained workspace the first extra crate is the leaf (only app
	// depends on it) and the last the root (every extra crate does).
	rootLib := fixture.LibPath(fixture.ChainC)
	if chained {
		rootLib = fixture.LibPath(fixture.ExtraCrateName(n - 1))
	}
	for _, edit := range []struct {
		lib        string
		ferry, cpl *time.Duration
	}{{fixture.LibPath(fixture.ExtraCrateName(0)), &r.leaf, &r.plainLeaf}, {rootLib, &r.chain, &r.plainChain}} {
		line := "\n// bench edit\n"
		if *edit.cpl, err = sh(plain, plainEnv, fmt.Sprintf("printf %q >> %s && %s", line, edit.lib, scaleWarm)); err != nil {
			return r, err
		}
		if err := w.repo.Append(edit.lib, line); err != nil {
			return r, err
		}
		if _, err := w.repo.Commit("bench: edit " + edit.lib); err != nil {
			return r, err
		}
		if _, *edit.ferry, _, err = w.ferry("base", "--json"); err != nil {
			return r, err
		}
	}

	for _, k := range ks {
		fmt.Fprintf(os.Stderr, "bench: scale: %d extra crates: %d agents at once\n", n, k)
		c, err := spawnCrowd(w, k)
		if err != nil {
			return r, err
		}
		r.crowds = append(r.crowds, c)
	}
	return r, nil
}

// spawnCrowd spawns k agents at once, then runs their first builds at
// once, and removes them.
func spawnCrowd(w *ws, k int) (crowd, error) {
	c := crowd{k: k}
	spawns, firsts := make([]time.Duration, k), make([]time.Duration, k)
	trees, compiled := make([]string, k), make([]int, k)
	errs := make([]error, k)
	names := make([]string, k)
	var wg sync.WaitGroup
	for i := range k {
		names[i] = fmt.Sprintf("crowd%d-%d", k, i)
		wg.Go(func() {
			out, d, _, err := w.ferry("spawn", names[i], "--json")
			var a struct{ Worktree string }
			if err == nil {
				err = json.Unmarshal(out, &a)
			}
			spawns[i], trees[i], errs[i] = d, a.Worktree, err
		})
	}
	wg.Wait()
	if err := joinErrs(errs); err != nil {
		return c, err
	}
	for i := range k {
		wg.Go(func() { firsts[i], compiled[i], errs[i] = shimBuild(w, trees[i]) })
	}
	wg.Wait()
	if err := joinErrs(errs); err != nil {
		return c, err
	}
	for _, name := range names {
		if _, _, _, err := w.ferry("rm", name, "--force"); err != nil {
			return c, err
		}
	}
	c.spawnMedian, c.spawnMax = median(slices.Clone(spawns)), slices.Max(spawns)
	c.firstMedian, c.firstMax = median(slices.Clone(firsts)), slices.Max(firsts)
	for _, n := range compiled {
		c.compiled += n
	}
	return c, nil
}

// shimBuild runs the warm command in an agent's worktree through the
// shim, as an agent's shell does, and counts the crates cargo compiled.
func shimBuild(w *ws, tree string) (time.Duration, int, error) {
	c := exec.Command("sh", "-c", scaleWarm)
	c.Dir, c.Env = tree, w.shimEnv()
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	t := time.Now()
	err := c.Run()
	d := time.Since(t)
	if err != nil {
		return d, 0, fmt.Errorf("%s in %s: %v\n%s", scaleWarm, tree, err, out.String())
	}
	n := 0
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if strings.HasPrefix(strings.TrimSpace(sc.Text()), "Compiling ") {
			n++
		}
	}
	return d, n, nil
}

// agentPhysical is what ferry stats --disk says agent name takes on disk.
func agentPhysical(w *ws, name string) (int64, error) {
	out, _, _, err := w.ferry("stats", "--disk", "--json")
	if err != nil {
		return 0, err
	}
	var disk struct {
		Agents []struct {
			Name     string `json:"name"`
			Physical int64  `json:"physical_bytes"`
		} `json:"agents"`
	}
	if err := json.Unmarshal(out, &disk); err != nil {
		return 0, err
	}
	for _, a := range disk.Agents {
		if a.Name == name {
			return a.Physical, nil
		}
	}
	return 0, fmt.Errorf("ferry stats --disk: no agent %s", name)
}

// physical is what dir takes on disk, in bytes (package diskuse, which
// ferry stats --disk counts with).
func physical(dir string) (int64, error) {
	u, err := diskuse.New().Add(dir)
	return u.Physical, err
}

func printScale(rows []scaleRow, where string) {
	if len(rows) == 0 {
		return
	}
	fmt.Printf("\n== Scaling with the workspace: generated leaf crates beside the fixture's chain, warm %q (store on %s; %d CPUs; one round each)\n", scaleWarm, where, runtime.NumCPU())
	fmt.Printf("  %6s %10s %10s %8s %10s %10s %8s %10s %10s %7s %8s %11s %11s\n",
		"crates", "base cold", "plain cold", "ratio", "refr leaf", "plain leaf", "over", "refr root", "plain root", "over", "spawn", "1st build", "agent disk")
	for _, r := range rows {
		crates := strconv.Itoa(r.crates)
		if r.chained {
			crates += "c"
		}
		fmt.Printf("  %6s %9.1fs %9.1fs %7.2fx %9.2fs %9.2fs %+7.2fs %9.2fs %10.2fs %+6.2fs %7.3fs %10.3fs %8.1f MB (plain %.0f MB)\n",
			crates, r.baseCold.Seconds(), r.plainCold.Seconds(), r.baseCold.Seconds()/r.plainCold.Seconds(),
			r.leaf.Seconds(), r.plainLeaf.Seconds(), (r.leaf - r.plainLeaf).Seconds(),
			r.chain.Seconds(), r.plainChain.Seconds(), (r.chain - r.plainChain).Seconds(),
			r.spawn.Seconds(), r.first.Seconds(), float64(r.agentDisk)/1e6, float64(r.plainDisk)/1e6)
	}
	fmt.Printf("  (refr: ferry base after the edit is committed; plain: the same edit built in a warm plain checkout; over: refresh minus plain;\n")
	fmt.Printf("   root: chain-c, under 3 crates, or, for Nc (N crates in one chain), the chain's last, under all N)\n")
	fmt.Printf("\n== Agents spawned at once, then their first builds at once\n")
	fmt.Printf("  %6s %6s %12s %12s %12s %12s %10s\n", "crates", "agents", "spawn med", "spawn max", "1st med", "1st max", "compiled")
	for _, r := range rows {
		for _, c := range r.crowds {
			fmt.Printf("  %6d %6d %11.3fs %11.3fs %11.3fs %11.3fs %10d\n", r.crates, c.k,
				c.spawnMedian.Seconds(), c.spawnMax.Seconds(), c.firstMedian.Seconds(), c.firstMax.Seconds(), c.compiled)
		}
	}
	fmt.Printf("  (compiled: crates the first builds compiled, all agents together; 0: every agent was warm)\n")
}

// ints reads a comma-separated list of positive whole numbers.
func ints(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: give positive whole numbers separated by commas", list)
		}
		out = append(out, n)
	}
	return out, nil
}

func joinErrs(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
