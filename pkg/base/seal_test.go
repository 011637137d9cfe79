package base

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// makeTarget lays out n files in directories of 100, like a target dir.
func makeTarget(t testing.TB, n int) string {
	t.Helper()
	dir := t.TempDir()
	for i := 0; i < n; i++ {
		d := filepath.Join(dir, "debug", fmt.Sprintf("d%03d", i/100))
		os.MkdirAll(d, 0o755)
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%04d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Verify accepts the target as sealed and refuses every kind of change:
// a write, a touch, a new file, a removal, a chmod, a retargeted link.
func TestVerifyDetectsChanges(t *testing.T) {
	target := makeTarget(t, 250)
	os.Symlink("d000", filepath.Join(target, "debug", "link"))
	seal, err := Seal(target)
	if err != nil {
		t.Fatal(err)
	}
	r := &Record{ID: "c-f", Commit: "c", Target: target, TargetSeal: seal, Created: time.Now()}
	if err := Verify(r); err != nil {
		t.Fatalf("untouched target: %v", err)
	}
	f := filepath.Join(target, "debug", "d001", "f0150")
	changes := map[string]func() func(){
		"write": func() func() {
			os.WriteFile(f, []byte("y"), 0o644)
			return func() { os.WriteFile(f, []byte("x"), 0o644) }
		},
		"append": func() func() {
			os.WriteFile(f, []byte("xx"), 0o644)
			return func() { os.WriteFile(f, []byte("x"), 0o644) }
		},
		"new file": func() func() {
			p := filepath.Join(target, "debug", "planted")
			os.WriteFile(p, nil, 0o644)
			return func() { os.Remove(p) }
		},
		"chmod": func() func() {
			os.Chmod(f, 0o755)
			return func() { os.Chmod(f, 0o644) }
		},
		"link": func() func() {
			l := filepath.Join(target, "debug", "link")
			os.Remove(l)
			os.Symlink("d001", l)
			return func() { os.Remove(l); os.Symlink("d000", l) }
		},
	}
	for name, change := range changes {
		undo := change()
		err := Verify(r)
		undo()
		if err == nil {
			t.Errorf("%s: not detected", name)
		}
		// Undoing restores bytes and mode but not mtimes: the seal still
		// differs, and rightly (Cargo compares mtimes).
		fi, _ := os.Lstat(f)
		os.Chtimes(f, fi.ModTime(), fi.ModTime())
	}
	os.RemoveAll(filepath.Join(target, "debug", "d002"))
	if err := Verify(r); err == nil {
		t.Error("a removed directory is not detected")
	}
	r.TargetSeal.Digest = ""
	if err := Verify(r); err == nil {
		t.Error("a record without a seal is trusted")
	}
}

// BenchmarkSeal is the listing spawn and ferry base verify make, over a
// target of the benchmark's large workspace's size.
func BenchmarkSeal(b *testing.B) {
	target := makeTarget(b, 7384)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Seal(target); err != nil {
			b.Fatal(err)
		}
	}
}
