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

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/platform"
)

// refreshRun is one round of the refresh table: a cold base, then bases of
// the next commits, seeded where Ferry can, against the limit, an
// incremental cargo build of the same change in a warm plain checkout.
type refreshRun struct {
	cold, manifest             time.Duration // ferry base, process wall time
	leafSeeded, manifestSeeded bool
	leafBy                     string // how the first leaf refresh started from its seed (seed_by)
	// leafEdits one-leaf edits in a row, the first seeded from the cold
	// base, each from the one before.
	leaves        []leafRefresh
	plainManifest time.Duration // incremental cargo build of the same change
	clone         time.Duration // cloning the base's target alone
	addedBytes    int64         // what the first leaf refresh took from the filesystem
	written       int64         // what its warm build wrote (a layered refresh's own bytes), 0 unknown
	// The same kind of edit refreshed by a copy of the seed ([base]
	// layered = false), where the leaf refresh was layered, with its limit.
	copied, plainCopied time.Duration
	copiedBytes         int64
	copiedBy            string // copy, or reflink where the store clones files
	// An agent's spawn and first build from the base one and eight
	// layered refreshes deep (round 1 only).
	depth1, depth8 []time.Duration
}

// leafEdits is how many one-leaf edits a round refreshes, one after the
// other: a refresh takes about a second, and on a shared machine one
// sample per round (after a cold build of half a minute or more) moved
// the median by 0.2x between identical runs.
const leafEdits = 3

// leafRefresh is one one-leaf edit's refresh against its limit.
type leafRefresh struct {
	refresh, plain time.Duration // ferry base, process wall time; incremental cargo build of the same edit
	// The refresh's phases as its base.json times them: before the warm
	// commands (resolving, the checkout, stamping), the warm commands
	// with the fold, and what follows (seal, writeback).
	before, warm, after time.Duration
}

