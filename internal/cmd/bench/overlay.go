package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/sandbox"
)

// The overlay section: how `ferry spawn` scales with the size of the base
// target per backend, and what the overlay's mount protocol adds to the
// cargo calls after it (the first build, a call that creates the agent's
// namespace, a call that joins it). Every figure is a real ferry process and
// a real cargo; `sync` runs before each timed step so that each starts from
// the same writeback state, and one line measures the steps with unwritten
// data on the store's filesystem instead.

// spawnRecord is the part of `ferry spawn --json` the bench reads.
type spawnRecord struct {
	Worktree string `json:"worktree"`
	Backend  string `json:"backend"`
	Fork     struct {
		Files int   `json:"files"`
		Bytes int64 `json:"bytes"`
	} `json:"fork"`
	Timings struct {
		Worktree float64 `json:"worktree"`
		Stamp    float64 `json:"stamp"`
		Fork     float64 `json:"fork"`
		Sync     float64 `json:"sync"`
		Total    float64 `json:"total"`
	} `json:"timings"`
}

// spawnTiming is one timed spawn.
type spawnTiming struct {
	wall time.Duration
	rec  spawnRecord
}

func (w *ws) spawnAgent(name, backend string, extra ...string) (spawnTiming, error) {
	out, d, _, err := w.ferryEnv(extra, "spawn", name, "--backend", backend, "--json")
	if err != nil {
		return spawnTiming{}, err
	}
	var r spawnRecord
	if err := json.Unmarshal(out, &r); err != nil {
		return spawnTiming{}, fmt.Errorf("ferry spawn %s --json: %w", name, err)
	}
	if r.Backend != backend {
		return spawnTiming{}, fmt.Errorf("ferry spawn %s --backend %s made a %s agent", name, backend, r.Backend)
	}
	return spawnTiming{wall: d, rec: r}, nil
}

func (w *ws) removeAgent(name string) error {
	_, _, _, err := w.ferry("rm", "--force", name)
	return err
}

// shimEnv is the environment of a process that builds through the shim.
func (w *ws) shimEnv() []string {
	env := w.env()
	for j, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			env[j] = "PATH=" + filepath.Join(w.home, "bin") + ":" + kv[5:]
		}
	}
	return env
}

// agentDir is an agent's directory in the store (which holds upper/ and
// work/ for an overlay agent), with symlinks resolved as mountinfo shows it.
func (w *ws) agentDir(name string) (string, error) {
	m, _ := filepath.Glob(filepath.Join(w.home, "*", "agents", name))
	if len(m) != 1 {
		return "", fmt.Errorf("agent %s: %d directories in %s", name, len(m), w.home)
	}
	return filepath.EvalSymlinks(m[0])
}

func runOverlay(bin string, n int, xfs, sizeList string) error {
	if err := fixture.CheckTools(""); err != nil {
		return err
	}
	sizes, err := parseSizes(sizeList)
	if err != nil {
		return err
	}
	bin, _ = filepath.Abs(bin)
	root, err := os.MkdirTemp("", "ferry-bench-overlay-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	w, err := setupWS(bin, root, "fixture", fixture.Options{})
	if err != nil {
		return err
	}
	if err := w.spawnScaling(n, xfs, sizes); err != nil {
		return err
	}
	return w.mountCost(n)
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 || k > 64 {
			return nil, fmt.Errorf("-sizes %q: want a comma-separated list of multiples between 1 and 64", s)
		}
		out = append(out, k)
	}
	return out, nil
}

// scaledWarm is a warm command that fills the target with k copies of the
// real target at real (the first at its root, the others beside it), so a
// base of k times the size is built by ferry base itself, without k cargo
// builds.
func scaledWarm(real string, k int) string {
	c := fmt.Sprintf(`cp -a '%s/.' "$CARGO_TARGET_DIR/"`, real)
	if k > 1 {
		c += fmt.Sprintf(` && for i in $(seq 2 %d); do cp -a '%s' "$CARGO_TARGET_DIR/replica-$i"; done`, k, real)
	}
	return c
}

// overlayPerRound is how many overlay spawns each round of the scaling
// table times (one of each other backend).
const overlayPerRound = 3

type scalePoint struct {
	k                      int
	files                  int
	bytes                  int64
	copy, overlay, reflink []spawnTiming
	reflinkNote            string
}

