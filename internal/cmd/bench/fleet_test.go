package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// compareTargets counts content, not paths: a file moved or copied within
// the target is not new, a hard link is one file, and a new content held
// twice is stored (and packed) once.
func TestCompareTargetsCountsNewContent(t *testing.T) {
	root := t.TempDir()
	prev, next := filepath.Join(root, "prev"), filepath.Join(root, "next")
	write := func(dir, rel, content string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kept, moved, fresh := strings.Repeat("k", 1000), strings.Repeat("m", 300), strings.Repeat("n", 500)
	write(prev, "debug/deps/libkept.rlib", kept)
	write(prev, "debug/incremental/s-old/x.o", moved)
	write(prev, "debug/deps/libgone.rlib", "only before")

	write(next, "debug/deps/libkept.rlib", kept)
	write(next, "debug/.fingerprint/u/moved", moved) // same content elsewhere
	write(next, "debug/deps/app-1", fresh)
	if err := os.Link(filepath.Join(next, "debug/deps/app-1"), filepath.Join(next, "debug/app")); err != nil {
		t.Fatal(err)
	}
	write(next, "debug/build/app-2/out", fresh) // the new content again, another inode
	write(next, "debug/incremental/s-new/y.o", "new!")

	old, err := targetFiles(prev)
	if err != nil {
		t.Fatal(err)
	}
	var d refreshDiff
	cur, err := compareTargets(old, next, &d)
	if err != nil {
		t.Fatal(err)
	}
	if len(cur) != d.files {
		t.Errorf("compareTargets returned %d files of the new target, counted %d", len(cur), d.files)
	}
	if d.files != 5 || d.bytes != 1000+300+500+500+4 {
		t.Errorf("target: %d files, %d bytes; want 5 files (the hard link once), %d bytes", d.files, d.bytes, 1000+300+500+500+4)
	}
	if d.newFiles != 3 || d.newBytes != 500+500+4 {
		t.Errorf("new: %d files, %d bytes; want 3 files, %d bytes", d.newFiles, d.newBytes, 500+500+4)
	}
	if d.distinctBytes != 500+4 {
		t.Errorf("distinct new content: %d bytes, want %d", d.distinctBytes, 500+4)
	}
	// The hard link is counted where the walk meets it first (debug/app).
	if d.byDir["debug/ (files)"] != 500 || d.byDir["debug/deps"] != 0 || d.byDir["debug/build"] != 500 || d.byDir["debug/incremental"] != 4 || d.byDir["debug/.fingerprint"] != 0 {
		t.Errorf("new bytes by dir: %v", d.byDir)
	}
	if d.packed <= 0 || d.packed >= d.distinctBytes {
		t.Errorf("packed %d bytes of %d distinct new bytes: want fewer, more than none", d.packed, d.distinctBytes)
	}
}
