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
	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/pkg/toolchain"
)

// offRun is one agent's measurements under one sandbox mode.
type offRun struct {
	spawn, first, edit  time.Duration
	compiled, recompile int // crates compiled by the first build and by the edit's build
	removed, rebuilds   int // what the relocation plan removed and the units it rebuilds
}

// runOff compares building at host paths (sandbox mode off, with the
// relocation plan) with the namespace sandbox, per workspace: spawn + first
// build, the crates the first build compiles and the units the plan
// removed, and the first edit's rebuild (rustc's incremental state is keyed
// on absolute paths, so without the namespace an edited crate's state from
// the base does not carry over). Both use backend copy, so the fork costs
// the same.
func runOff(bin string, n, large int) error {
	bin, _ = filepath.Abs(bin)
	root, err := os.MkdirTemp("", "ferry-bench-off-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	saved, had := os.LookupEnv("FERRY_SANDBOX")
	defer func() {
		if had {
			os.Setenv("FERRY_SANDBOX", saved)
		} else {
			os.Unsetenv("FERRY_SANDBOX")
		}
	}()
	defer os.Unsetenv("FERRY_REMAP_PATHS")
	// Remap mode runs beside them where the toolchain pays off (Rust 1.98
	// on); elsewhere the section says why not. The knob that skips the
	// probe measures it anyway, as wiring: 1.95 recompiles an edited crate
	// from scratch in remap mode too.
	modes, remapNote := []string{"on", "off"}, ""
	if tc, err := toolchain.Detect(".", os.Environ()); err != nil {
		remapNote = err.Error()
	} else if err := tc.ProbeRemap(".", os.Environ()); err != nil && !knobs.SkipRemapProbe() {
		remapNote = fmt.Sprintf("rustc %s: %v", tc.RustcVersion, err)
	} else {
		modes = append(modes, "remap")
		if err != nil {
			remapNote = "measured with the probe skipped (" + knobs.RemapNoProbe + "): rustc " + tc.RustcVersion + " keeps no incremental state across paths"
		}
	}
	for _, set := range workspaceSets(large) {
		results := map[string][]offRun{}
		for _, mode := range modes {
			os.Setenv("FERRY_SANDBOX", mode)
			os.Unsetenv("FERRY_REMAP_PATHS")
			if mode == "remap" {
				os.Setenv("FERRY_SANDBOX", "off")
				os.Setenv("FERRY_REMAP_PATHS", "true")
			}
			w, err := setupWS(bin, root, set.dirName()+"-"+mode, set.opts)
			if err != nil {
				return err
			}
			for i := 0; i < n; i++ {
				r, err := w.offRound(i)
				if err != nil {
					return err
				}
				results[mode] = append(results[mode], r)
			}
		}
		fmt.Printf("\n== Without the namespace sandbox (sandbox mode off) against it, %s workspace (backend copy; median of %d)\n", set.name, n)
		fmt.Printf("  %-44s", "")
		for _, mode := range modes {
			fmt.Printf(" %12s", map[string]string{"on": "namespace", "off": "off", "remap": "off + remap"}[mode])
		}
		fmt.Println()
		med := func(mode string, f func(offRun) time.Duration) time.Duration {
			var ds []time.Duration
			for _, r := range results[mode] {
				ds = append(ds, f(r))
			}
			return median(ds)
		}
		row := func(name string, f func(offRun) time.Duration) {
			fmt.Printf("  %-44s", name)
			for _, mode := range modes {
				fmt.Printf(" %11.3fs", med(mode, f).Seconds())
			}
			fmt.Println()
		}
		count := func(name string, f func(offRun) int) {
			fmt.Printf("  %-44s", name)
			for _, mode := range modes {
				fmt.Printf(" %12d", f(results[mode][0]))
			}
			fmt.Println()
		}
		row("ferry spawn", func(r offRun) time.Duration { return r.spawn })
		row("first build in the agent", func(r offRun) time.Duration { return r.first })
		row("spawn + first build", func(r offRun) time.Duration { return r.spawn + r.first })
		count("crates the first build compiles", func(r offRun) int { return r.compiled })
		count("paths the relocation plan removed", func(r offRun) int { return r.removed })
		count("units it rebuilds (removed and dependents)", func(r offRun) int { return r.rebuilds })
		row("first edit (chain-c): build", func(r offRun) time.Duration { return r.edit })
		count("crates the edit's build compiles", func(r offRun) int { return r.recompile })
		if remapNote != "" {
			fmt.Printf("  (remap mode: %s)\n", remapNote)
		}
	}
	return nil
}

// offRound spawns an agent with backend copy, builds it, edits chain-c and
// builds again.
func (w *ws) offRound(i int) (offRun, error) {
	var r offRun
	out, d, _, err := w.ferry("spawn", fmt.Sprintf("off%d", i), "--backend", "copy", "--json")
	if err != nil {
		return r, err
	}
	r.spawn = d
	var a struct {
		Worktree string
		Fork     struct {
			Relocated *struct {
				Paths    int `json:"paths"`
				Rebuilds int `json:"rebuilds"`
			} `json:"relocated"`
		} `json:"fork"`
	}
	if err := json.Unmarshal(out, &a); err != nil {
		return r, err
	}
	if rel := a.Fork.Relocated; rel != nil {
		r.removed, r.rebuilds = rel.Paths, rel.Rebuilds
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
	if r.first, r.compiled, err = build(benchWarm); err != nil {
		return r, err
	}
	if r.edit, r.recompile, err = build("echo '// edit' >> " + fixture.LibPath(fixture.ChainC) + " && " + benchWarm); err != nil {
		return r, err
	}
	return r, nil
}
