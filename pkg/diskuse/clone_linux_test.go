package diskuse

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/internal/treetest"
)

// On a filesystem that clones, a clone takes nothing until it is written,
// and then what was written: blocks are told apart by where they are,
// not by inode.
func TestClonesCountWhatTheyWrite(t *testing.T) {
	parent, why := treetest.XFSRoot()
	if parent == "" {
		t.Skip(why)
	}
	dir := treetest.Dir(t, parent)
	base, fork := filepath.Join(dir, "base"), filepath.Join(dir, "fork")
	write(t, filepath.Join(base, "lib.rlib"), 8*mib, 'b')
	if err := os.MkdirAll(fork, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(filepath.Join(base, "lib.rlib"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(filepath.Join(fork, "lib.rlib"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err != nil {
		t.Fatalf("%s does not clone: %v", parent, err)
	}
	// Rewrite 1 MiB of the clone: copy-on-write gives it new blocks.
	if _, err := dst.WriteAt(bytes.Repeat([]byte{'f'}, mib), 2*mib); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	n := New()
	ub, err := n.Add(base)
	if err != nil {
		t.Fatal(err)
	}
	uf, err := n.Add(fork)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "base physical", ub.Physical, 8*mib, 64<<10)
	near(t, "clone physical after a 1 MiB write", uf.Physical, mib, 64<<10)
	if uf.Apparent != 8*mib {
		t.Errorf("clone apparent %d, want %d", uf.Apparent, 8*mib)
	}
	// Counted the other way round, the clone takes it all and the base
	// only what the clone does not share.
	m := New()
	uf2, _ := m.Add(fork)
	ub2, _ := m.Add(base)
	near(t, "clone counted first", uf2.Physical, 8*mib, 64<<10)
	near(t, "base counted after its clone", ub2.Physical, mib, 64<<10)
}
