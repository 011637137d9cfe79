package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/freshness"
	"github.com/ferrydev/ferry/pkg/git"
)

// The ctime section: what the check of changes whose mtime does not move
// (freshness.FreshenMoved) adds to each cargo call that may build, on the
// large generated workspace and on synthetic trees of many tracked files.
// The check runs in the shim's process before it execs cargo, so its
// in-process time is what the call pays; cargo -V and the other calls
// that build nothing skip it. Timed in this process, warm page cache (an
// agent's worktree is hot while it works).

// ctimeSynthetic are the synthetic trees' sizes, in tracked files (20 to a
// directory).
var ctimeSynthetic = []int{20000, 100000}

// ctimeMoved is how many files one measurement copies in with cp -p.
const ctimeMoved = 10

func runCtime(n, large int) error {
	root, err := os.MkdirTemp("", "ferry-bench-ctime-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	type set struct{ name, dir string }
	var sets []set
	if large > 0 {
		dir := filepath.Join(root, "large")
		fmt.Fprintf(os.Stderr, "bench: ctime: generating the large workspace\n")
		if _, err := fixture.Generate(dir, fixture.Options{ExtraCrates: large, ModulesPerCrate: 10}); err != nil {
			return err
		}
		sets = append(sets, set{fmt.Sprintf("large(%d crates)", large), dir})
	}
	for _, files := range ctimeSynthetic {
		dir := filepath.Join(root, fmt.Sprintf("synthetic-%d", files))
		fmt.Fprintf(os.Stderr, "bench: ctime: writing %d tracked files\n", files)
		if err := syntheticRepo(dir, files); err != nil {
			return err
		}
		sets = append(sets, set{fmt.Sprintf("synthetic(%d files)", files), dir})
	}
	m := max(20, 10*n)
	fmt.Printf("\n== The check of changes whose mtime does not move, per cargo call that may build (ms; median and p90 of %d)\n", m)
	fmt.Printf("  %-26s %8s %16s %16s %16s %16s\n", "", "paths", "nothing moved", fmt.Sprintf("%d moved (cp -p)", ctimeMoved), "read the index", "git ls-files")
	for _, s := range sets {
		gitDir := filepath.Join(s.dir, ".git")
		if err := freshness.Settle(s.dir, gitDir, gitDir); err != nil {
			return err
		}
		entries, err := git.ReadIndexPaths(filepath.Join(gitDir, "index"))
		if err != nil {
			return err
		}
		var files []string
		for _, e := range entries {
			if e.Mode == git.ModeFile {
				files = append(files, e.Path)
			}
		}
		var quiet, moved, index, lsFiles []time.Duration
		checked := 0
		for i := range m + 1 { // the first round warms caches and is dropped
			t := time.Now()
			mv, err := freshness.FreshenMoved(s.dir, gitDir, gitDir, "", nil)
			if err != nil {
				return err
			}
			quiet = append(quiet, time.Since(t))
			checked = mv.Checked
			if len(mv.Files) != 0 {
				return fmt.Errorf("ctime: %s: a check with nothing moved freshened %q", s.name, mv.Files)
			}
			old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
			for j := range ctimeMoved { // cp -p: new bytes, an old mtime
				p := filepath.Join(s.dir, files[(i*ctimeMoved+j)*7919%len(files)])
				if err := os.WriteFile(p, fmt.Appendf(nil, "// moved %d %d\n", i, j), 0o644); err != nil {
					return err
				}
				if err := os.Chtimes(p, old, old); err != nil {
					return err
				}
			}
			t = time.Now()
			mv, err = freshness.FreshenMoved(s.dir, gitDir, gitDir, "", nil)
			if err != nil {
				return err
			}
			moved = append(moved, time.Since(t))
			if len(mv.Files) != ctimeMoved {
				return fmt.Errorf("ctime: %s: %d files moved, the check freshened %q", s.name, ctimeMoved, mv.Files)
			}
			t = time.Now()
			if _, err := git.ReadIndexPaths(filepath.Join(gitDir, "index")); err != nil {
				return err
			}
			index = append(index, time.Since(t))
			t = time.Now()
			cmd := exec.Command("git", "ls-files", "-s", "-z")
			cmd.Dir = s.dir
			if err := cmd.Run(); err != nil {
				return err
			}
			lsFiles = append(lsFiles, time.Since(t))
		}
		cell := func(ds []time.Duration) string {
			ds = ds[1:]
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			return fmt.Sprintf("%6.2f / %6.2f", ms(ds[len(ds)/2]), ms(ds[len(ds)*9/10]))
		}
		fmt.Printf("  %-26s %8d %16s %16s %16s %16s\n", s.name, checked, cell(quiet), cell(moved), cell(index), cell(lsFiles))
	}
	return nil
}

// syntheticRepo makes a repository at dir with files tracked files, 20 to
// a directory, committed.
func syntheticRepo(dir string, files int) error {
	for i := range files {
		p := filepath.Join(dir, "crates", fmt.Sprintf("c%03d", i/2000), "src", fmt.Sprintf("m%03d", i/20%100), fmt.Sprintf("f%02d.rs", i%20))
		if i%20 == 0 {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(p, fmt.Appendf(nil, "pub fn f%d() {}\n", i), 0o644); err != nil {
			return err
		}
	}
	r := &fixture.Repo{Dir: dir}
	if _, err := r.Git("init", "-q", "-b", "main"); err != nil {
		return err
	}
	_, err := r.Commit("synthetic")
	return err
}
