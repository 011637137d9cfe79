package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/fork"
)

// ws is one benchmarked workspace with a base built by Ferry.
type ws struct {
	name  string
	dir   string // scratch root
	repo  *fixture.Repo
	bin   string
	home  string
	store string
	base  struct {
		ID     string `json:"id"`
		Src    string `json:"src"`
		Target string `json:"target"`
	}
	files int      // files in the base target
	extra []string // environment every command of the workspace gets
}

const benchWarm = "cargo build --workspace --all-targets"

func (w *ws) env(extra ...string) []string {
	env := append(os.Environ(), append([]string{"FERRY_HOME=" + w.home, "FERRY_WORKTREES=" + filepath.Join(w.dir, "worktrees")}, w.extra...)...)
	return append(env, extra...)
}

func (w *ws) ferry(args ...string) ([]byte, time.Duration, *os.ProcessState, error) {
	return w.ferryEnv(nil, args...)
}

// ferryEnv is ferry with extra variables in the environment.
func (w *ws) ferryEnv(extra []string, args ...string) ([]byte, time.Duration, *os.ProcessState, error) {
	c := exec.Command(filepath.Join(w.bin, "ferry"), args...)
	c.Dir = w.repo.Dir
	c.Env = w.env(extra...)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	t := time.Now()
	out, err := c.Output()
	d := time.Since(t)
	if err != nil {
		return nil, d, nil, fmt.Errorf("ferry %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, d, c.ProcessState, nil
}

// sh runs a shell command in dir and returns its wall time.
func sh(dir string, env []string, script string) (time.Duration, error) {
	c := exec.Command("sh", "-c", script)
	c.Dir = dir
	c.Env = env
	t := time.Now()
	out, err := c.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s: %v\n%s", script, err, out)
	}
	return time.Since(t), nil
}

func setupWS(bin, root, name string, opts fixture.Options) (*ws, error) {
	w := &ws{name: name, dir: filepath.Join(root, name), bin: bin}
	w.home = filepath.Join(w.dir, "home")
	var err error
	if w.repo, err = fixture.Generate(filepath.Join(w.dir, "repo"), opts); err != nil {
		return nil, err
	}
	os.WriteFile(filepath.Join(w.repo.Dir, "ferry.toml"), []byte(fmt.Sprintf("[base]\nwarm = [%q]\n", benchWarm)), 0o644)
	fmt.Fprintf(os.Stderr, "bench: %s: building the base\n", name)
	out, _, _, err := w.ferry("base", "--json")
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(out, &w.base); err != nil {
		return nil, err
	}
	filepath.WalkDir(w.base.Target, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			w.files++
		}
		return nil
	})
	return w, nil
}

type agentRun struct {
	cold, coldNoop, coldEdit      time.Duration
	shared                        time.Duration
	plainCopy                     time.Duration
	spawn, first, second, ferryEd time.Duration
	spawnRSS                      int64 // KiB
}

