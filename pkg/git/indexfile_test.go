package git

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ReadIndexPaths reads what `git ls-files -s` lists, for each index version
// git writes, with SHA-1 and SHA-256 object names: long and prefix-sharing
// names (version 4 compresses them), a symlink, an executable, an
// intent-to-add entry (an extended flag word) and a sparse checkout's
// skip-worktree entry. A split index is left to git.
func TestReadIndexPathsMatchesLsFiles(t *testing.T) {
	for _, format := range []string{"sha1", "sha256"} {
		for _, version := range []string{"2", "3", "4"} {
			t.Run(format+"/v"+version, func(t *testing.T) {
				dir := filepath.Join(tempDir(t), "repo")
				gitT(t, filepath.Dir(dir), "init", "-q", "--object-format="+format, "-b", "main", dir)
				long := strings.Repeat(strings.Repeat("d", 200)+"/", 14) + "x"
				for _, p := range []string{"a-", "a.c", "a/b", "a/c", "crates/one/src/lib.rs", "crates/one/src/main.rs", "crates/two/src/lib.rs", long} {
					write(t, filepath.Join(dir, p), p+"\n")
				}
				if err := os.Chmod(filepath.Join(dir, "a.c"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("a/b", filepath.Join(dir, "link")); err != nil {
					t.Fatal(err)
				}
				gitT(t, dir, "add", ".")
				gitT(t, dir, "commit", "-q", "-m", "first")
				write(t, filepath.Join(dir, "new.rs"), "new\n")
				gitT(t, dir, "add", "-N", "new.rs")
				gitT(t, dir, "update-index", "--skip-worktree", "crates/two/src/lib.rs")
				gitT(t, dir, "update-index", "--index-version", version)
				r, err := Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				want, err := r.LsFiles(dir)
				if err != nil {
					t.Fatal(err)
				}
				got, err := ReadIndexPaths(filepath.Join(dir, ".git", "index"))
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want) {
					t.Fatalf("%d paths, ls-files lists %d:\n%+v", len(got), len(want), got)
				}
				for i := range want {
					if got[i].Path != want[i].Path || got[i].Mode != want[i].Mode {
						t.Errorf("entry %d: %q %o, ls-files has %q %o", i, got[i].Path, got[i].Mode, want[i].Path, want[i].Mode)
					}
					if skip := got[i].Path == "crates/two/src/lib.rs"; got[i].SkipWorktree != skip {
						t.Errorf("%s: skip-worktree %v, want %v", got[i].Path, got[i].SkipWorktree, skip)
					}
				}
			})
		}
	}
	t.Run("split", func(t *testing.T) {
		dir, _ := newRepo(t)
		gitT(t, dir, "update-index", "--split-index")
		_, err := ReadIndexPaths(filepath.Join(dir, ".git", "index"))
		if !errors.Is(err, ErrIndexFormat) {
			t.Fatalf("split index: %v, want ErrIndexFormat", err)
		}
	})
	t.Run("corrupt", func(t *testing.T) {
		dir, _ := newRepo(t)
		p := filepath.Join(dir, ".git", "index")
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, cut := range []int{len(data) - 1, len(data) / 2, 13} {
			if err := os.WriteFile(p, data[:cut], 0o644); err != nil {
				t.Fatal(err)
			}
			if got, err := ReadIndexPaths(p); err == nil {
				t.Errorf("cut at %d: read %+v, want an error", cut, got)
			}
		}
	})
}
