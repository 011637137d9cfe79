package freshness

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrydev/ferry/pkg/git"
)

func TestStampBaseCheckout(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755)
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755) // a submodule's directory
	os.MkdirAll(filepath.Join(dir, "untracked"), 0o755)
	os.WriteFile(filepath.Join(dir, "a", "b", "f.rs"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, "target.txt"), []byte("t"), 0o644)
	os.Symlink("target.txt", filepath.Join(dir, "link"))
	recent := time.Now().Add(-time.Hour).Truncate(time.Second)
	os.Chtimes(filepath.Join(dir, "target.txt"), recent, recent)

	entries := []git.Entry{
		{Mode: git.ModeFile, Path: "a/b/f.rs"},
		{Mode: git.ModeSymlink, Path: "link"},
		{Mode: git.ModeGitlink, Path: "sub"},
	}
	st, err := StampBaseCheckout(dir, entries)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 2 || st.Dirs != 3 {
		t.Fatalf("stats %+v, want 2 files and 3 dirs (root, a, a/b)", st)
	}
	for _, p := range []string{"a/b/f.rs", "link", "a/b", "a", "."} {
		fi, err := os.Lstat(filepath.Join(dir, p))
		if err != nil || !fi.ModTime().Equal(StampTime) {
			t.Errorf("%s: mtime %v (%v), want the stamp time", p, fi.ModTime(), err)
		}
	}
	// The link is stamped, never what it points to; untracked and submodule
	// directories are not this checkout's.
	for _, p := range []string{"target.txt", "sub", "untracked"} {
		fi, _ := os.Lstat(filepath.Join(dir, p))
		if fi.ModTime().Equal(StampTime) {
			t.Errorf("%s was stamped", p)
		}
	}
}

func TestStampBaseCheckoutRefusesUnmerged(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), nil, 0o644)
	if _, err := StampBaseCheckout(dir, []git.Entry{{Mode: git.ModeFile, Stage: 2, Path: "f"}}); err == nil {
		t.Fatal("stamped a checkout with an unmerged entry")
	}
}
