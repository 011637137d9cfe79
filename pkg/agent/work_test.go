package agent_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/git"
)

// gitIn runs git in dir with a fixed identity and no user configuration.
func gitIn(t *testing.T, dir string, args ...string) {
	t.Helper()
	c := exec.Command("git", args...)
	c.Dir = dir
	c.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

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
	gitIn(t, top, "init", "-q", "-b", "main")
	gitIn(t, top, "add", ".")
	gitIn(t, top, "commit", "-q", "-m", "init")
	repo, err := git.Open(top)
	if err != nil {
		t.Fatal(err)
	}
	wt := filepath.Join(root, "wt")
	gitIn(t, top, "worktree", "add", "-q", "-b", "ferry/a", wt)
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
	gitIn(t, wt, "add", "target")
	gitIn(t, wt, "commit", "-q", "-m", "a tracked target")
	os.Remove(link)
	if err := os.Symlink(fork, link); err != nil {
		t.Fatal(err)
	}
	expect("a tracked target link, changed", []string{"target"}, nil)
}