func runAgents(bin string, n, large int, xfs string) error {
	if err := fixture.CheckTools(""); err != nil {
		return err
	}
	bin, _ = filepath.Abs(bin)
	root, err := os.MkdirTemp("", "ferry-bench-agents-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	sets := workspaceSets(large)
	for _, set := range sets {
		w, err := setupWS(bin, root, set.dirName(), set.opts)
		if err != nil {
			return err
		}
		w.name = set.name
		var runs []agentRun
		// The shared target is warm before the rounds, as it is in use.
		shared := filepath.Join(w.dir, "shared-target")
		warmup := filepath.Join(w.dir, "shared-warmup")
		if _, err := w.repo.Git("worktree", "add", "-q", "--detach", warmup, "HEAD"); err != nil {
			return err
		}
		if _, err := sh(warmup, append(os.Environ(), "CARGO_TARGET_DIR="+shared), benchWarm); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			r, err := w.round(i, shared)
			if err != nil {
				return err
			}
			runs = append(runs, r)
			fmt.Fprintf(os.Stderr, "bench: %s round %d: cold %.1fs, ferry spawn+first build %.2fs\n", w.name, i+1, r.cold.Seconds(), (r.spawn + r.first).Seconds())
		}
		med := func(f func(agentRun) time.Duration) time.Duration {
			var ds []time.Duration
			for _, r := range runs {
				ds = append(ds, f(r))
			}
			return median(ds)
		}
		cold := med(func(r agentRun) time.Duration { return r.cold })
		noop := med(func(r agentRun) time.Duration { return r.coldNoop })
		ferryFirst := med(func(r agentRun) time.Duration { return r.spawn + r.first })
		first := med(func(r agentRun) time.Duration { return r.first })
		fmt.Printf("\n== New worktree to built binary, %s workspace (%d files in the base target; median of %d)\n", w.name, w.files, n)
		fmt.Printf("  %-58s %9s %9s\n", "approach", "seconds", "vs cold")
		row := func(name string, d time.Duration) {
			fmt.Printf("  %-58s %9.3f %8.1fx\n", name, d.Seconds(), cold.Seconds()/d.Seconds())
		}
		row("cold cargo build in a fresh worktree", cold)
		row("shared CARGO_TARGET_DIR (fast, and wrong: see the oracle)", med(func(r agentRun) time.Duration { return r.shared }))
		row("plain copy of the target, no stamping (cp -a + build)", med(func(r agentRun) time.Duration { return r.plainCopy }))
		row("ferry spawn + first cargo build (through the shim)", ferryFirst)
		fmt.Printf("\n  %-58s %9.3f\n", "ferry spawn alone", med(func(r agentRun) time.Duration { return r.spawn }).Seconds())
		fmt.Printf("  %-58s %9.3f\n", "ferry: first build in the new agent", first.Seconds())
		fmt.Printf("  %-58s %9.3f\n", "no-op build in a warm checkout (plain cargo)", noop.Seconds())
		fmt.Printf("  %-58s %8.2fx  (goal <= 1.5x)\n", "first agent build / warm no-op build", first.Seconds()/noop.Seconds())
		fmt.Printf("  %-58s %9.3f\n", "ferry: second (no-op) build in the agent", med(func(r agentRun) time.Duration { return r.second }).Seconds())
		ed, ced := med(func(r agentRun) time.Duration { return r.ferryEd }), med(func(r agentRun) time.Duration { return r.coldEdit })
		fmt.Printf("  %-58s %9.3f\n", "one-file edit (chain-c): build in the agent", ed.Seconds())
		fmt.Printf("  %-58s %9.3f\n", "one-file edit (chain-c): build in a warm plain checkout", ced.Seconds())
		fmt.Printf("  %-58s %8.2fx\n", "edit build, agent / warm checkout", ed.Seconds()/ced.Seconds())
		var rss []time.Duration
		for _, r := range runs {
			rss = append(rss, time.Duration(r.spawnRSS))
		}
		fmt.Printf("  %-58s %7.1f MiB\n", "peak RSS of ferry spawn", float64(median(rss))/1024)

		if err := w.baseCheck(5, med(func(r agentRun) time.Duration { return r.spawn })); err != nil {
			return err
		}
		if err := w.forkTable(n, xfs); err != nil {
			return err
		}
		if err := w.shimOverhead(30); err != nil {
			return err
		}
	}
	return nil
}

