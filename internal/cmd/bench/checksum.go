package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
)

// checksumRun is one agent's measurements under one freshness mode.
type checksumRun struct {
	first, touched, touchedAll   time.Duration
	compiled, recompiled, rebAll int // crates compiled by each build
}

// checksumEnv is what both modes build with: the rustup nightly (checksum
// freshness needs it, and mtime on the same compiler keeps the comparison
// fair), and -Zallow-features= so the registry's proc-macro2 1.0.47 stays
// off nightly features today's nightly no longer has.
var checksumEnv = []string{"RUSTUP_TOOLCHAIN=nightly", "RUSTFLAGS=-Zallow-features="}

// runChecksum compares [base] freshness = "checksum" with "mtime", per
// workspace, on the rustup nightly: ferry base (the cold first build of
// the warm commands), an agent's first build, and a build after files are
// rewritten with the same bytes (mtime moved, content not): chain-c's
// lib.rs alone, and every tracked .rs file (what a checkout of another
// branch and back does).
func runChecksum(bin string, n, large int) error {
	if out, err := exec.Command("rustup", "toolchain", "list").Output(); err != nil || !strings.Contains(string(out), "nightly") {
		// The rest of the bench still runs on a host without it.
		fmt.Printf("\n== Checksum freshness against mtime: not measured: it needs the rustup nightly toolchain (`rustup toolchain list`: %v)\n", err)
		return nil
	}
	bin, _ = filepath.Abs(bin)
	root, err := os.MkdirTemp("", "ferry-bench-checksum-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	modes := []string{"mtime", "checksum"}
	for _, set := range workspaceSets(large) {
		results := map[string][]checksumRun{}
		baseTime := map[string]time.Duration{}
		for _, mode := range modes {
			w, d, err := setupFreshness(bin, root, set.dirName()+"-"+mode, set.opts, mode)
			if err != nil {
				return err
			}
			baseTime[mode] = d
			for i := 0; i < n; i++ {
				r, err := w.checksumRound(i)
				if err != nil {
					return err
				}
				results[mode] = append(results[mode], r)
			}
		}
		fmt.Printf("\n== Checksum freshness against mtime, %s workspace (rustup nightly; median of %d)\n", set.name, n)
		fmt.Printf("  %-52s %12s %12s\n", "", "mtime", "checksum")
		med := func(mode string, f func(checksumRun) time.Duration) time.Duration {
			var ds []time.Duration
			for _, r := range results[mode] {
				ds = append(ds, f(r))
			}
			return median(ds)
		}
		row := func(name string, f func(checksumRun) time.Duration) {
			fmt.Printf("  %-52s %11.3fs %11.3fs\n", name, med("mtime", f).Seconds(), med("checksum", f).Seconds())
		}
		count := func(name string, f func(checksumRun) int) {
			fmt.Printf("  %-52s %12d %12d\n", name, f(results["mtime"][0]), f(results["checksum"][0]))
		}
		fmt.Printf("  %-52s %11.3fs %11.3fs\n", "ferry base (cold warm build, once)", baseTime["mtime"].Seconds(), baseTime["checksum"].Seconds())
		row("first build in an agent", func(r checksumRun) time.Duration { return r.first })
		count("crates it compiles", func(r checksumRun) int { return r.compiled })
		row("chain-c's lib.rs touched, unchanged: build", func(r checksumRun) time.Duration { return r.touched })
		count("crates it compiles", func(r checksumRun) int { return r.recompiled })
		row("every tracked .rs touched, unchanged: build", func(r checksumRun) time.Duration { return r.touchedAll })
		count("crates it compiles", func(r checksumRun) int { return r.rebAll })
	}
	return nil
}

// setupFreshness generates a workspace with [base] freshness = mode and
// builds its base, returning the time ferry base took.
func setupFreshness(bin, root, name string, opts fixture.Options, mode string) (*ws, time.Duration, error) {
	w := &ws{name: name, dir: filepath.Join(root, name), bin: bin, extra: checksumEnv}
	w.home = filepath.Join(w.dir, "home")
	var err error
	if w.repo, err = fixture.Generate(filepath.Join(w.dir, "repo"), opts); err != nil {
		return nil, 0, err
	}
	toml := fmt.Sprintf("[base]\nwarm = [%q]\nfreshness = %q\n", benchWarm, mode)
	if err := os.WriteFile(filepath.Join(w.repo.Dir, "ferry.toml"), []byte(toml), 0o644); err != nil {
		return nil, 0, err
	}
	fmt.Fprintf(os.Stderr, "bench: %s: building the base\n", name)
	out, d, _, err := w.ferry("base", "--json")
	if err != nil {
		return nil, 0, err
	}
	return w, d, json.Unmarshal(out, &w.base)
}

// checksumRound spawns an agent, builds it, rewrites chain-c's lib.rs with
// its own bytes and builds, then every tracked .rs file and builds.
func (w *ws) checksumRound(i int) (checksumRun, error) {
	var r checksumRun
	out, _, _, err := w.ferry("spawn", fmt.Sprintf("sum%d", i), "--json")
	if err != nil {
		return r, err
	}
	var a struct{ Worktree string }
	if err := json.Unmarshal(out, &a); err != nil {
		return r, err
	}
	build := func(script string) (time.Duration, int, error) {
		c := exec.Command(filepath.Join(w.bin, "ferry"), "run", "--", "sh", "-c", script)
		c.Dir, c.Env = a.Worktree, w.env()
		t := time.Now()
		out, err := c.CombinedOutput()
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %v\n%s", script, err, out)
		}
		return time.Since(t), strings.Count(string(out), "Compiling "), nil
	}
	// Rewrite in place (cp to a copy and back), as an editor or a
	// formatter that changes nothing does; the build is timed alone.
	rewrite := func(files string) error {
		c := exec.Command("sh", "-c", `sleep 0.01; for f in `+files+`; do cp "$f" "$f.tmp" && cat "$f.tmp" > "$f" && rm "$f.tmp"; done`)
		c.Dir = a.Worktree
		if out, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("rewrite %s: %v\n%s", files, err, out)
		}
		return nil
	}
	if r.first, r.compiled, err = build(benchWarm); err != nil {
		return r, err
	}
	if err := rewrite(fixture.LibPath(fixture.ChainC)); err != nil {
		return r, err
	}
	if r.touched, r.recompiled, err = build(benchWarm); err != nil {
		return r, err
	}
	if err := rewrite("$(git ls-files '*.rs')"); err != nil {
		return r, err
	}
	if r.touchedAll, r.rebAll, err = build(benchWarm); err != nil {
		return r, err
	}
	return r, nil
}
