package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
)

// archiveRun is one round of a base carried as a file: host A's cold build
// and export, host B's import (another clone and store parent, as a fresh
// machine or a cloud agent's container) and first agent build.
type archiveRun struct {
	cold, export time.Duration
	file, target int64 // the file's bytes; the target's
	b            runnerRun
	// delta is the size of A's refresh after a one-file edit exported
	// against the first base (round 1), and full that refresh's full file.
	delta, full int64
}

// runArchive measures `ferry base export` and `ferry base import` per
// workspace set, beside the cold build they stand in for.
func runArchive(bin string, n, large int) error {
	if err := fixture.CheckTools(""); err != nil {
		return err
	}
	bin, _ = filepath.Abs(bin)
	root, err := os.MkdirTemp("", "ferry-bench-archive-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	for _, set := range workspaceSets(large) {
		var runs []archiveRun
		for i := range n {
			r, err := archiveRound(bin, filepath.Join(root, fmt.Sprintf("%s-%d", set.dirName(), i)), set.opts, i == 0)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "bench: archive %s round %d: cold %.1fs, export %.1fs (%.1f MB), import %.1fs + first build %.1fs (%d crates)\n",
				set.name, i+1, r.cold.Seconds(), r.export.Seconds(), float64(r.file)/1e6, r.b.pull.Seconds(), r.b.first.Seconds(), r.b.compiled)
			runs = append(runs, r)
		}
		printArchive(set.name, n, runs)
	}
	return nil
}

// archiveRound generates a workspace for host A in dir, builds its base
// cold and exports it; host B imports the file and builds an agent. With
// delta, A then refreshes after a one-file edit and exports the new base
// whole and against the first.
func archiveRound(bin, dir string, opts fixture.Options, delta bool) (archiveRun, error) {
	var r archiveRun
	aDir := filepath.Join(dir, "a")
	repo, err := fixture.Generate(filepath.Join(aDir, "repo"), opts)
	if err != nil {
		return r, err
	}
	a, err := fleetHost(bin, aDir, repo, "")
	if err != nil {
		return r, err
	}
	var cold baseAnswer
	if r.cold, err = a.jsonRun(&cold, "base", "--cold", "--json"); err != nil {
		return r, err
	}
	type exported struct {
		Bytes int64 `json:"bytes"`
		Meta  struct {
			Bytes int64 `json:"bytes"`
		} `json:"meta"`
	}
	file := filepath.Join(dir, "base.ferrybase")
	var ex exported
	if r.export, err = a.jsonRun(&ex, "base", "export", "-o", file, "--json"); err != nil {
		return r, err
	}
	r.file, r.target = ex.Bytes, ex.Meta.Bytes

	bDir := filepath.Join(dir, "b")
	if err := gitClone(repo.Dir, filepath.Join(bDir, "repo"), cold.Commit); err != nil {
		return r, err
	}
	b, err := fleetHost(bin, bDir, &fixture.Repo{Dir: filepath.Join(bDir, "repo")}, "")
	if err != nil {
		return r, err
	}
	if r.b, err = b.installRun("b1", "base", "import", file, "--json"); err != nil {
		return r, err
	}
	if !delta {
		return r, nil
	}
	if err := repo.Append(fixture.LibPath(fixture.ChainC), "\n// edited\n"); err != nil {
		return r, err
	}
	c, err := repo.Commit("edit chain-c")
	if err != nil {
		return r, err
	}
	var next baseAnswer
	if _, err := a.jsonRun(&next, "base", "--rev", c, "--json"); err != nil {
		return r, err
	}
	var full, d exported
	if _, err := a.jsonRun(&full, "base", "export", "--rev", c, "-o", filepath.Join(dir, "next.ferrybase"), "--json"); err != nil {
		return r, err
	}
	if _, err := a.jsonRun(&d, "base", "export", "--rev", c, "--against", cold.ID, "-o", filepath.Join(dir, "delta.ferrybase"), "--json"); err != nil {
		return r, err
	}
	r.full, r.delta = full.Bytes, d.Bytes
	return r, nil
}

func printArchive(name string, n int, runs []archiveRun) {
	med := func(f func(archiveRun) time.Duration) time.Duration {
		var ds []time.Duration
		for _, r := range runs {
			ds = append(ds, f(r))
		}
		return median(ds)
	}
	cold := med(func(r archiveRun) time.Duration { return r.cold })
	fmt.Printf("\n== A base as a file: host A exports, host B (another clone and store path) imports, %s workspace (median of %d)\n", name, n)
	row := func(label string, d time.Duration) { fmt.Printf("  %-52s %9.2fs\n", label, d.Seconds()) }
	row("A: cold base build (ferry base --cold)", cold)
	row("A: ferry base export", med(func(r archiveRun) time.Duration { return r.export }))
	fmt.Printf("  %-52s %9.1f MB  (target %.1f MB)\n", "the file", float64(runs[0].file)/1e6, float64(runs[0].target)/1e6)
	imp := med(func(r archiveRun) time.Duration { return r.b.pull })
	first := med(func(r archiveRun) time.Duration { return r.b.first })
	row("B: ferry base import (relocated to B's store)", imp)
	fmt.Printf("  %-52s %10d\n", "B: unit paths the relocation removed", runs[0].b.removed)
	row("B: ferry spawn", med(func(r archiveRun) time.Duration { return r.b.spawn }))
	row("B: first agent build (through the shim)", first)
	fmt.Printf("  %-52s %10d\n", "B: crates the first build compiles", runs[0].b.compiled)
	fmt.Printf("  %-52s %9.3fx  (goal <= 0.2x)\n", "(import + first build) / cold build", (imp+first).Seconds()/cold.Seconds())
	if r := runs[0]; r.delta > 0 {
		fmt.Printf("  %-52s %9.1f MB  (the full file %.1f MB, %.0f%%; round 1)\n", "A: refresh after a one-file edit, as a delta file",
			float64(r.delta)/1e6, float64(r.full)/1e6, 100*float64(r.delta)/float64(r.full))
	}
}
