package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ferrydev/ferry/pkg/store"
)

// FindByWorktree reads the record named after the worktree first, and
// still finds every agent the scan finds: one whose worktree is named
// otherwise, and one reached through a symbolic link. A record named after
// the worktree whose worktree is another directory is not the answer.
func TestFindByWorktree(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	s, err := store.Open(filepath.Join(root, "home"), filepath.Join(repo, ".git"), repo)
	if err != nil {
		t.Fatal(err)
	}
	wt := func(name string) string {
		d := filepath.Join(root, "worktrees", name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	add := func(name, worktree string) {
		if err := os.MkdirAll(s.Agent(name).Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := write(s, &Record{Format: Format, Name: name, State: Ready, Worktree: worktree}); err != nil {
			t.Fatal(err)
		}
	}
	named, other, moved := wt("named"), wt("elsewhere"), wt("moved")
	add("named", named)
	add("other", other)
	// Agent "moved" points elsewhere; agent "aa-first" owns moved/.
	add("moved", other+"-gone")
	add("aa-first", moved)
	link := filepath.Join(root, "link")
	if err := os.Symlink(named, link); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{
		named: "named", other: "other", moved: "aa-first", link: "named",
		wt("nobody"): "",
	} {
		r, err := FindByWorktree(s, dir)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		got := ""
		if r != nil {
			got = r.Name
		}
		if got != want {
			t.Errorf("FindByWorktree(%s) = %q, want %q", dir, got, want)
		}
	}
}
