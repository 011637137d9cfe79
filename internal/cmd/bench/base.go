// Command bench measures Ferry against the alternatives side by side, in one
// run, and prints medians and ratios. `make bench` runs it. Timings on a
// shared machine are noisy: compare the ratios, which are measured with the
// two sides interleaved.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/sandbox"
)

func main() {
	sandbox.Init()
	bin := flag.String("bin", "bin", "directory holding Ferry's binaries")
	n := flag.Int("n", 3, "repetitions of each measurement")
	only := flag.String("only", "", "run one section: binaries, base, agents, hot, demand, overlay, refresh, pipeline, off, checksum, ctime, fleet, archive, scale")
	large := flag.Int("large", 100, "extra crates in the larger generated workspace (0: skip it)")
	xfs := flag.String("xfs", knobs.XFS(), "a directory on a filesystem with reflink, for the reflink figures")
	sizes := flag.String("sizes", "1,2,4,8", "base target sizes of the spawn scaling table, as multiples of the fixture's")
	scale := flag.String("scale", "10,100,500", "extra crates of the workspaces the scaling section generates")
	crowds := flag.String("crowds", "1,8,32", "agents the scaling section spawns at once")
	chain := flag.Int("chain", 100, "extra crates in one dependency chain, the scaling section's deep workspace (0: skip it)")
	flag.Parse()
	var err error
	if *only == "" || *only == "binaries" {
		err = binarySizes(*bin)
	}
	if err == nil && (*only == "" || *only == "base") {
		err = runBase(*bin, *n)
	}
	if err == nil && (*only == "" || *only == "agents") {
		err = runAgents(*bin, *n, *large, *xfs)
	}
	if err == nil && (*only == "" || *only == "hot") {
		err = runHot(*bin, *n, *large, *xfs)
	}
	if err == nil && (*only == "" || *only == "demand") {
		err = runDemand(*bin, *n, *large)
	}
	if err == nil && (*only == "" || *only == "overlay") {
		err = runOverlay(*bin, *n, *xfs, *sizes)
	}
	if err == nil && (*only == "" || *only == "refresh") {
		err = runRefresh(*bin, *n, *large, *xfs)
	}
	if err == nil && (*only == "" || *only == "pipeline") {
		err = runPipeline(*bin, *n)
	}
	if err == nil && (*only == "" || *only == "off") {
		err = runOff(*bin, *n, *large)
	}
	if err == nil && (*only == "" || *only == "checksum") {
		err = runChecksum(*bin, *n, *large)
	}
	if err == nil && (*only == "" || *only == "ctime") {
		err = runCtime(*n, *large)
	}
	if err == nil && (*only == "" || *only == "fleet") {
		err = runFleet(*bin, *n, *large)
	}
	if err == nil && (*only == "" || *only == "archive") {
		err = runArchive(*bin, *n, *large)
	}
	if err == nil && (*only == "" || *only == "scale") {
		err = runScale(*bin, *scale, *crowds, *chain, *xfs)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: error:", err)
		os.Exit(1)
	}
}

// binarySizes prints each binary's size: each links what its one job needs
// (pkg/cli's dependency test checks what), and only ferry-watch hosts the
// NATS server.
func binarySizes(bin string) error {
	fmt.Printf("== Binaries (%s)\n", bin)
	for _, name := range []string{"ferry", "ferry-base", "ferry-spawn", "ferry-gc", "ferry-watch", "ferry-shim", "ferry-rustc"} {
		fi, err := os.Stat(filepath.Join(bin, name))
		if err != nil {
			return err
		}
		fmt.Printf("  %-12s %6.1f MB\n", name, float64(fi.Size())/1e6)
	}
	fmt.Println()
	return nil
}

type sample struct {
	plainWorktree, plainWarm, plainTotal time.Duration
	ferryTotal, ferryWarm, ferryWorktree time.Duration
	ferryStamp, ferryReuse               time.Duration
	ferryFirst                           time.Duration // until the first command's base was current (progressive)
}

