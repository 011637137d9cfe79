package freshness

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/git"
)

// walkTree writes a checkout large enough to be walked in several runs,
// with what the walk must get right at a run's edge: a conflicted path
// (three stages), a path a sparse checkout leaves out, a submodule, a
// tracked directory replaced by a link to a directory outside the
// checkout, a file that is gone. It returns the checkout, its index
// entries (sorted as git sorts them) and the paths one walk must visit,
// sorted.
func walkTree(t *testing.T) (string, []git.IndexPath, []string) {
	t.Helper()
	root := t.TempDir()
	outside := t.TempDir()
	var entries []git.IndexPath
	want := map[string]bool{"": true}
	file := func(rel string, exists bool) {
		entries = append(entries, git.IndexPath{Path: rel, Mode: 0o100644})
		if !exists {
			return
		}
		p := filepath.Join(root, filepath.FromSlash(rel))
		check(t, os.MkdirAll(filepath.Dir(p), 0o755))
		check(t, os.WriteFile(p, nil, 0o644))
		want[rel] = true
		for d := dirOf(rel); d != ""; d = dirOf(d) {
			want[d] = true
		}
	}
	for c := range 40 {
		for m := range 40 {
			file(fmt.Sprintf("crates/c%02d/src/m%02d.rs", c, m), true)
		}
		file(fmt.Sprintf("crates/c%02d/Cargo.toml", c), true)
	}
	file("crates/c07/src/gone.rs", false)
	// A tracked directory that is a link now: nothing below it is visited,
	// not even what the link leads to.
	file("linked/a.rs", false)
	file("linked/b.rs", false)
	check(t, os.WriteFile(filepath.Join(outside, "a.rs"), nil, 0o644))
	check(t, os.Symlink(outside, filepath.Join(root, "linked")))
	file("top.rs", true)
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })

	// The conflicted path sits where the runs of two and four walkers are
	// cut, to be seen once either way.
	mid := len(entries) / 2
	conflicted := entries[mid]
	stages := []git.IndexPath{conflicted, conflicted}
	entries = slices.Insert(entries, mid, stages...)
	if runs := splitRuns(entries, 2); len(runs) != 2 || entries[runs[1]].Path == entries[runs[1]-1].Path {
		t.Fatalf("runs %v cut the conflicted path's stages", runs)
	}
	// Left out: a sparse path (its directory exists) and a submodule.
	sparse := git.IndexPath{Path: "crates/c20/src/sparse.rs", Mode: 0o100644, SkipWorktree: true}
	sub := git.IndexPath{Path: "crates/c30/vendored", Mode: git.ModeGitlink}
	check(t, os.MkdirAll(filepath.Join(root, "crates/c30/vendored"), 0o755))
	entries = append(entries, sparse, sub)
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })

	var list []string
	for rel := range want {
		list = append(list, rel)
	}
	sort.Strings(list)
	return root, entries, list
}

// Walked in one run or side by side, the walk visits every tracked path
// that exists and every directory on the way exactly once, and nothing
// else (in particular nothing through the link, nothing left out).
func TestEachTrackedRuns(t *testing.T) {
	root, entries, want := walkTree(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 3, 4} {
		runtime.GOMAXPROCS(procs)
		var got []string
		dirs := map[string]bool{}
		check(t, eachTracked(root, entries, func(tp *trackedPath) error {
			got = append(got, tp.rel)
			dirs[tp.rel] = tp.dir
			return nil
		}))
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("%d CPUs: visited %d paths, want %d; first difference at %s", procs, len(got), len(want), firstDiff(got, want))
		}
		if !dirs["crates/c03/src"] || dirs["crates/c03/src/m01.rs"] || !dirs[""] {
			t.Errorf("%d CPUs: directories not marked as such", procs)
		}
	}
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("%q against %q", a[i], b[i])
		}
	}
	return "the end of the shorter list"
}

// A run's callback error ends the walk with that error, whichever run
// meets it.
func TestEachTrackedError(t *testing.T) {
	root, entries, _ := walkTree(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for _, at := range []string{"crates/c02/src/m03.rs", "crates/c38/src/m03.rs"} {
		err := eachTracked(root, entries, func(tp *trackedPath) error {
			if tp.rel == at {
				return fmt.Errorf("stop at %s", at)
			}
			return nil
		})
		if err == nil || err.Error() != "stop at "+at {
			t.Errorf("error %v, want the one at %s", err, at)
		}
	}
}

// raise changes the path it was given and nothing through a link: a
// directory on the way replaced by a link after the walk's lstat leaves
// the file the link leads to as it was.
func TestTrackedRaiseFollowsNoLink(t *testing.T) {
	root, entries, _ := walkTree(t)
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	var picked []*trackedPath
	check(t, eachTracked(root, entries, func(tp *trackedPath) error {
		if tp.rel == "crates/c05/src/m05.rs" || tp.rel == "top.rs" {
			c := *tp
			picked = append(picked, &c)
		}
		return nil
	}))
	if len(picked) != 2 {
		t.Fatalf("picked %d paths", len(picked))
	}
	// The walk is over, but raise opens its own way from the top.
	outside := t.TempDir()
	check(t, os.WriteFile(filepath.Join(outside, "m05.rs"), nil, 0o644))
	check(t, os.Chtimes(filepath.Join(outside, "m05.rs"), old, old))
	check(t, os.Rename(filepath.Join(root, "crates/c05/src"), filepath.Join(root, "crates/c05/src.moved")))
	check(t, os.Symlink(outside, filepath.Join(root, "crates/c05/src")))
	check(t, os.Chtimes(filepath.Join(root, "top.rs"), old, old))
	for _, tp := range picked {
		tp.rootfd = mustOpenDir(t, root)
		check(t, tp.raise())
	}
	if m := mtime(t, filepath.Join(outside, "m05.rs")); !m.Equal(old) {
		t.Errorf("the file through the link was changed: mtime %v", m)
	}
	if m := mtime(t, filepath.Join(root, "top.rs")); m.Equal(old) {
		t.Errorf("top.rs was not raised")
	}
}

func mustOpenDir(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, dirOpenFlags, 0)
	check(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}