// spawnScaling times `ferry spawn` per backend on bases of growing size:
// copy and overlay in a store on the scratch filesystem, reflink in a store
// on xfs when it clones.
func (w *ws) spawnScaling(n int, xfs string, sizes []int) error {
	var realBytes int64
	filepath.WalkDir(w.base.Target, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				realBytes += fi.Size()
			}
		}
		return nil
	})
	var xfsRoot string
	xfsNote := "no filesystem with clones given; pass -xfs DIR or set FERRY_TEST_XFS"
	if xfs != "" {
		if ok, _ := fork.CanReflink(xfs); ok {
			d, err := os.MkdirTemp(xfs, "ferry-bench-overlay-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(d)
			xfsRoot = d
		} else {
			xfsNote = xfs + " does not clone"
		}
	}
	toml := filepath.Join(w.repo.Dir, "ferry.toml")
	orig, err := os.ReadFile(toml)
	if err != nil {
		return err
	}
	defer os.WriteFile(toml, orig, 0o644)

	var points []scalePoint
	for _, k := range sizes {
		p := scalePoint{k: k}
		fmt.Fprintf(os.Stderr, "bench: overlay: building a base of %d times the fixture's target\n", k)
		if err := os.WriteFile(toml, []byte(fmt.Sprintf("[base]\nwarm = [%q]\n", scaledWarm(w.base.Target, k))), 0o644); err != nil {
			return err
		}
		// One store per size and filesystem; each is deleted once measured.
		local := *w
		local.dir = filepath.Join(w.dir, fmt.Sprintf("scale-x%d", k))
		local.home = filepath.Join(local.dir, "home")
		if _, _, _, err := local.ferry("base", "--json"); err != nil {
			return err
		}
		var clone *ws
		if xfsRoot != "" {
			var st syscall.Statfs_t
			need := int64(k)*realBytes + 512<<20
			if err := syscall.Statfs(xfsRoot, &st); err == nil && int64(st.Bavail)*int64(st.Bsize) < need {
				p.reflinkNote = fmt.Sprintf("skipped: %d MiB free on %s, %d MiB needed", int64(st.Bavail)*int64(st.Bsize)>>20, xfs, need>>20)
			} else {
				c := *w
				c.dir = filepath.Join(xfsRoot, fmt.Sprintf("scale-x%d", k))
				c.home = filepath.Join(c.dir, "home")
				if _, _, _, err := c.ferry("base", "--json"); err != nil {
					return err
				}
				clone = &c
			}
		} else {
			p.reflinkNote = xfsNote
		}
		for i := 0; i < n; i++ {
			type job struct {
				w       *ws
				backend string
				to      *[]spawnTiming
			}
			// Overlay spawns are cheap, and their figure is the goal's:
			// more of them steady its median on a noisy machine.
			jobs := []job{{&local, fork.NameCopy, &p.copy}}
			for range overlayPerRound {
				jobs = append(jobs, job{&local, fork.NameOverlay, &p.overlay})
			}
			if clone != nil {
				jobs = append(jobs, job{clone, fork.NameReflink, &p.reflink})
			}
			for jn, j := range jobs {
				name := fmt.Sprintf("x%d-%s-%d-%d", k, j.backend, i, jn)
				exec.Command("sync").Run()
				t, err := j.w.spawnAgent(name, j.backend)
				if err != nil {
					return err
				}
				*j.to = append(*j.to, t)
				if j.backend == fork.NameCopy {
					p.files, p.bytes = t.rec.Fork.Files, t.rec.Fork.Bytes
				}
				if err := j.w.removeAgent(name); err != nil {
					return err
				}
			}
		}
		fmt.Fprintf(os.Stderr, "bench: overlay: x%d: copy %.0f ms, overlay %.0f ms\n", k, ms(medianWall(p.copy)), ms(medianWall(p.overlay)))
		os.RemoveAll(local.dir)
		if clone != nil {
			os.RemoveAll(clone.dir)
		}
		points = append(points, p)
	}
	printScaling(n, points)
	return nil
}

func medianWall(ts []spawnTiming) time.Duration {
	var ds []time.Duration
	for _, t := range ts {
		ds = append(ds, t.wall)
	}
	return median(ds)
}

// medianOf is the median of one of the record's timings.
func medianOf(ts []spawnTiming, f func(spawnRecord) float64) time.Duration {
	var ds []time.Duration
	for _, t := range ts {
		ds = append(ds, secs(f(t.rec)))
	}
	return median(ds)
}