func runBase(bin string, n int) error {
	if err := fixture.CheckTools(""); err != nil {
		return err
	}
	bin, _ = filepath.Abs(bin)
	dir, err := os.MkdirTemp("", "ferry-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	repo, err := fixture.Generate(filepath.Join(dir, "workspace"), fixture.Options{})
	if err != nil {
		return err
	}
	// The commands ferry base generates, so both sides build the same.
	warm := config.DefaultWarm(exec.Command("cargo", "clippy", "--version").Run() == nil, true, false)
	fmt.Fprintf(os.Stderr, "bench: fixture workspace, %d repetitions, warm: %s\n", n, strings.Join(warm, " && "))

	var samples []sample
	for i := 0; i < n; i++ {
		var s sample
		// A plain cargo build of the same warm commands in a fresh worktree.
		wt := filepath.Join(dir, fmt.Sprintf("plain-%d", i))
		t := time.Now()
		if _, err := repo.Git("worktree", "add", "--detach", wt, "HEAD"); err != nil {
			return err
		}
		s.plainWorktree = time.Since(t)
		t = time.Now()
		for _, w := range warm {
			c := exec.Command("sh", "-c", w)
			c.Dir = wt
			c.Env = append(os.Environ(), "CARGO_TARGET_DIR="+filepath.Join(wt, "target"))
			if out, err := c.CombinedOutput(); err != nil {
				return fmt.Errorf("%s: %v\n%s", w, err, out)
			}
		}
		s.plainWarm = time.Since(t)
		s.plainTotal = s.plainWorktree + s.plainWarm

		// ferry base, cold, in a fresh store.
		home := filepath.Join(dir, fmt.Sprintf("home-%d", i))
		ferry := func() ([]byte, time.Duration, error) {
			c := exec.Command(filepath.Join(bin, "ferry-base"), "--json")
			c.Dir = repo.Dir
			c.Env = append(os.Environ(), "FERRY_HOME="+home)
			var stderr bytes.Buffer
			c.Stderr = &stderr
			t := time.Now()
			out, err := c.Output()
			if err != nil {
				return nil, 0, fmt.Errorf("ferry-base: %v\n%s", err, stderr.String())
			}
			return out, time.Since(t), nil
		}
		out, d, err := ferry()
		if err != nil {
			return err
		}
		var rec struct {
			Timings struct{ Worktree, Stamp, Warm float64 }
			First   *struct{ Seconds float64 } `json:"first"`
		}
		json.Unmarshal(out, &rec)
		if rec.First != nil {
			s.ferryFirst = secs(rec.First.Seconds)
		}
		s.ferryTotal = d
		s.ferryWarm = secs(rec.Timings.Warm)
		s.ferryWorktree = secs(rec.Timings.Worktree)
		s.ferryStamp = secs(rec.Timings.Stamp)
		if _, s.ferryReuse, err = ferry(); err != nil {
			return err
		}
		samples = append(samples, s)
		fmt.Fprintf(os.Stderr, "bench: round %d: plain %.1fs, ferry base %.1fs\n", i+1, s.plainTotal.Seconds(), s.ferryTotal.Seconds())
	}

	sbx, direct, err := sandboxCost(dir, 40)
	if err != nil {
		return err
	}

	med := func(f func(sample) time.Duration) time.Duration {
		var ds []time.Duration
		for _, s := range samples {
			ds = append(ds, f(s))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	pt := med(func(s sample) time.Duration { return s.plainTotal })
	ft := med(func(s sample) time.Duration { return s.ferryTotal })
	fmt.Printf("\n== Base build, fixture workspace (median of %d, interleaved)\n", n)
	fmt.Printf("  %-48s %10s\n", "measure", "median")
	row := func(name string, d time.Duration) { fmt.Printf("  %-48s %9.2fs\n", name, d.Seconds()) }
	row("plain: git worktree add", med(func(s sample) time.Duration { return s.plainWorktree }))
	row("plain: the generated warm commands", med(func(s sample) time.Duration { return s.plainWarm }))
	row("plain: total", pt)
	row("ferry base: worktree add + lock", med(func(s sample) time.Duration { return s.ferryWorktree }))
	row("ferry base: stamp", med(func(s sample) time.Duration { return s.ferryStamp }))
	row("ferry base: warm commands in the sandbox", med(func(s sample) time.Duration { return s.ferryWarm }))
	row("ferry base: total (process wall time)", ft)
	if first := med(func(s sample) time.Duration { return s.ferryFirst }); first > 0 {
		row("ferry base: first agent can spawn (1st command)", first)
		fmt.Printf("  %-48s %9.3fx\n", "ratio first spawnable / plain total", first.Seconds()/pt.Seconds())
	}
	row("ferry base: reuse of a ready base", med(func(s sample) time.Duration { return s.ferryReuse }))
	fmt.Printf("  %-48s %9.3fx\n", "ratio ferry base / plain", ft.Seconds()/pt.Seconds())
	fmt.Printf("  %-48s %+8.1f%%\n", "overhead of ferry base over plain", 100*(ft.Seconds()-pt.Seconds())/pt.Seconds())
	fmt.Printf("\n== Sandbox entry (median of 40): sh -c true in the sandbox %.2fms, directly %.2fms, cost %.2fms\n",
		ms(sbx), ms(direct), ms(sbx-direct))
	return nil
}

// sandboxCost times `sh -c true` in a bind-mount sandbox and directly.
func sandboxCost(dir string, n int) (time.Duration, time.Duration, error) {
	src, tgt := filepath.Join(dir, "sbx-src"), filepath.Join(dir, "sbx-mnt")
	os.MkdirAll(src, 0o755)
	os.MkdirAll(tgt, 0o755)
	var in, out []time.Duration
	for i := 0; i < n; i++ {
		c, err := sandbox.Command(sandbox.Plan{
			Binds: []sandbox.Bind{{Source: src, Target: tgt}},
			Dir:   tgt, Argv: []string{"sh", "-c", "true"}, Env: []string{"PATH=/usr/bin:/bin"},
		})
		if err != nil {
			return 0, 0, err
		}
		t := time.Now()
		if err := c.Run(); err != nil {
			return 0, 0, err
		}
		in = append(in, time.Since(t))
		t = time.Now()
		if err := exec.Command("sh", "-c", "true").Run(); err != nil {
			return 0, 0, err
		}
		out = append(out, time.Since(t))
	}
	return median(in), median(out), nil
}

// median is the middle of ds, which it sorts; 0 when nothing was measured
// (a refresh that is not layered measures no layered depths).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

func secs(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
func ms(d time.Duration) float64   { return float64(d.Microseconds()) / 1000 }
