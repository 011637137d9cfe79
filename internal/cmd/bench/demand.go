package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/config"
)

// The demand section: does a fresh agent's first build of what agents
// commonly run compile nothing? For each workspace, a base with the
// generated warm commands of before (a build of every target, then clippy
// over them) and one with today's (auto: a plain build, every target,
// cargo test's build, a check, clippy plain and over every target), each
// cold and then refreshed after a one-line edit, with what the extra
// commands cost; then, for a fresh agent of each, the crates its first
// cargo build, cargo test --no-run, cargo check and cargo clippy
// compiled and how long they took, beside the same call as a no-op in a
// warm plain checkout; then a demanded cargo build --release: its first
// build in a fresh agent before demand learning, three agents running it,
// the next base learning it, and a fresh agent of that base.

// demandCalls are the calls whose first build the section measures.
var demandCalls = []string{"cargo build", "cargo test --no-run", "cargo check", "cargo clippy"}

// oldDefaults are the generated warm commands before demand: what the
// section compares today's with.
var oldDefaults = []string{"cargo build --workspace --all-targets --keep-going", "cargo clippy --workspace --all-targets --keep-going"}

const releaseCall = "cargo build --release"

// firstBuild is one timed first call in a fresh agent.
type firstBuild struct {
	call     string
	crates   int // Compiling/Checking lines
	took     time.Duration
	plainNop time.Duration // the same call, no-op, in the warm plain checkout
}

