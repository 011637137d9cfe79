package diskuse

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
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

// What a build in a fork can put there is counted without following or
// blocking: a fifo, a symlink to outside the tree, a socket-like special
// file, and a sparse file whose apparent size far exceeds its blocks.
func TestHostileTreeIsCountedNotFollowed(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "big")
	write(t, outside, 4*mib, 'o')
	tree := filepath.Join(dir, "fork")
	write(t, filepath.Join(tree, "ok"), mib, 'k')
	if err := unix.Mkfifo(filepath.Join(tree, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(tree, "out")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(tree, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	f.Close()
	u, err := New().Add(tree)
	if err != nil {
		t.Fatal(err)
	}
	if u.Apparent != mib+1<<40 || u.Files != 2 {
		t.Errorf("apparent %d in %d files, want %d in 2 (the fifo and the link are no files)", u.Apparent, u.Files, int64(mib)+1<<40)
	}
	near(t, "physical (the link not followed, the sparse file's holes free)", u.Physical, mib, 64<<10)
}
