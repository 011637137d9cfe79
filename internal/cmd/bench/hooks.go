package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// hookRows adds to the hot section what the agent-tool hooks cost: a
// branch switch (two checkouts) with Ferry's post-checkout hook installed
// against the same without it, a no-op build through the shim outside
// agents (the shim on a tool's PATH everywhere) against plain cargo, and a
// `git worktree add` that the hook adopts, with the first build there,
// against a plain no-op build. Each pair is interleaved, its ratio taken
// within the pair.
func hookRows(w *ws, plain string, plainEnv, shimEnv []string, n int) error {
	env := w.env()
	git := func(args string) error {
		_, err := sh(w.repo.Dir, env, "git "+args+" >/dev/null 2>&1")
		return err
	}
	for _, b := range []string{"bench-sw1", "bench-sw2"} {
		if err := git("branch -f " + b + " HEAD"); err != nil {
			return err
		}
	}
	switchPair := "git checkout -q bench-sw1 && git checkout -q bench-sw2"
	m := max(10*n, 30)
	var with, without []float64
	var ratios []float64
	for i := range m + 1 {
		if _, _, _, err := w.ferry("hook", "git", "install"); err != nil {
			return err
		}
		a, err := sh(w.repo.Dir, env, switchPair)
		if err != nil {
			return err
		}
		if _, _, _, err := w.ferry("hook", "git", "uninstall"); err != nil {
			return err
		}
		b, err := sh(w.repo.Dir, env, switchPair)
		if err != nil {
			return err
		}
		if i > 0 {
			with, without, ratios = append(with, ms(a)), append(without, ms(b)), append(ratios, a.Seconds()/b.Seconds())
		}
	}
	var outside, plainOut []float64
	var outsideRatio []float64
	for i := range m + 1 {
		a, err := sh(plain, append(shimEnv[:len(shimEnv):len(shimEnv)], "CARGO_TARGET_DIR="+filepath.Join(plain, "target")), hotBuild)
		if err != nil {
			return err
		}
		b, err := sh(plain, plainEnv, hotBuild)
		if err != nil {
			return err
		}
		if i > 0 {
			outside, plainOut, outsideRatio = append(outside, ms(a)), append(plainOut, ms(b)), append(outsideRatio, a.Seconds()/b.Seconds())
		}
	}
	if _, _, _, err := w.ferry("hook", "git", "install"); err != nil {
		return err
	}
	defer w.ferry("hook", "git", "uninstall")
	rounds := max(3*n, 9)
	var adds, firsts []float64
	var firstRatio []float64
	for i := range rounds {
		wt := filepath.Join(w.dir, fmt.Sprintf("hooked-%d", i))
		t := time.Now()
		if _, err := sh(w.repo.Dir, env, "git worktree add -q --detach "+wt+" HEAD"); err != nil {
			return err
		}
		adds = append(adds, ms(time.Since(t)))
		d, err := sh(wt, shimEnv, hotBuild)
		if err != nil {
			return err
		}
		p, err := sh(plain, plainEnv, hotBuild)
		if err != nil {
			return err
		}
		firsts, firstRatio = append(firsts, ms(d)), append(firstRatio, d.Seconds()/p.Seconds())
		if _, _, _, err := w.ferry("rm", "--worktree", "--force", agentNameOf(wt)); err != nil {
			return err
		}
		os.RemoveAll(wt)
	}
	lo, mid, hi := spreadF(ratios)
	fmt.Printf("  %-52s %9.1f %10.2fx  [%.2f..%.2f]  (without the hook %.1f ms; goal: under +20 ms)\n",
		"branch switch (two checkouts), Ferry's git hook", medianF(with), mid, lo, hi, medianF(without))
	lo, mid, hi = spreadF(outsideRatio)
	fmt.Printf("  %-52s %9.1f %10.2fx  [%.2f..%.2f]  (plain cargo %.1f ms)\n",
		"no-op cargo build through the shim, outside agents", medianF(outside), mid, lo, hi, medianF(plainOut))
	lo, mid, hi = spreadF(firstRatio)
	fmt.Printf("  %-52s %9.1f\n", "git worktree add, adopted by the git hook", medianF(adds))
	fmt.Printf("  %-52s %9.1f %10.2fx  [%.2f..%.2f]  (goal <= 1.3x)\n", "first cargo build in that worktree", medianF(firsts), mid, lo, hi)
	return nil
}

// agentNameOf is the agent name adoption gives the worktree at path.
func agentNameOf(path string) string { return filepath.Base(path) }

// medianF is the median of fs, sorted in place.
func medianF(fs []float64) float64 {
	_, mid, _ := spreadF(fs)
	return mid
}