// round measures each approach once.
func (w *ws) round(i int, shared string) (agentRun, error) {
	var r agentRun
	var err error
	// Cold: a fresh worktree with its own target.
	cold := filepath.Join(w.dir, fmt.Sprintf("cold-%d", i))
	if _, err := w.repo.Git("worktree", "add", "-q", "--detach", cold, "HEAD"); err != nil {
		return r, err
	}
	coldEnv := append(os.Environ(), "CARGO_TARGET_DIR="+filepath.Join(cold, "target"))
	if r.cold, err = sh(cold, coldEnv, benchWarm); err != nil {
		return r, err
	}
	if r.coldNoop, err = sh(cold, coldEnv, benchWarm); err != nil {
		return r, err
	}
	if r.coldEdit, err = sh(cold, coldEnv, "echo '// edit' >> "+fixture.LibPath(fixture.ChainC)+" && cargo build --workspace --all-targets"); err != nil {
		return r, err
	}
	// Shared target: every worktree builds into one dir (warm after round 0).
	sw := filepath.Join(w.dir, fmt.Sprintf("shared-%d", i))
	w.repo.Git("worktree", "add", "-q", "--detach", sw, "HEAD")
	if r.shared, err = sh(sw, append(os.Environ(), "CARGO_TARGET_DIR="+shared), benchWarm); err != nil {
		return r, err
	}
	// Plain copy of the base target into a fresh worktree, no stamping.
	pc := filepath.Join(w.dir, fmt.Sprintf("plaincopy-%d", i))
	w.repo.Git("worktree", "add", "-q", "--detach", pc, "HEAD")
	if r.plainCopy, err = sh(pc, append(os.Environ(), "CARGO_TARGET_DIR="+filepath.Join(pc, "target")),
		fmt.Sprintf("cp -a %q target && %s", w.base.Target, benchWarm)); err != nil {
		return r, err
	}
	// Ferry: spawn, then build through the shim.
	name := fmt.Sprintf("bench%d", i)
	out, d, ps, err := w.ferry("spawn", name, "--json")
	if err != nil {
		return r, err
	}
	r.spawn = d
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		r.spawnRSS = ru.Maxrss
	}
	var a struct{ Worktree string }
	json.Unmarshal(out, &a)
	shimEnv := w.shimEnv()
	if r.first, err = sh(a.Worktree, shimEnv, benchWarm); err != nil {
		return r, err
	}
	if r.second, err = sh(a.Worktree, shimEnv, benchWarm); err != nil {
		return r, err
	}
	if r.ferryEd, err = sh(a.Worktree, shimEnv, "echo '// edit' >> "+fixture.LibPath(fixture.ChainC)+" && cargo build --workspace --all-targets"); err != nil {
		return r, err
	}
	return r, nil
}

// baseCheck times the check spawn and ferry base make of a ready base
// (base.Verify: a listing of the target with sizes and mtimes, hashed)
// beside a spawn, of which it is a part.
func (w *ws) baseCheck(n int, spawn time.Duration) error {
	var rec base.Record
	if err := atomicfile.ReadJSON(filepath.Join(filepath.Dir(w.base.Target), "base.json"), &rec); err != nil {
		return err
	}
	var ds []time.Duration
	for i := 0; i < n; i++ {
		t := time.Now()
		if err := base.Verify(&rec); err != nil {
			return err
		}
		ds = append(ds, time.Since(t))
	}
	d := median(ds)
	fmt.Printf("  %-58s %8.2f ms  (%d entries; %.0f%% of ferry spawn)\n", "base check: verify the base's target (spawn, ferry base)", ms(d),
		rec.TargetSeal.Entries, 100*d.Seconds()/spawn.Seconds())
	return nil
}