func forkPhase(r spawnRecord) float64  { return r.Timings.Fork }
func totalPhase(r spawnRecord) float64 { return r.Timings.Total }

// ratio prints a/b, or a bound when b rounds to zero (the record's timings
// are rounded to the millisecond).
func ratio(a, b time.Duration) string {
	switch {
	case b < time.Millisecond/2:
		return fmt.Sprintf(">%.0fx", a.Seconds()/time.Millisecond.Seconds())
	case a >= 100*b:
		return fmt.Sprintf("%.0fx", a.Seconds()/b.Seconds())
	}
	return fmt.Sprintf("%.1fx", a.Seconds()/b.Seconds())
}

func printScaling(n int, points []scalePoint) {
	fmt.Printf("\n== Spawn time as the base target grows: `ferry spawn --backend B` (ms; median of %d, overlay %d, interleaved, sync before each)\n",
		n, n*overlayPerRound)
	fmt.Println("  target xK: a base whose warm command fills its target with K copies of the fixture's cargo-built target")
	fmt.Println("  wall: the whole ferry spawn process; fork: timings.fork of its JSON record (1 ms resolution)")
	fmt.Printf("  %-6s %6s %6s  %17s  %17s  %17s  %17s\n", "target", "files", "MiB",
		"copy wall/fork", "overlay wall/fork", "reflink wall/fork", "copy/overlay w, f")
	cell := func(ts []spawnTiming) string {
		if len(ts) == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f / %.0f", ms(medianWall(ts)), ms(medianOf(ts, forkPhase)))
	}
	var notes []string
	for _, p := range points {
		cw, ow := medianWall(p.copy), medianWall(p.overlay)
		fmt.Printf("  %-6s %6d %6.0f  %17s  %17s  %17s  %17s\n", fmt.Sprintf("x%d", p.k), p.files, float64(p.bytes)/(1<<20),
			cell(p.copy), cell(p.overlay), cell(p.reflink),
			ratio(cw, ow)+", "+ratio(medianOf(p.copy, forkPhase), medianOf(p.overlay, forkPhase)))
		if p.reflinkNote != "" {
			notes = append(notes, fmt.Sprintf("x%d: %s", p.k, p.reflinkNote))
		}
	}
	for _, note := range notes {
		fmt.Printf("  (reflink %s)\n", note)
	}
	if len(points) == 0 {
		return
	}
	first, last := points[0], points[len(points)-1]
	fmt.Printf("  %-58s %.0f -> %.0f ms (x%.2f)\n", fmt.Sprintf("overlay spawn wall, x%d -> x%d target", first.k, last.k),
		ms(medianWall(first.overlay)), ms(medianWall(last.overlay)), medianWall(last.overlay).Seconds()/medianWall(first.overlay).Seconds())
	fmt.Printf("  %-58s %.0f -> %.0f ms (x%.2f)\n", fmt.Sprintf("copy spawn wall, x%d -> x%d target", first.k, last.k),
		ms(medianWall(first.copy)), ms(medianWall(last.copy)), medianWall(last.copy).Seconds()/medianWall(first.copy).Seconds())
	if len(first.reflink) > 0 && len(last.reflink) > 0 {
		fmt.Printf("  %-58s %.0f -> %.0f ms (x%.2f)\n", fmt.Sprintf("reflink spawn wall, x%d -> x%d target", first.k, last.k),
			ms(medianWall(first.reflink)), ms(medianWall(last.reflink)), medianWall(last.reflink).Seconds()/medianWall(first.reflink).Seconds())
	}
	var maxWall, maxTotal, maxFork time.Duration
	for _, p := range points {
		maxWall = max(maxWall, medianWall(p.overlay))
		maxTotal = max(maxTotal, medianOf(p.overlay, totalPhase))
		maxFork = max(maxFork, medianOf(p.overlay, forkPhase))
	}
	yes := func(d time.Duration) string {
		if d < 100*time.Millisecond {
			return "yes"
		}
		return "NO"
	}
	fmt.Printf("  overlay spawn under 100 ms at every size: wall %s (max median %.0f ms); timings.total %s (max %.0f ms); fork phase %s (max %.0f ms)\n",
		yes(maxWall), ms(maxWall), yes(maxTotal), ms(maxTotal), yes(maxFork), ms(maxFork))
	o := last.overlay
	wt := medianOf(o, func(r spawnRecord) float64 { return r.Timings.Worktree })
	st := medianOf(o, func(r spawnRecord) float64 { return r.Timings.Stamp })
	fk := medianOf(o, forkPhase)
	rest := medianOf(o, func(r spawnRecord) float64 {
		return r.Timings.Total - r.Timings.Worktree - r.Timings.Stamp - r.Timings.Fork - r.Timings.Sync
	})
	proc := median(func() []time.Duration {
		var ds []time.Duration
		for _, t := range o {
			ds = append(ds, t.wall-secs(t.rec.Timings.Total))
		}
		return ds
	}())
	fmt.Printf("  overlay spawn at x%d, medians: worktree %.0f ms, stamp %.0f ms, fork %.0f ms, rest of Spawn (backend probe, locks, records) %.0f ms, outside Spawn (process start, shim install, event) %.0f ms\n",
		last.k, ms(wt), ms(st), ms(fk), ms(rest), ms(proc))
}

