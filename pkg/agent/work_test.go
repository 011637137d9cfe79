package agent_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ferrydev/ferry/internal/agenttest"
	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/git"
)

// A symlink named target at the worktree's root is Ferry's entry (where
// the host reaches the agent's build output; a plain symlink stands in for
// the one spawn makes): neither a change nor an ignored file, whether the
// repository ignores target or not. A target directory, a symlink by
// another name, and a tracked target are the user's.
func TestWorktreeWorkLeavesOutFerrysEntries(t *testing.T) {
	root := t.TempDir()
	top := filepath.Join(root, "repo")
	if err := os.MkdirAll(filepath.Join(top, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(top, "src", "main.rs"), []byte("fn main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	agenttest.GitIn(t, top, "init", "-q", "-b", "main")
	agenttest.GitIn(t, top, "add", ".")
	agenttest.GitIn(t, top, "commit", "-q", "-m", "init")
	repo, err := git.Open(top)
	if err != nil {
		t.Fatal(err)
	}
	wt := filepath.Join(root, "wt")
	agenttest.GitIn(t, top, "worktree", "add", "-q", "-b", "ferry/a", wt)
	fork := filepath.Join(root, "store", "agents", "a", "target")
	r := &agent.Record{Name: "a", Worktree: wt, Branch: "ferry/a", TargetLink: fork}
	if err := os.MkdirAll(filepath.Join(fork, "debug"), 0o755); err != nil {
		t.Fatal(err)
	}
	exclude := filepath.Join(top, ".git", "info", "exclude")

	work := func() *agent.Work {
		t.Helper()
		w, err := agent.WorktreeWork(repo, r)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	expect := func(what string, changed, ignored []string) {
		t.Helper()
		w := work()
		if !slices.Equal(w.Changed, changed) || !slices.Equal(w.Ignored, ignored) {
			t.Fatalf("%s: changed %q ignored %q, want changed %q ignored %q", what, w.Changed, w.Ignored, changed, ignored)
		}
	}

	link := filepath.Join(wt, agent.TargetLink)
	if err := os.Symlink(fork, link); err != nil {
		t.Fatal(err)
	}
	expect("Ferry's target link, untracked", nil, nil)
	if err := os.WriteFile(exclude, []byte("/target\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect("Ferry's target link, ignored", nil, nil)
	// Retargeted, it is the user's (ignored here).
	os.Remove(link)
	if err := os.Symlink("/nonexistent", link); err != nil {
		t.Fatal(err)
	}
	expect("a retargeted target link", nil, []string{"target"})
	os.Remove(link)

	// The user's own: a symlink by another name, a target directory
	// (ignored, and untracked).
	other := filepath.Join(wt, "out")
	if err := os.Symlink(fork, other); err != nil {
		t.Fatal(err)
	}
	expect("a symlink named out", []string{"out"}, nil)
	os.Remove(other)
	if err := os.MkdirAll(filepath.Join(wt, "target", "debug"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wt, "target", "debug", "app"), []byte("bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	expect("a target directory, ignored", nil, []string{"target/"})
	if err := os.WriteFile(exclude, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	expect("a target directory, untracked", []string{"target/debug/app"}, nil)
	os.RemoveAll(filepath.Join(wt, "target"))
	expect("clean", nil, nil)

	// A target the commit tracks, replaced by a link: a change of the user's.
	if err := os.Symlink("src", link); err != nil {
		t.Fatal(err)
	}
	agenttest.GitIn(t, wt, "add", "target")
	agenttest.GitIn(t, wt, "commit", "-q", "-m", "a tracked target")
	os.Remove(link)
	if err := os.Symlink(fork, link); err != nil {
		t.Fatal(err)
	}
	expect("a tracked target link, changed", []string{"target"}, nil)
}
