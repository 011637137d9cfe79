package diskuse

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/internal/treetest"
)

const mib = 1 << 20

func write(t *testing.T, path string, size int, fill byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, bytes.Repeat([]byte{fill}, size), 0o644); err != nil {
		t.Fatal(err)
	}
}

// near fails t unless got is within slack of want.
func near(t *testing.T, what string, got, want, slack int64) {
	t.Helper()
	if got < want-slack || got > want+slack {
		t.Errorf("%s: %d bytes, want %d (± %d)", what, got, want, slack)
	}
}

// A hard link counts once, in the tree that is counted first; a copy is
// counted in full; apparent bytes are each tree's own, whatever was
// counted before; a missing tree takes nothing.
func TestLinksCountOnceCopiesTwice(t *testing.T) {
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
	write(t, filepath.Join(a, "deps", "lib.rlib"), 4*mib, 'a')
	if err := os.MkdirAll(b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(a, "deps", "lib.rlib"), filepath.Join(b, "lib.rlib")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(c, "lib.rlib"), 4*mib, 'c')
	n := New()
	ua, err := n.Add(a)
	if err != nil {
		t.Fatal(err)
	}
	ub, _ := n.Add(b)
	uc, _ := n.Add(c)
	near(t, "a physical", ua.Physical, 4*mib, 64<<10)
	near(t, "b physical (a hard link of a's file)", ub.Physical, 0, 8<<10)
	near(t, "c physical (a copy)", uc.Physical, 4*mib, 64<<10)
	for name, u := range map[string]Usage{"a": ua, "b": ub, "c": uc} {
		if u.Apparent != 4*mib || u.Files != 1 {
			t.Errorf("%s: apparent %d in %d files, want %d in 1", name, u.Apparent, u.Files, 4*mib)
		}
	}
	if u, err := n.Add(filepath.Join(dir, "missing")); err != nil || u != (Usage{}) {
		t.Errorf("a missing tree: %+v, %v", u, err)
	}
}

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
