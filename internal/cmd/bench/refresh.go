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
)

// refreshRun is one round of the refresh table: a cold base, then bases of
// the next commits, seeded where Ferry can, against the limit, an
// incremental cargo build of the same change in a warm plain checkout.
type refreshRun struct {
	cold, leaf, manifest       time.Duration // ferry base, process wall time
	leafSeeded, manifestSeeded bool
	plainLeaf, plainManifest   time.Duration // incremental cargo build of the same change
	clone                      time.Duration // cloning the base's target alone
	addedBytes                 int64         // what the leaf refresh took from the filesystem
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
	where := "the temporary directory's filesystem (forks copy)"
	if parent != "" {
		where = "XFS with reflink (" + parent + ")"
	}
	sets := workspaceSets(large)
	for _, set := range sets {
		var runs []refreshRun
		for i := 0; i < n; i++ {
			dir := filepath.Join(root, fmt.Sprintf("%s-%d", set.dirName(), i))
			r, err := refreshRound(bin, dir, set.opts)
			if err != nil {
				return err
			}
			runs = append(runs, r)
			fmt.Fprintf(os.Stderr, "bench: refresh %s round %d: cold %.1fs, leaf refresh %.2fs (plain incremental %.2fs)\n",
				set.name, i+1, r.cold.Seconds(), r.leaf.Seconds(), r.plainLeaf.Seconds())
		}
		med := func(f func(refreshRun) time.Duration) time.Duration {
			var ds []time.Duration
			for _, r := range runs {
				ds = append(ds, f(r))
			}
			return median(ds)
		}
		cold := med(func(r refreshRun) time.Duration { return r.cold })
		leaf := med(func(r refreshRun) time.Duration { return r.leaf })
		plainLeaf := med(func(r refreshRun) time.Duration { return r.plainLeaf })
		clone := med(func(r refreshRun) time.Duration { return r.clone })
		manifest := med(func(r refreshRun) time.Duration { return r.manifest })
		plainManifest := med(func(r refreshRun) time.Duration { return r.plainManifest })
		fmt.Printf("\n== Refreshing a base, %s workspace, store on %s (median of %d)\n", set.name, where, n)
		fmt.Printf("  %-62s %9s\n", "build", "seconds")
		row := func(name string, d time.Duration) { fmt.Printf("  %-62s %9.2f\n", name, d.Seconds()) }
		row("cold base (ferry base --cold)", cold)
		row(fmt.Sprintf("ferry base after a one-leaf edit (%s)", seededWord(runs[0].leafSeeded)), leaf)
		row("  limit: incremental cargo build of that edit, warm checkout", plainLeaf)
		row("  cloning the base's target alone", clone)
		row(fmt.Sprintf("ferry base after a Cargo.toml change (%s)", seededWord(runs[0].manifestSeeded)), manifest)
		row("  limit: incremental cargo build of that change, warm checkout", plainManifest)
		fmt.Printf("  %-62s %8.2fx  (goal <= 1.3x)\n", "leaf refresh / (incremental build + clone)", leaf.Seconds()/(plainLeaf+clone).Seconds())
		fmt.Printf("  %-62s %8.1fx\n", "cold base / leaf refresh", cold.Seconds()/leaf.Seconds())
		fmt.Printf("  %-62s %7.1f MB\n", "disk the leaf refresh took (filesystem free space, median)", float64(medianBytes(runs))/1e6)
	}
	return nil
}

func seededWord(seeded bool) string {
	if seeded {
		return "seeded"
	}
	return "cold: other unit inputs"
}

func medianBytes(runs []refreshRun) int64 {
	var ds []time.Duration
	for _, r := range runs {
		ds = append(ds, time.Duration(r.addedBytes))
	}
	return int64(median(ds))
}

// refreshRound generates a workspace in dir, builds its base cold, then the
// base of a one-leaf edit and of a manifest change, each timed with the
// same change built incrementally in a warm plain checkout.
func refreshRound(bin, dir string, opts fixture.Options) (refreshRun, error) {
	var r refreshRun
	repo, err := fixture.Generate(filepath.Join(dir, "repo"), opts)
	if err != nil {
		return r, err
	}
	os.WriteFile(filepath.Join(repo.Dir, "ferry.toml"), []byte(fmt.Sprintf("[base]\nwarm = [%q]\n", benchWarm)), 0o644)
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
	change := func(edit func() error, msg string, seeded *bool) (time.Duration, time.Duration, int64, error) {
		if err := edit(); err != nil {
			return 0, 0, 0, err
		}
		c, err := repo.Commit(msg)
		if err != nil {
			return 0, 0, 0, err
		}
		free := freeBytes(home)
		d, rec, err := base("--rev", c)
		if err != nil {
			return 0, 0, 0, err
		}
		added := free - freeBytes(home)
		*seeded = rec["seed"] != nil && rec["seed"] != ""
		if _, err := exec.Command("git", "-C", plain, "checkout", "-q", "--detach", c).CombinedOutput(); err != nil {
			return 0, 0, 0, err
		}
		p, err := sh(plain, plainEnv, benchWarm)
		return d, p, added, err
	}
	leaf := fixture.LibPath(fixture.ChainC)
	if r.leaf, r.plainLeaf, r.addedBytes, err = change(func() error { return repo.Append(leaf, "\n// edited\n") }, "leaf edit", &r.leafSeeded); err != nil {
		return r, err
	}
	manifest := fixture.CrateDir(fixture.ChainC) + "/Cargo.toml"
	if r.manifest, r.plainManifest, _, err = change(func() error { return repo.Append(manifest, "\n[features]\nextra = []\n") }, "manifest change", &r.manifestSeeded); err != nil {
		return r, err
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
