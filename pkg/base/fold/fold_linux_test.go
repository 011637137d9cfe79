package fold

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/treetest"
	"github.com/ferrydev/ferry/pkg/fork"

	"golang.org/x/sys/unix"
)

// foldLower is a lower layer with every kind of entry the writes below can
// touch: files, a hard-linked pair, symlinks, nested and read-only
// directories, and a subtree nothing writes.
func foldLower() []treetest.Entry {
	return []treetest.Entry{
		treetest.E("a", 'd', 0o755, ""),
		treetest.E("a/file1", 'f', 0o644, "one"),
		treetest.E("a/file2", 'f', 0o644, "two"),
		treetest.E("a/link", 'l', 0, "file1"),
		treetest.E("a/hard1", 'f', 0o644, "hard"),
		treetest.E("a/hard2", 'h', 0, "a/hard1"),
		treetest.E("a/sub", 'd', 0o755, ""),
		treetest.E("a/sub/deep", 'f', 0o644, "deep"),
		treetest.E("gone", 'd', 0o755, ""),
		treetest.E("gone/x", 'f', 0o644, "x"),
		treetest.E("replaced", 'd', 0o755, ""),
		treetest.E("replaced/y", 'f', 0o644, "y"),
		treetest.E("f2d", 'f', 0o644, "file becoming a dir"),
		treetest.E("d2f", 'd', 0o755, ""),
		treetest.E("d2f/z", 'f', 0o644, "z"),
		treetest.E("keep", 'd', 0o750, ""),
		treetest.E("keep/nested", 'd', 0o755, ""),
		treetest.E("keep/nested/file", 'f', 0o600, "kept"),
		treetest.E("keep/nested/pair", 'h', 0, "keep/nested/file"),
		treetest.E("keep/pair", 'h', 0, "keep/nested/file"),
		treetest.E("keep/sealed", 'd', 0o555, ""),
		treetest.E("keep/sealed/ro", 'f', 0o444, "read-only"),
		treetest.E("keep/dangling", 'l', 0, "../nowhere"),
		treetest.E("ro", 'd', 0o555, ""),
		treetest.E("ro/inside", 'f', 0o444, "in a read-only dir"),
	}
}

// Folding an overlay's upper dir gives, as a plain directory, exactly the
// tree the overlay showed: the same entries, permissions, bytes, link texts
// and mtimes (directories' included), with every file only the lower had a
// hard link of the lower's inode, links inside either layer kept, no
// whiteout and no overlayfs attribute left, and the lower unchanged.
//
// Prefold, run while the overlay is mounted, and Merge after it give the
// same tree, with the same counts.
func TestFoldIsTheMergedView(t *testing.T) {
	t.Run("fold", func(t *testing.T) { checkFold(t, false) })
	t.Run("prefold", func(t *testing.T) { checkFold(t, true) })
}