// runDemand runs the section in the temporary directory's filesystem,
// whatever fork backend it gives: what is measured is what the first
// calls compile, and the large workspace's two stores with their agents
// outgrow the XFS loop filesystem the tests mount.
func runDemand(bin string, n, large int) error {
	if err := fixture.CheckTools(""); err != nil {
		return err
	}
	bin, _ = filepath.Abs(bin)
	root, err := os.MkdirTemp("", "ferry-bench-demand-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	clippy := exec.Command("cargo", "clippy", "--version").Run() == nil
	calls := demandCalls
	if !clippy {
		calls = calls[:3]
	}
	for _, set := range workspaceSets(large) {
		if err := demandSet(bin, filepath.Join(root, set.dirName()), set, calls, n); err != nil {
			return err
		}
	}
	return nil
}

// demandHome is one store of the section's workspace: the old or today's
// generated warm commands.
type demandHome struct {
	key     string // prefixes its agents' names: both stores spawn from one repository
	label   string
	home    string
	toml    string // ferry.toml while its bases are built, "" for none
	cold    time.Duration
	refresh time.Duration
	warm    map[string]float64 // seconds per warm command, of the cold base
	cpu     float64            // CPU seconds of its warm commands, cold
	firsts  []firstBuild
}

func demandSet(bin, dir string, set workspaceSet, calls []string, n int) error {
	repo, err := fixture.Generate(filepath.Join(dir, "repo"), set.opts)
	if err != nil {
		return err
	}
	os.WriteFile(filepath.Join(repo.Dir, ".git", "info", "exclude"), []byte("ferry.toml\n"), 0o644)
	old := &demandHome{key: "old", label: "before (build + clippy, every target)", home: filepath.Join(dir, "home-old"),
		toml: fmt.Sprintf("[base]\nwarm = [%q, %q]\nkeep-going = true\n", oldDefaults[0], oldDefaults[1])}
	now := &demandHome{key: "auto", label: "today (auto)", home: filepath.Join(dir, "home-auto")}
	homes := []*demandHome{old, now}
	ferry := func(h *demandHome, dir string, args ...string) ([]byte, time.Duration, error) {
		toml := filepath.Join(repo.Dir, config.FileName)
		os.Remove(toml)
		if h.toml != "" {
			os.WriteFile(toml, []byte(h.toml), 0o644)
		}
		c := exec.Command(filepath.Join(bin, "ferry"), args...)
		c.Dir, c.Env = dir, append(os.Environ(), "FERRY_HOME="+h.home, "FERRY_WORKTREES="+filepath.Join(h.home, "wt"))
		var stderr bytes.Buffer
		c.Stderr = &stderr
		t := time.Now()
		out, err := c.Output()
		if err != nil {
			return nil, 0, fmt.Errorf("ferry %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return out, time.Since(t), nil
	}
	type baseJSON struct {
		Seed string `json:"seed"`
		Warm []struct {
			Command string  `json:"command"`
			Seconds float64 `json:"seconds"`
			CPU     float64 `json:"cpu_seconds"`
			Why     string  `json:"why"`
		} `json:"warm"`
		Demand *struct {
			Skipped []struct {
				Command string `json:"command"`
				Why     string `json:"why"`
			} `json:"skipped"`
		} `json:"demand"`
	}

	// The plain checkout, warm for every call (each run twice).
	plain := filepath.Join(dir, "plain")
	if _, err := repo.Git("worktree", "add", "-q", "--detach", plain, "HEAD"); err != nil {
		return err
	}
	plainEnv := append(os.Environ(), "CARGO_TARGET_DIR="+filepath.Join(plain, "target"))
	fmt.Fprintf(os.Stderr, "bench: demand: %s: warming the plain checkout\n", set.name)
	for _, c := range append(calls, releaseCall) {
		for range 2 {
			if _, err := sh(plain, plainEnv, c); err != nil {
				return err
			}
		}
	}

	// Cold bases, then the refresh of a one-line edit of a leaf.
	for _, h := range homes {
		fmt.Fprintf(os.Stderr, "bench: demand: %s: cold base, %s\n", set.name, h.label)
		out, d, err := ferry(h, repo.Dir, "base", "--json")
		if err != nil {
			return err
		}
		h.cold = d
		var b baseJSON
		json.Unmarshal(out, &b)
		h.warm = map[string]float64{}
		for _, w := range b.Warm {
			h.warm[w.Command] = w.Seconds
			h.cpu += w.CPU
		}
	}
	if err := repo.Append(fixture.LibPath(fixture.ChainC), "\n// edited\n"); err != nil {
		return err
	}
	if _, err := repo.Commit("leaf edit"); err != nil {
		return err
	}
	for _, h := range homes {
		fmt.Fprintf(os.Stderr, "bench: demand: %s: refresh, %s\n", set.name, h.label)
		out, d, err := ferry(h, repo.Dir, "base", "--json")
		if err != nil {
			return err
		}
		var b baseJSON
		if json.Unmarshal(out, &b); b.Seed == "" {
			return fmt.Errorf("%s: the refresh was not seeded", h.label)
		}
		h.refresh = d
	}
	head, _ := repo.Git("rev-parse", "HEAD")
	if out, err := exec.Command("git", "-C", plain, "checkout", "-q", "--detach", strings.TrimSpace(head)).CombinedOutput(); err != nil {
		return fmt.Errorf("plain checkout: %v\n%s", err, out)
	}
	for _, c := range append(calls, releaseCall) {
		if _, err := sh(plain, plainEnv, c); err != nil {
			return err
		}
	}

	// First builds in fresh agents of each base, n rounds, each beside
	// the same call as a no-op in the plain checkout.
	spawnRun := func(h *demandHome, agent, call string) (firstBuild, error) {
		agent = h.key + "-" + agent
		out, _, err := ferry(h, repo.Dir, "spawn", agent, "--json")
		if err != nil {
			return firstBuild{}, err
		}
		var a struct {
			Worktree string `json:"worktree"`
		}
		json.Unmarshal(out, &a)
		env := append(os.Environ(), "FERRY_HOME="+h.home, "FERRY_WORKTREES="+filepath.Join(h.home, "wt"),
			"PATH="+filepath.Join(h.home, "bin")+":"+os.Getenv("PATH"))
		f := firstBuild{call: call}
		t := time.Now()
		c := exec.Command("sh", "-c", call)
		c.Dir, c.Env = a.Worktree, env
		log, err := c.CombinedOutput()
		f.took = time.Since(t)
		if err != nil {
			return f, fmt.Errorf("%s in agent %s: %v\n%s", call, agent, err, log)
		}
		for _, l := range strings.Split(string(log), "\n") {
			if w := strings.Fields(l); len(w) > 0 && (w[0] == "Compiling" || w[0] == "Checking") {
				f.crates++
			}
		}
		if f.plainNop, err = sh(plain, plainEnv, call); err != nil {
			return f, err
		}
		return f, nil
	}
	for i := range n {
		for _, h := range homes {
			for k, call := range calls {
				f, err := spawnRun(h, fmt.Sprintf("first-%d-%d", i, k), call)
				if err != nil {
					return err
				}
				h.firsts = append(h.firsts, f)
			}
		}
		fmt.Fprintf(os.Stderr, "bench: demand: %s: first builds, round %d of %d\n", set.name, i+1, n)
	}

	// A demanded command: three agents of today's base build a release
	// (the first of them timed), a new commit's base learns it, and a
	// fresh agent of that base builds it again.
	var missed, hit firstBuild
	for k := range 3 {
		fmt.Fprintf(os.Stderr, "bench: demand: %s: %s in agent %d of 3\n", set.name, releaseCall, k+1)
		f, err := spawnRun(now, fmt.Sprintf("release-%d", k), releaseCall)
		if err != nil {
			return err
		}
		if k == 0 {
			missed = f
		}
	}
	if err := repo.Append("README.md", "\nedited\n"); err != nil {
		return err
	}
	if _, err := repo.Commit("readme"); err != nil {
		return err
	}
	out, learnTook, err := ferry(now, repo.Dir, "base", "--json")
	if err != nil {
		return err
	}
	var learned baseJSON
	json.Unmarshal(out, &learned)
	releaseWarm, releaseWhy := 0.0, "not learned"
	for _, w := range learned.Warm {
		if strings.HasPrefix(w.Command, releaseCall+" ") {
			releaseWarm, releaseWhy = w.Seconds, w.Why
		}
	}
	if learned.Demand != nil {
		for _, sk := range learned.Demand.Skipped {
			if sk.Command == releaseCall {
				releaseWhy = "not learned: " + sk.Why
			}
		}
	}
	if hit, err = spawnRun(now, "release-after", releaseCall); err != nil {
		return err
	}

	fmt.Printf("\n== Demand: what a fresh agent's first call compiles, %s workspace, with the generated warm commands of before and today's\n", set.name)
	fmt.Printf("  %-44s %12s %12s\n", "base", "cold", "refresh")
	for _, h := range homes {
		total := 0.0
		for _, s := range h.warm {
			total += s
		}
		fmt.Printf("  %-44s %11.1fs %11.1fs   (warm commands %.1fs cold, %.1f CPU seconds)\n", h.label, h.cold.Seconds(), h.refresh.Seconds(), total, h.cpu)
	}
	fmt.Printf("  today's over before: cold %.2fx, refresh %.2fx\n", now.cold.Seconds()/old.cold.Seconds(), now.refresh.Seconds()/old.refresh.Seconds())
	fmt.Printf("  (the refresh is a one-line edit of a leaf crate, seeded from the cold base; wall time of ferry base)\n\n")
	fmt.Printf("  %-22s %-40s %8s %10s %10s %8s\n", "first call", "base", "crates", "ms", "plain ms", "ratio")
	for k, call := range calls {
		for _, h := range homes {
			var took, nop []time.Duration
			crates := 0
			for i := range n {
				f := h.firsts[i*len(calls)+k]
				took, nop = append(took, f.took), append(nop, f.plainNop)
				crates = max(crates, f.crates)
			}
			t, p := median(took), median(nop)
			fmt.Printf("  %-22s %-40s %8d %10.0f %10.0f %7.2fx\n", call, h.label, crates, ms(t), ms(p), t.Seconds()/p.Seconds())
		}
	}
	fmt.Printf("  (crates: the most any of %d fresh agents compiled or checked; ms: medians; plain: the same call, a no-op, in a warm plain checkout)\n\n", n)
	fmt.Printf("  %-44s %8s %10s %10s %8s\n", releaseCall+" in a fresh agent", "crates", "ms", "plain ms", "ratio")
	fmt.Printf("  %-44s %8d %10.0f %10.0f %7.2fx\n", "before demand learning (today's defaults)", missed.crates, ms(missed.took), ms(missed.plainNop), missed.took.Seconds()/missed.plainNop.Seconds())
	fmt.Printf("  %-44s %8d %10.0f %10.0f %7.2fx\n", "after three agents ran it (the next base)", hit.crates, ms(hit.took), ms(hit.plainNop), hit.took.Seconds()/hit.plainNop.Seconds())
	fmt.Printf("  the base that learned it: %.1fs, of which warming %s %.1fs (%s)\n", learnTook.Seconds(), releaseCall, releaseWarm, releaseWhy)
	return nil
}