// mountCost measures what the overlay's mount protocol adds to cargo calls,
// in agents of the real (cargo-built) fixture base.
func (w *ws) mountCost(n int) error {
	m := max(n, 7)
	env := w.shimEnv()
	build := func(wt string) (time.Duration, error) {
		exec.Command("sync").Run()
		return sh(wt, env, benchWarm)
	}

	// The first no-op build in a fresh agent, copy against overlay, and a
	// second one in each.
	var firstCopy, firstOvl, secondCopy, secondOvl []time.Duration
	for i := 0; i < m; i++ {
		c, err := w.spawnAgent(fmt.Sprintf("fb-copy-%d", i), fork.NameCopy)
		if err != nil {
			return err
		}
		o, err := w.spawnAgent(fmt.Sprintf("fb-overlay-%d", i), fork.NameOverlay)
		if err != nil {
			return err
		}
		for _, s := range []struct {
			wt string
			to *[]time.Duration
		}{{c.rec.Worktree, &firstCopy}, {o.rec.Worktree, &firstOvl}, {c.rec.Worktree, &secondCopy}, {o.rec.Worktree, &secondOvl}} {
			d, err := build(s.wt)
			if err != nil {
				return err
			}
			*s.to = append(*s.to, d)
		}
		for _, name := range []string{fmt.Sprintf("fb-copy-%d", i), fmt.Sprintf("fb-overlay-%d", i)} {
			if err := w.removeAgent(name); err != nil {
				return err
			}
		}
	}

	// Per call: create the namespace (nothing of the agent alive) against
	// join it (a sleeper keeps it alive), beside a copy agent and cargo
	// directly.
	ovl, err := w.spawnAgent("pc-overlay", fork.NameOverlay)
	if err != nil {
		return err
	}
	cp, err := w.spawnAgent("pc-copy", fork.NameCopy)
	if err != nil {
		return err
	}
	defer w.removeAgent("pc-overlay")
	defer w.removeAgent("pc-copy")
	// Untimed: the first builds copy up what a no-op build writes.
	for _, wt := range []string{ovl.rec.Worktree, cp.rec.Worktree} {
		if _, err := sh(wt, env, benchWarm); err != nil {
			return err
		}
	}
	dir, err := w.agentDir("pc-overlay")
	if err != nil {
		return err
	}
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	realCargo, err := exec.LookPath("cargo")
	if err != nil {
		return err
	}
	shimCargo := filepath.Join(w.home, "bin", "cargo")
	// call times argv in wt; the caller syncs first when it should.
	call := func(wt string, argv ...string) (time.Duration, error) {
		c := exec.Command(argv[0], argv[1:]...)
		c.Dir, c.Env = wt, env
		t := time.Now()
		out, err := c.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
		return time.Since(t), nil
	}
	buildArgv := append([]string{shimCargo}, strings.Fields(benchWarm)[1:]...)
	var direct, bindV, createV, joinV, bindB, createB, joinB []time.Duration
	for i := 0; i < 2*m; i++ {
		if len(sandbox.OverlayUsers(upper, work)) > 0 {
			return fmt.Errorf("agent pc-overlay's overlay is still mounted before a create")
		}
		for _, s := range []struct {
			wt   string
			argv []string
			to   *[]time.Duration
		}{
			{cp.rec.Worktree, []string{realCargo, "-V"}, &direct},
			{cp.rec.Worktree, []string{shimCargo, "-V"}, &bindV},
			{ovl.rec.Worktree, []string{shimCargo, "-V"}, &createV},
			{cp.rec.Worktree, buildArgv, &bindB},
			{ovl.rec.Worktree, buildArgv, &createB},
		} {
			exec.Command("sync").Run()
			d, err := call(s.wt, s.argv...)
			if err != nil {
				return err
			}
			*s.to = append(*s.to, d)
		}
		stop, err := w.sleeper("pc-overlay", upper, work)
		if err != nil {
			return err
		}
		for _, s := range []struct {
			argv []string
			to   *[]time.Duration
		}{{[]string{shimCargo, "-V"}, &joinV}, {buildArgv, &joinB}} {
			exec.Command("sync").Run()
			d, err := call(ovl.rec.Worktree, s.argv...)
			if err != nil {
				stop()
				return err
			}
			*s.to = append(*s.to, d)
		}
		if err := stop(); err != nil {
			return err
		}
	}

	// With unwritten data on the store's filesystem: the last process of
	// an overlay's namespace unmounts it, and the kernel then syncs the
	// upper filesystem, so a create call (whose namespace ends with it) and
	// spawn (whose backend probe mounts a throwaway overlay) may wait for
	// writeback; a join does not end the namespace.
	const dirtyMiB = 256
	junk := make([]byte, dirtyMiB<<20)
	for i := range junk {
		junk[i] = byte(i * 7)
	}
	dirtyFile := filepath.Join(w.dir, "unwritten")
	var dirtyKiB []int64
	// dirty times f after writing dirtyMiB to a new file (not a truncated
	// one: ext4 starts writing a file replaced by truncation on close).
	dirty := func(f func() (time.Duration, error)) (time.Duration, error) {
		exec.Command("sync").Run()
		os.Remove(dirtyFile)
		if err := os.WriteFile(dirtyFile, junk, 0o644); err != nil {
			return 0, err
		}
		defer os.Remove(dirtyFile)
		dirtyKiB = append(dirtyKiB, meminfoKiB("Dirty"))
		return f()
	}
	spawnOverlay := func(name string) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			t, err := w.spawnAgent(name, fork.NameOverlay)
			if err != nil {
				return 0, err
			}
			return t.wall, w.removeAgent(name)
		}
	}
	var cleanSpawn, dirtySpawn, dirtyBind, dirtyCreate, dirtyJoin []time.Duration
	for i := 0; i < n; i++ {
		exec.Command("sync").Run()
		d, err := spawnOverlay(fmt.Sprintf("clean-%d", i))()
		if err != nil {
			return err
		}
		cleanSpawn = append(cleanSpawn, d)
		for _, s := range []struct {
			f  func() (time.Duration, error)
			to *[]time.Duration
		}{
			{spawnOverlay(fmt.Sprintf("dirty-%d", i)), &dirtySpawn},
			{func() (time.Duration, error) { return call(cp.rec.Worktree, shimCargo, "-V") }, &dirtyBind},
			{func() (time.Duration, error) { return call(ovl.rec.Worktree, shimCargo, "-V") }, &dirtyCreate},
		} {
			d, err := dirty(s.f)
			if err != nil {
				return err
			}
			*s.to = append(*s.to, d)
		}
		stop, err := w.sleeper("pc-overlay", upper, work)
		if err != nil {
			return err
		}
		d, err = dirty(func() (time.Duration, error) { return call(ovl.rec.Worktree, shimCargo, "-V") })
		stop()
		if err != nil {
			return err
		}
		dirtyJoin = append(dirtyJoin, d)
	}

	fmt.Printf("\n== Overlay mount protocol: what it adds to cargo calls, fixture workspace (%d files in the base target; sync before each)\n", w.files)
	fmt.Printf("  %-64s %9s\n", "measure", "median ms")
	row := func(name string, d time.Duration) { fmt.Printf("  %-64s %9.1f\n", name, ms(d)) }
	diff := func(name string, a, b time.Duration) { fmt.Printf("  %-64s %+9.1f\n", name, ms(a)-ms(b)) }
	fmt.Printf("  first no-op cargo build in a fresh agent (median of %d):\n", m)
	fc, fo, sc, so := median(firstCopy), median(firstOvl), median(secondCopy), median(secondOvl)
	row("first build, copy agent", fc)
	row("first build, overlay agent (creates the namespace, mounts)", fo)
	diff("  extra cost of the first overlay build over copy", fo, fc)
	row("second build, copy agent", sc)
	row("second build, overlay agent (creates it again: nothing alive)", so)
	diff("  overlay first - second (first copy-ups, cold overlay)", fo, so)
	diff("  overlay second - copy second", so, sc)
	fmt.Printf("  one cargo call through the shim (median of %d, interleaved):\n", 2*m)
	row("cargo -V: real cargo, directly", median(direct))
	row("cargo -V: copy agent (a namespace of its own, bind mounts)", median(bindV))
	row("cargo -V: overlay agent, creates the namespace", median(createV))
	row("cargo -V: overlay agent, joins a live namespace", median(joinV))
	diff("  create - join", median(createV), median(joinV))
	diff("  create - copy agent", median(createV), median(bindV))
	diff("  join - copy agent", median(joinV), median(bindV))
	row("no-op cargo build: copy agent", median(bindB))
	row("no-op cargo build: overlay agent, creates the namespace", median(createB))
	row("no-op cargo build: overlay agent, joins a live namespace", median(joinB))
	diff("  create - join", median(createB), median(joinB))
	diff("  create - copy agent", median(createB), median(bindB))
	diff("  join - copy agent", median(joinB), median(bindB))
	fmt.Printf("  with %d MiB unwritten on the store's filesystem (Dirty in /proc/meminfo: %.0f MiB; median of %d):\n",
		dirtyMiB, float64(slices.Sorted(slices.Values(dirtyKiB))[len(dirtyKiB)/2])/1024, n)
	fmt.Println("  (unmounting a plain overlay syncs its upper's whole filesystem; agent overlays and spawn's probe are mounted volatile, so neither the call that ends a namespace nor spawn should wait)")
	row("cargo -V: copy agent", median(dirtyBind))
	row("cargo -V: overlay agent, creates the namespace", median(dirtyCreate))
	row("cargo -V: overlay agent, joins a live namespace", median(dirtyJoin))
	diff("  create, unwritten data - nothing unwritten", median(dirtyCreate), median(createV))
	diff("  join, unwritten data - nothing unwritten", median(dirtyJoin), median(joinV))
	row("ferry spawn --backend overlay", median(dirtySpawn))
	row("ferry spawn --backend overlay, nothing unwritten", median(cleanSpawn))
	diff("  spawn, unwritten data - nothing unwritten", median(dirtySpawn), median(cleanSpawn))
	return nil
}

