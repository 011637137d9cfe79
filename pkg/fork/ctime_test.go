package fork

import (
	"github.com/ferrydev/ferry/internal/treetest"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Forking a base leaves every entry of its target as the base's seal
// lists it (package base): the inode, the change time and the link count,
// which a same-user process cannot put back, are what the seal checks
// besides mtimes. A clone (FICLONE), a copy (copy_file_range) and an
// overlay with the target as its lower layer only read it, also while the
// fork is read and written (copy-up) and its processes end.
func TestForkKeepsChangeTimes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend, store string) {
		p := newFork(t, store, cargoTarget())
		before := treetest.Snapshot(t, p.BaseTarget)
		// Past the target's last change on the kernel's coarse clock, so
		// that a change now shows as one.
		time.Sleep(30 * time.Millisecond)
		if _, err := b.Fork(p); err != nil {
			t.Fatal(err)
		}
		v := view(t, b, p)
		// Read everything through the fork, then write some of it.
		filepath.WalkDir(v, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				os.ReadFile(path)
			}
			return nil
		})
		if err := os.WriteFile(filepath.Join(v, "debug/deps/libdemo-0f1e2d3c4b5a6978.rlib"), []byte("new rlib"), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(filepath.Join(v, "debug/demo"), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("XXXX")
		f.Close()
		if err := os.Chmod(filepath.Join(v, "debug/deps/demo-0f1e2d3c4b5a6978.d"), 0o600); err != nil {
			t.Fatal(err)
		}
		v = remount(t, b, p, v)
		after := treetest.Snapshot(t, p.BaseTarget)
		if len(after) != len(before) {
			t.Fatalf("%s: the base holds %d entries after the fork, %d before", b.Name(), len(after), len(before))
		}
		for rel, n := range before {
			a := after[rel]
			if a.Ctime != n.Ctime || a.ID != n.ID || a.Nlinks != n.Nlinks {
				t.Errorf("%s: the base's %s changed: change time %s -> %s, inode %v -> %v, links %d -> %d",
					b.Name(), rel, treetest.FmtTime(n.Ctime), treetest.FmtTime(a.Ctime), n.ID, a.ID, n.Nlinks, a.Nlinks)
			}
		}
	})
}