// runRefresh measures refreshing a base: the fixture and, with large > 0,
// the large generated workspace; on the store's filesystem, or on xfs (with
// reflink) when given.
func runRefresh(bin string, n, large int, xfs string) error {
	if err := fixture.CheckTools(""); err != nil {
		return err
	}
	bin, _ = filepath.Abs(bin)
	parent := ""
	if xfs != "" {
		if ok, _ := fork.CanReflink(xfs); ok {
			parent = xfs
		}
	}
	root, err := os.MkdirTemp(parent, "ferry-bench-refresh-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	where := "the temporary directory's filesystem, " + fsWords(root) + " (forks copy)"
	if parent != "" {
		where = "XFS with reflink (" + parent + ")"
	}
	sets := workspaceSets(large)
	for _, set := range sets {
		var runs []refreshRun
		for i := 0; i < n; i++ {
			dir := filepath.Join(root, fmt.Sprintf("%s-%d", set.dirName(), i))
			r, err := refreshRound(bin, dir, set.opts, n, i == 0)
			if err != nil {
				return err
			}
			runs = append(runs, r)
			for _, l := range r.leaves {
				fmt.Fprintf(os.Stderr, "bench: refresh %s round %d: cold %.1fs, leaf refresh %.2fs (plain incremental %.2fs)\n",
					set.name, i+1, r.cold.Seconds(), l.refresh.Seconds(), l.plain.Seconds())
			}
		}
		med := func(f func(refreshRun) time.Duration) time.Duration {
			var ds []time.Duration
			for _, r := range runs {
				ds = append(ds, f(r))
			}
			return median(ds)
		}
		medLeaf := func(f func(leafRefresh) time.Duration) time.Duration {
			var ds []time.Duration
			for _, r := range runs {
				for _, l := range r.leaves {
					ds = append(ds, f(l))
				}
			}
			return median(ds)
		}
		cold := med(func(r refreshRun) time.Duration { return r.cold })
		leaf := medLeaf(func(l leafRefresh) time.Duration { return l.refresh })
		plainLeaf := medLeaf(func(l leafRefresh) time.Duration { return l.plain })
		clone := med(func(r refreshRun) time.Duration { return r.clone })
		manifest := med(func(r refreshRun) time.Duration { return r.manifest })
		plainManifest := med(func(r refreshRun) time.Duration { return r.plainManifest })
		fmt.Printf("\n== Refreshing a base, %s workspace, store on %s (median of %d; leaf edits: of %d, %d a round)\n", set.name, where, n, n*leafEdits, leafEdits)
		fmt.Printf("  %-62s %9s\n", "build", "seconds")
		row := func(name string, d time.Duration) { fmt.Printf("  %-62s %9.2f\n", name, d.Seconds()) }
		row("cold base (ferry base --cold)", cold)
		row(fmt.Sprintf("ferry base after a one-leaf edit (%s)", seededWord(runs[0].leafSeeded, runs[0].leafBy)), leaf)
		row("  limit: incremental cargo build of that edit, warm checkout", plainLeaf)
		row("  its phases: before the warm commands (plan, checkout, stamps)", medLeaf(func(l leafRefresh) time.Duration { return l.before }))
		row("    the warm commands, the fold and the observation", medLeaf(func(l leafRefresh) time.Duration { return l.warm }))
		row("    after them (the checkout's check, seal, writeback)", medLeaf(func(l leafRefresh) time.Duration { return l.after }))
		row("  cloning the base's target alone", clone)
		layered := runs[0].leafBy == "layer"
		how := "copying" // the refresh with [base] layered = false
		if runs[0].copiedBy == "reflink" {
			how = "cloning"
		}
		if layered {
			copied := med(func(r refreshRun) time.Duration { return r.copied })
			plainCopied := med(func(r refreshRun) time.Duration { return r.plainCopied })
			row(fmt.Sprintf("ferry base after another one-leaf edit, %s ([base] layered = false)", how), copied)
			row("  limit: incremental cargo build of that edit, warm checkout", plainCopied)
			fmt.Printf("  %-62s %8.2fx\n", fmt.Sprintf("layered refresh / %s refresh (each over its limit)", how), (leaf.Seconds()/plainLeaf.Seconds())/(copied.Seconds()/plainCopied.Seconds()))
		}
		row(fmt.Sprintf("ferry base after a Cargo.toml change (%s)", seededWord(runs[0].manifestSeeded, "")), manifest)
		row("  limit: incremental cargo build of that change, warm checkout", plainManifest)
		// The goal: refresh <= max(1.3 x limit, limit + 0.3 s); the
		// base's durability (fsync before base.json) stays inside it.
		goal := max(1.3*plainLeaf.Seconds(), plainLeaf.Seconds()+0.3)
		verdict := "within"
		if leaf.Seconds() > goal {
			verdict = "over"
		}
		fmt.Printf("  %-62s %8.2fx\n", "leaf refresh / incremental build", leaf.Seconds()/plainLeaf.Seconds())
		fmt.Printf("  %-62s %+8.2fs  (goal: refresh <= max(1.3x, +0.3s) = %.2fs: %s)\n", "leaf refresh - incremental build", leaf.Seconds()-plainLeaf.Seconds(), goal, verdict)
		fmt.Printf("  %-62s %8.1fx\n", "cold base / leaf refresh", cold.Seconds()/leaf.Seconds())
		added := medianBytes(runs, func(r refreshRun) int64 { return r.addedBytes })
		fmt.Printf("  %-62s %7.1f MB\n", "disk the leaf refresh took (filesystem free space, median)", float64(added)/1e6)
		if written := medianBytes(runs, func(r refreshRun) int64 { return r.written }); written > 0 {
			fmt.Printf("  %-62s %7.1f MB\n", "  bytes its warm build wrote (the layer's own files)", float64(written)/1e6)
			fmt.Printf("  %-62s %8.2fx  (goal <= 2x)\n", "  disk taken / bytes written", float64(added)/float64(written))
		}
		if layered {
			fmt.Printf("  %-62s %7.1f MB\n", "disk the "+how+" refresh took", float64(medianBytes(runs, func(r refreshRun) int64 { return r.copiedBytes }))/1e6)
		}
		if d1, d8 := median(runs[0].depth1), median(runs[0].depth8); d1 > 0 && d8 > 0 {
			row(fmt.Sprintf("agent spawn + first build, base 1 layered refresh deep (median of %d)", len(runs[0].depth1)), d1)
			row("agent spawn + first build, base 8 layered refreshes deep", d8)
			fmt.Printf("  %-62s %8.2fx  (goal <= 1.1x)\n", "depth 8 / depth 1", d8.Seconds()/d1.Seconds())
		}
	}
	return nil
}

// fsWords names the filesystem holding dir, and says whether an ext4 has
// a journal. Without one, ext4 passes over the inodes freed in the last
// minutes when it allocates one (one to five, by the kernel's source), so
// a file created soon after many were deleted costs far more: on a test
// machine a checkout of 1,238 files took 50-80 ms with a journal, 200-550
// ms without, after other checkouts were deleted. The figures that create
// many files (the checkout, the fold) swing with it.
func fsWords(dir string) string {
	name, err := platform.FilesystemType(dir)
	if err != nil || name != platform.FSExt4 {
		return name
	}
	var st unix.Stat_t
	if unix.Stat(dir, &st) != nil {
		return name
	}
	dev, err := os.Readlink(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev))))
	if err != nil {
		return name
	}
	if journals, _ := filepath.Glob("/proc/fs/jbd2/" + filepath.Base(dev) + "-*"); len(journals) == 0 {
		return name + " without a journal"
	}
	return name + " with a journal"
}