// sleeper keeps agent name's overlay namespace alive with `ferry run NAME
// -- sleep 60` until stop, which kills it (its process group) and waits
// until no process has the overlay mounted.
func (w *ws) sleeper(name, upper, work string) (stop func() error, err error) {
	c := exec.Command(filepath.Join(w.bin, "ferry"), "run", name, "--", "sleep", "60")
	c.Dir, c.Env = w.repo.Dir, w.env()
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		return nil, err
	}
	stop = func() error {
		syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
		c.Wait()
		return waitFor(10*time.Second, func() bool { return len(sandbox.OverlayUsers(upper, work)) == 0 },
			"agent %s's overlay to be unmounted after the sleeper exited", name)
	}
	if err := waitFor(10*time.Second, func() bool {
		if len(sandbox.OverlayUsers(upper, work)) == 0 {
			return false
		}
		// ns.json must name a process that has it mounted: a stale one
		// would make the first join wait.
		var rec struct{ Pid int }
		data, err := os.ReadFile(filepath.Join(filepath.Dir(upper), "ns.json"))
		if err != nil || json.Unmarshal(data, &rec) != nil {
			return false
		}
		return slices.Contains(sandbox.OverlayUsers(upper, work), rec.Pid)
	}, "agent %s's namespace to be up", name); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

func waitFor(limit time.Duration, ok func() bool, what string, args ...any) error {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %s for "+what, append([]any{limit}, args...)...)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// meminfoKiB returns a /proc/meminfo field in KiB (0 if absent).
func meminfoKiB(field string) int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		name, rest, ok := strings.Cut(s.Text(), ":")
		if ok && name == field {
			v, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return v
		}
	}
	return 0
}