func checkFold(t *testing.T, prefold bool) {
	dir := treetest.Dir(t, "")
	treetest.NeedOverlay(t, dir)
	if !treetest.InNamespace() {
		treetest.RunInNamespace(t)
		return
	}
	lower := filepath.Join(dir, "lower")
	treetest.MakeTarget(t, lower, foldLower())
	before := treetest.Snapshot(t, lower)
	agent := filepath.Join(dir, "layer")
	if err := os.Mkdir(agent, 0o755); err != nil {
		t.Fatal(err)
	}
	p := fork.Paths{BaseTarget: lower, AgentDir: agent}
	if _, err := fork.Overlay().Fork(p); err != nil {
		t.Fatal(err)
	}
	spec := fork.Overlay().TargetSpec(p).Overlay
	v := treetest.MountView(t, spec.Lower, spec.Upper, spec.Work)
	at := func(rel string) string { return filepath.Join(v, rel) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// The result: the upper itself, or the tree laid beside it.
	result := spec.Upper
	var laid Stats
	if prefold {
		result = filepath.Join(dir, "next")
		var err error
		laid, err = Prefold(lower, result)
		must(err)
	}
	// What a build does: truncate and rewrite, append, remove, replace a
	// directory (overlayfs marks the new one opaque), turn a file into a
	// directory and back, rename, link, chmod, touch, and write new trees.
	must(os.WriteFile(at("a/file1"), []byte("ONE"), 0o644))
	f, err := os.OpenFile(at("a/file2"), os.O_APPEND|os.O_WRONLY, 0)
	must(err)
	f.WriteString(" more")
	must(f.Close())
	must(os.Remove(at("a/hard2")))
	must(os.RemoveAll(at("gone")))
	must(os.RemoveAll(at("replaced")))
	must(os.Mkdir(at("replaced"), 0o755))
	must(os.WriteFile(at("replaced/new"), []byte("new"), 0o644))
	must(os.Remove(at("f2d")))
	must(os.Mkdir(at("f2d"), 0o711))
	must(os.WriteFile(at("f2d/inside"), []byte("inside"), 0o600))
	must(os.RemoveAll(at("d2f")))
	must(os.WriteFile(at("d2f"), []byte("now a file"), 0o640))
	must(os.Rename(at("a/file2"), at("a/file2-renamed")))
	must(os.Link(at("a/file1"), at("a/file1-link")))
	must(os.Chmod(at("a/sub/deep"), 0o600))
	must(unix.UtimesNanoAt(unix.AT_FDCWD, at("a/sub"), []unix.Timespec{treetest.TimeOf(90), treetest.TimeOf(90)}, 0))
	must(os.MkdirAll(at("newdir/n1"), 0o755))
	must(os.WriteFile(at("newdir/n1/file"), []byte("brand new"), 0o644))
	must(os.Symlink("n1/file", at("newdir/ln")))
	merged := treetest.Snapshot(t, v)
	treetest.UnmountView(t, v)

	// Show finds, outside the namespace, what the overlay showed.
	layers := Layers{Lower: lower, Upper: spec.Upper}
	for rel, n := range merged {
		if rel == "." || n.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		p, ok := layers.Show(rel)
		if !ok {
			t.Errorf("Show(%s) finds nothing; the overlay showed it", rel)
			continue
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != n.Data {
			t.Errorf("Show(%s) = %s, which holds %q (%v); the overlay showed %q", rel, p, b, err, n.Data)
		}
	}
	for _, rel := range []string{"a/hard2", "gone", "gone/x", "replaced/y", "d2f/z", "f2d/nothing", "a/file2"} {
		if p, ok := layers.Show(rel); ok {
			t.Errorf("Show(%s) = %s; the overlay showed nothing there", rel, p)
		}
	}

	// Hiding an entry offline is removing it through the overlay.
	if err := layers.Hide("keep/nested"); err != nil {
		t.Fatal(err)
	}
	if p, ok := layers.Show("keep/nested/file"); ok {
		t.Errorf("Show(keep/nested/file) = %s after Hide(keep/nested)", p)
	}
	for rel := range merged {
		if rel == "keep/nested" || strings.HasPrefix(rel, "keep/nested/") {
			delete(merged, rel)
		}
	}
	keep := merged["keep"]
	delete(merged, "keep") // its mtime is the removal's

	var st Stats
	if prefold {
		st, err = Merge(spec.Upper, result, laid)
	} else {
		st, err = Fold(lower, spec.Upper)
	}
	if err != nil {
		t.Fatal(err)
	}
	folded := treetest.Snapshot(t, result)
	if folded["keep"].Mode != keep.Mode {
		t.Errorf("keep: mode %o after Hide and Fold, %o before", folded["keep"].Mode, keep.Mode)
	}
	delete(folded, "keep")
	treetest.SameTree(t, merged, folded)
	folded = treetest.Snapshot(t, result)
	treetest.SameTree(t, before, treetest.Snapshot(t, lower))
	// Files only the lower had are its inodes; the upper's own are not.
	low := treetest.Snapshot(t, lower)
	for _, rel := range []string{"a/hard1", "keep/sealed/ro", "ro/inside", "a/sub/deep"} {
		same := folded[rel].ID == low[rel].ID
		if want := rel != "a/sub/deep"; same != want {
			t.Errorf("%s: shares the lower's inode = %t, want %t", rel, same, want)
		}
	}
	if _, ok := folded["keep/nested"]; ok {
		t.Error("keep/nested, hidden, is in the folded tree")
	}
	if folded["keep/pair"].ID != low["keep/nested/file"].ID {
		t.Error("keep/pair is no longer a link of the lower's keep/nested/file")
	}
	if folded["a/file1"].ID != folded["a/file1-link"].ID {
		t.Error("a/file1 and the link made through the overlay are no longer links of each other")
	}
	if folded["a/file1"].ID == low["a/file1"].ID {
		t.Error("a/file1 was written through the overlay but is the lower's inode")
	}
	// Nothing of overlayfs's is left.
	err = filepath.WalkDir(result, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if treetest.IsWhiteout(path) {
			t.Errorf("%s: a whiteout is left", path)
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		buf := make([]byte, 4096)
		k, err := unix.Llistxattr(path, buf)
		if err != nil {
			return nil
		}
		for _, name := range bytes.Split(buf[:k], []byte{0}) {
			if strings.Contains(string(name), "overlay.") {
				t.Errorf("%s: overlayfs's attribute %s is left", path, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// What the writes above make, whichever way the layer is folded.
	st.Duration = 0
	if want := (Stats{Own: 16, OwnBytes: 46, Linked: 4, Symlinks: 2, Dirs: 2, Whiteouts: 4}); st != want {
		t.Errorf("counts %+v, want %+v", st, want)
	}
	// The folded tree serves as a lower layer again, showing itself.
	again := fork.Paths{BaseTarget: result, AgentDir: filepath.Join(dir, "again")}
	must(os.Mkdir(again.AgentDir, 0o755))
	if _, err := fork.Overlay().Fork(again); err != nil {
		t.Fatal(err)
	}
	spec2 := fork.Overlay().TargetSpec(again).Overlay
	v2 := treetest.MountView(t, spec2.Lower, spec2.Upper, spec2.Work)
	treetest.SameTree(t, folded, treetest.Snapshot(t, v2))
}