func seededWord(seeded bool, by string) string {
	switch {
	case !seeded:
		return "cold: other unit inputs"
	case by == "layer":
		return "seeded, layered"
	case by != "":
		return "seeded, " + by
	}
	return "seeded"
}

func medianBytes(runs []refreshRun, f func(refreshRun) int64) int64 {
	var ds []time.Duration
	for _, r := range runs {
		ds = append(ds, time.Duration(f(r)))
	}
	return int64(median(ds))
}

// refreshRound generates a workspace in dir, builds its base cold, then the
// base of a one-leaf edit and of a manifest change, each timed with the
// same change built incrementally in a warm plain checkout.
func refreshRound(bin, dir string, opts fixture.Options, n int, depth bool) (refreshRun, error) {
	var r refreshRun
	repo, err := fixture.Generate(filepath.Join(dir, "repo"), opts)
	if err != nil {
		return r, err
	}
	config := func(layered bool) {
		os.WriteFile(filepath.Join(repo.Dir, "ferry.toml"), []byte(fmt.Sprintf("[base]\nwarm = [%q]\nlayered = %t\n", benchWarm, layered)), 0o644)
	}
	config(true)
	os.WriteFile(filepath.Join(repo.Dir, ".git", "info", "exclude"), []byte("ferry.toml\n"), 0o644)
	home := filepath.Join(dir, "home")
	base := func(args ...string) (time.Duration, map[string]any, error) {
		c := exec.Command(filepath.Join(bin, "ferry"), append([]string{"base", "--json"}, args...)...)
		c.Dir, c.Env = repo.Dir, append(os.Environ(), "FERRY_HOME="+home)
		var stderr bytes.Buffer
		c.Stderr = &stderr
		t := time.Now()
		out, err := c.Output()
		d := time.Since(t)
		if err != nil {
			return 0, nil, fmt.Errorf("ferry base %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		var rec map[string]any
		json.Unmarshal(out, &rec)
		return d, rec, nil
	}
	// The limit: a plain checkout at the same commit, warm, building each
	// change incrementally. Warmed first, so that neither side's page
	// cache is pushed out by the other's cold build just before it is
	// timed.
	plain := filepath.Join(dir, "plain")
	if _, err := repo.Git("worktree", "add", "-q", "--detach", plain, "HEAD"); err != nil {
		return r, err
	}
	plainEnv := append(os.Environ(), "CARGO_TARGET_DIR="+filepath.Join(plain, "target"))
	if _, err := sh(plain, plainEnv, benchWarm); err != nil {
		return r, err
	}
	var rec map[string]any
	if r.cold, rec, err = base("--cold"); err != nil {
		return r, err
	}
	// change commits an edit, refreshes the base and builds the edit in
	// the plain checkout; it returns the refresh's record too.
	type changed struct {
		refresh, plain time.Duration
		added          int64
		rec            map[string]any
	}
	change := func(edit func() error, msg string) (changed, error) {
		var ch changed
		if err := edit(); err != nil {
			return ch, err
		}
		c, err := repo.Commit(msg)
		if err != nil {
			return ch, err
		}
		// Each side starts with nothing left to write back: a refresh
		// ends with a writeback of its filesystem (base.json promises
		// durable files), which would otherwise also write out what the
		// plain build before it left in the page cache (about as many
		// bytes as its own), and charge the refresh for it.
		free := freeBytes(home)
		unix.Sync()
		if ch.refresh, ch.rec, err = base("--rev", c); err != nil {
			return ch, err
		}
		ch.added = free - freeBytes(home)
		if _, err := exec.Command("git", "-C", plain, "checkout", "-q", "--detach", c).CombinedOutput(); err != nil {
			return ch, err
		}
		unix.Sync()
		ch.plain, err = sh(plain, plainEnv, benchWarm)
		return ch, err
	}
	seededBy := func(rec map[string]any) (bool, string) {
		by, _ := rec["seed_by"].(string)
		return rec["seed"] != nil && rec["seed"] != "", by
	}
	leaf := fixture.LibPath(fixture.ChainC)
	for i := range leafEdits {
		ch, err := change(func() error { return repo.Append(leaf, fmt.Sprintf("\n// edited %d\n", i)) }, fmt.Sprintf("leaf edit %d", i))
		if err != nil {
			return r, err
		}
		l := leafRefresh{refresh: ch.refresh, plain: ch.plain}
		if tm, ok := ch.rec["timings"].(map[string]any); ok {
			sec := func(k string) time.Duration {
				v, _ := tm[k].(float64)
				return time.Duration(v * float64(time.Second))
			}
			l.warm, l.after = sec("warm"), sec("finish")
			l.before = sec("total") - l.warm - l.after
		}
		r.leaves = append(r.leaves, l)
		if i > 0 {
			continue
		}
		r.addedBytes = ch.added
		r.leafSeeded, r.leafBy = seededBy(ch.rec)
		if layer, ok := ch.rec["layer"].(map[string]any); ok {
			own, _ := layer["own_bytes"].(float64)
			r.written = int64(own)
		}
	}
	if r.leafBy == "layer" {
		// The same kind of edit, refreshed the way it was before layers.
		config(false)
		ch, err := change(func() error { return repo.Append(leaf, "\n// edited again\n") }, "leaf edit, copied")
		config(true)
		if err != nil {
			return r, err
		}
		_, by := seededBy(ch.rec)
		if by != "copy" && by != "reflink" {
			return r, fmt.Errorf("the refresh with [base] layered = false started from its seed by %q, not a copy or a clone", by)
		}
		r.copied, r.plainCopied, r.copiedBytes, r.copiedBy = ch.refresh, ch.plain, ch.added, by
	}
	manifest := fixture.CrateDir(fixture.ChainC) + "/Cargo.toml"
	ch, err := change(func() error { return repo.Append(manifest, "\n[features]\nextra = []\n") }, "manifest change")
	if err != nil {
		return r, err
	}
	r.manifest, r.plainManifest = ch.refresh, ch.plain
	r.manifestSeeded, _ = seededBy(ch.rec)
	if depth && r.leafBy == "layer" {
		if r.depth1, r.depth8, err = depthAgents(bin, repo, home, dir, n, func(i int) (map[string]any, error) {
			ch, err := change(func() error { return repo.Append(leaf, fmt.Sprintf("\n// deep %d\n", i)) }, fmt.Sprintf("deep %d", i))
			return ch.rec, err
		}); err != nil {
			return r, err
		}
	}
	// Cloning the target alone, as a refresh does first: timed last,
	// since deleting a clone of a large target leaves the filesystem
	// busy freeing it for a while.
	if target, ok := rec["target"].(string); ok {
		dst := filepath.Join(dir, "clone")
		os.MkdirAll(dst, 0o755)
		b := fork.Copy()
		if ok, _ := fork.CanReflink(dir); ok {
			b = fork.Reflink()
		}
		t := time.Now()
		if _, err := b.Fork(fork.Paths{BaseTarget: target, AgentDir: dst}); err != nil {
			return r, err
		}
		r.clone = time.Since(t)
		os.RemoveAll(dst)
	}

	return r, nil
}

// freeBytes is the free space of the filesystem holding dir (or its
// nearest existing ancestor).
func freeBytes(dir string) int64 {
	for d := dir; ; d = filepath.Dir(d) {
		var st unix.Statfs_t
		if unix.Statfs(d, &st) == nil {
			return int64(st.Bavail) * int64(st.Bsize)
		}
		if d == filepath.Dir(d) {
			return 0
		}
	}
}

// depthAgents refreshes the base eight times in a row (refresh(i) commits
// the i-th edit and refreshes), each layered on the one before, then times
// an agent's spawn and first build (through the shim) from the first and
// from the eighth, n times each, alternating.
func depthAgents(bin string, repo *fixture.Repo, home, dir string, n int, refresh func(i int) (map[string]any, error)) (d1, d8 []time.Duration, err error) {
	var commits []string
	for i := 1; i <= 8; i++ {
		rec, err := refresh(i)
		if err != nil {
			return nil, nil, err
		}
		if by, _ := rec["seed_by"].(string); by != "layer" {
			return nil, nil, fmt.Errorf("refresh %d of the chain started from its seed by %q, not a layer", i, by)
		}
		c, _ := rec["commit"].(string)
		commits = append(commits, c)
	}
	w := &ws{name: "depth", dir: dir, repo: repo, bin: bin, home: home}
	env := w.shimEnv()
	for k := 0; k < n; k++ {
		for _, at := range []struct {
			commit string
			out    *[]time.Duration
		}{{commits[0], &d1}, {commits[7], &d8}} {
			name := fmt.Sprintf("depth-%d", k)
			t := time.Now()
			out, _, _, err := w.ferry("spawn", name, "--from", at.commit, "--json")
			if err != nil {
				return nil, nil, err
			}
			var rec spawnRecord
			if err := json.Unmarshal(out, &rec); err != nil {
				return nil, nil, err
			}
			if _, err := sh(rec.Worktree, env, benchWarm); err != nil {
				return nil, nil, err
			}
			*at.out = append(*at.out, time.Since(t))
			if err := w.removeAgent(name); err != nil {
				return nil, nil, err
			}
		}
	}
	return d1, d8, nil
}