// forkTable times each fork backend beside cp -a of the same target.
func (w *ws) forkTable(n int, xfs string) error {
	type entry struct {
		name string
		f    func(dst string) error
		dir  string
	}
	scratch := filepath.Join(w.dir, "forks")
	entries := []entry{
		{"cp -a", func(dst string) error { return exec.Command("cp", "-a", w.base.Target, dst).Run() }, scratch},
		{"ferry copy backend", func(dst string) error {
			_, err := fork.Copy().Fork(fork.Paths{BaseTarget: w.base.Target, AgentDir: dst})
			return err
		}, scratch},
	}
	var xfsBase string
	if xfs != "" {
		if ok, _ := fork.CanReflink(xfs); ok {
			d, err := os.MkdirTemp(xfs, "ferry-bench-")
			if err == nil {
				defer os.RemoveAll(d)
				xfsBase = filepath.Join(d, "base-target")
				if err := exec.Command("cp", "-a", w.base.Target, xfsBase).Run(); err != nil {
					return err
				}
				entries = append(entries,
					entry{"cp -a --reflink=always (XFS)", func(dst string) error {
						return exec.Command("cp", "-a", "--reflink=always", xfsBase, dst).Run()
					}, d},
					entry{"ferry reflink backend (XFS)", func(dst string) error {
						_, err := fork.Reflink().Fork(fork.Paths{BaseTarget: xfsBase, AgentDir: dst})
						return err
					}, d},
					entry{"ferry copy backend (XFS)", func(dst string) error {
						_, err := fork.Copy().Fork(fork.Paths{BaseTarget: xfsBase, AgentDir: dst})
						return err
					}, d})
			}
		}
	}
	fmt.Printf("\n  Forking the base target (%d files), median of %d, interleaved:\n", w.files, n)
	times := make([][]time.Duration, len(entries))
	for i := 0; i < n; i++ {
		for j, e := range entries {
			dst := filepath.Join(e.dir, fmt.Sprintf("fork-%d-%d", j, i))
			os.MkdirAll(dst, 0o755)
			target := dst
			if strings.HasPrefix(e.name, "cp -a") {
				target = filepath.Join(dst, "target")
			}
			exec.Command("sync").Run() // start each from the same writeback state
			t := time.Now()
			if err := e.f(target); err != nil {
				return fmt.Errorf("%s: %w", e.name, err)
			}
			times[j] = append(times[j], time.Since(t))
			os.RemoveAll(dst)
		}
	}
	for j, e := range entries {
		m := median(times[j])
		fmt.Printf("  %-58s %9.3f  (%.1f µs/file)\n", e.name, m.Seconds(), float64(m.Microseconds())/float64(w.files))
	}
	if xfsBase == "" {
		fmt.Println("  (reflink: no filesystem with clones given; pass -xfs DIR or set FERRY_TEST_XFS)")
	}
	return nil
}

// shimOverhead times `cargo -V` through the shim in an agent's worktree
// root against the real cargo directly.
func (w *ws) shimOverhead(n int) error {
	out, _, _, err := w.ferry("spawn", "shimbench", "--json")
	if err != nil {
		return err
	}
	var a struct{ Worktree string }
	json.Unmarshal(out, &a)
	real, err := exec.LookPath("cargo")
	if err != nil {
		return err
	}
	shim := filepath.Join(w.home, "bin", "cargo")
	var viaShim, direct []time.Duration
	for i := 0; i < n; i++ {
		for _, p := range []string{shim, real} {
			c := exec.Command(p, "-V")
			c.Dir = a.Worktree
			c.Env = w.env()
			t := time.Now()
			if out, err := c.CombinedOutput(); err != nil {
				return fmt.Errorf("%s -V: %v %s", p, err, out)
			}
			if p == shim {
				viaShim = append(viaShim, time.Since(t))
			} else {
				direct = append(direct, time.Since(t))
			}
		}
	}
	s, d := median(viaShim), median(direct)
	fmt.Printf("\n  Shim overhead per cargo call at the agent's worktree root (cargo -V, median of %d):\n", n)
	fmt.Printf("  %-58s %8.2f ms\n", "through the shim (resolve agent, enter sandbox, exec)", ms(s))
	fmt.Printf("  %-58s %8.2f ms\n", "real cargo directly", ms(d))
	fmt.Printf("  %-58s %8.2f ms  (goal < 10 ms)\n", "shim overhead", ms(s-d))
	return nil
}

// workspaceSet is a generated workspace a section measures.
type workspaceSet struct {
	name string
	opts fixture.Options
}

// workspaceSets are the fixture workspace and, with large > 0, the large
// one with that many extra crates.
func workspaceSets(large int) []workspaceSet {
	sets := []workspaceSet{{"fixture", fixture.Options{}}}
	if large > 0 {
		sets = append(sets, workspaceSet{fmt.Sprintf("large(%d crates)", large), fixture.Options{ExtraCrates: large, ModulesPerCrate: 10}})
	}
	return sets
}

// dirName is the set's name as a directory name.
func (s workspaceSet) dirName() string {
	return strings.NewReplacer("(", "-", ")", "", " ", "-").Replace(s.name)
}
