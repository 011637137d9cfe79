package git

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hookNames is every hook githooks(5) names: a call that ran any of them
// shows in the log.
var hookNames = []string{
	"applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit",
	"prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase", "post-checkout", "post-merge",
	"pre-push", "pre-receive", "update", "proc-receive", "post-receive", "post-update",
	"reference-transaction", "push-to-checkout", "pre-auto-gc", "post-rewrite",
	"sendemail-validate", "fsmonitor-watchman", "post-index-change",
}

// logger writes an executable script at path that appends name and its
// arguments to log.
func logger(t *testing.T, path, name, log string) {
	t.Helper()
	write(t, path, "#!/bin/sh\necho \""+name+" $*\" >>'"+log+"'\n")
	if err := os.Chmod(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

// ran returns what the hooks and the fsmonitor program logged since the
// last call, and empties the log.
func ran(t *testing.T, log string) string {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	os.Remove(log)
	return string(b)
}

// Every call but a checkout runs with hooks and the fsmonitor off: a hook
// of every name in the common git dir and a core.fsmonitor program in the
// repository's configuration run for none of them. The checkouts (worktree
// add, checkout) run the hooks, as git would, and no fsmonitor program.
func TestHooksRunOnlyForCheckouts(t *testing.T) {
	dir, r := newRepo(t)
	log := filepath.Join(tempDir(t), "ran")
	for _, name := range hookNames {
		logger(t, filepath.Join(dir, ".git", "hooks", name), name, log)
	}
	monitor := filepath.Join(tempDir(t), "fsmonitor")
	logger(t, monitor, "fsmonitor", log)
	gitT(t, dir, "config", "core.fsmonitor", monitor)
	// The setup's own git (not the code under test) runs them: the hooks
	// and the program are live.
	gitT(t, dir, "status", "--porcelain")
	if got := ran(t, log); !strings.Contains(got, "fsmonitor") {
		t.Fatalf("git status here did not run the fsmonitor program (log %q): the test shows nothing", got)
	}
	gitT(t, dir, "branch", "probe")
	gitT(t, dir, "branch", "-D", "probe")
	if got := ran(t, log); !strings.Contains(got, "reference-transaction") {
		t.Fatalf("git branch here did not run reference-transaction (log %q): the test shows nothing", got)
	}
	write(t, filepath.Join(dir, "README"), "changed\n")
	write(t, filepath.Join(dir, "new file"), "untracked\n")

	head, err := r.ResolveCommit("HEAD")
	if err != nil {
		t.Fatal(err)
	}
	wt := filepath.Join(tempDir(t), "wt")
	quiet := []struct {
		name string
		call func() error
	}{
		{"Open", func() error { _, err := Open(dir); return err }},
		{"CommonDir", func() error { _, err := r.revParsePath("--git-common-dir"); return err }},
		{"GitDir", func() error { _, err := r.GitDir(); return err }},
		{"ResolveCommit", func() error { _, err := r.ResolveCommit("main"); return err }},
		{"CheckBranchName", func() error { return r.CheckBranchName("fine") }},
		{"Worktrees", func() error { _, err := r.Worktrees(); return err }},
		{"LsFiles", func() error { _, err := r.LsFiles(""); return err }},
		{"LsTree", func() error { _, err := r.LsTree(head); return err }},
		{"TreesDiffer", func() error { _, err := r.TreesDiffer(head, head); return err }},
		{"Dirty", func() error { _, err := r.Dirty(""); return err }},
		{"Untracked", func() error { _, err := r.Untracked(dir, "."); return err }},
		{"Ignored", func() error { _, err := r.Ignored(dir, "README"); return err }},
		{"Exclude", func() error { return r.Exclude("/target") }},
		{"update-index --refresh", func() error { _, err := r.Run("", "update-index", "-q", "--refresh"); return err }},
		{"status (index refreshed)", func() error { _, err := r.Run("", "status", "--porcelain"); return err }},
		{"branch", func() error { _, err := r.Run("", "branch", "side", head); return err }},
		{"update-ref", func() error { _, err := r.Run("", "update-ref", "refs/kept/x", head); return err }},
		{"branch -D", func() error { _, err := r.Run("", "branch", "-D", "--", "side"); return err }},
		{"HooksPath", func() error { _, err := r.HooksPath(); return err }},
	}
	for _, c := range quiet {
		if err := c.call(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := ran(t, log); got != "" {
			t.Errorf("%s ran repository code:\n%s", c.name, got)
		}
	}

	// The checkouts run the hooks git runs for them.
	checkout := []struct {
		name string
		call func() error
	}{
		{"WorktreeAddBranch", func() error { return r.WorktreeAddBranch(wt, "agent", head) }},
		{"CheckoutDetached", func() error { return r.CheckoutDetached(wt, head) }},
		{"WorktreeAddDetached", func() error { return r.WorktreeAddDetached(wt+"2", head) }},
	}
	for _, c := range checkout {
		if err := c.call(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := ran(t, log)
		if !strings.Contains(got, "post-checkout ") {
			t.Errorf("%s did not run post-checkout:\n%s", c.name, got)
		}
		if strings.Contains(got, "fsmonitor ") {
			t.Errorf("%s ran the fsmonitor program:\n%s", c.name, got)
		}
	}

	// And the worktree calls that check nothing out run none.
	more := []struct {
		name string
		call func() error
	}{
		{"Dirty of a linked worktree", func() error { _, err := r.Dirty(wt); return err }},
		{"WorktreeLock", func() error { return r.WorktreeLock(wt, "test") }},
		{"FindWorktree", func() error { _, _, err := r.FindWorktree(wt); return err }},
		{"WorktreeUnlock", func() error { return r.WorktreeUnlock(wt) }},
		{"WorktreeMove", func() error { return r.WorktreeMove(wt, wt+"-moved") }},
		{"WorktreeRemove", func() error { return r.WorktreeRemove(wt + "-moved") }},
	}
	for _, c := range more {
		if err := c.call(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := ran(t, log); got != "" {
			t.Errorf("%s ran repository code:\n%s", c.name, got)
		}
	}
}

// A relative core.hooksPath names a directory of each worktree's own
// checkout. git takes it from the worktree it runs in, so `git worktree
// add` run from an agent's worktree would run hooks any build of that
// agent can write; Ferry's checkouts run the hooks of the tree they check
// out, committed, wherever Ferry runs.
func TestCheckoutRunsItsOwnTreesHooks(t *testing.T) {
	dir, _ := newRepo(t)
	log := filepath.Join(tempDir(t), "ran")
	logger(t, filepath.Join(dir, "githooks", "post-checkout"), "committed", log)
	gitT(t, dir, "add", "githooks")
	gitT(t, dir, "commit", "-q", "-m", "hooks")
	gitT(t, dir, "config", "core.hooksPath", "githooks")
	agent := filepath.Join(tempDir(t), "agent")
	gitT(t, dir, "worktree", "add", "-q", "-b", "agent", agent)
	ran(t, log)
	// A build in the agent rewrites the hook in its worktree.
	logger(t, filepath.Join(agent, "githooks", "post-checkout"), "planted", log)
	// git itself, run there, runs the planted hook for a new worktree.
	gitT(t, agent, "worktree", "add", "-q", "--detach", filepath.Join(tempDir(t), "plain"))
	if got := ran(t, log); !strings.Contains(got, "planted") {
		t.Fatalf("git worktree add from the agent ran %q, not the planted hook: the test shows nothing", got)
	}

	r, err := Open(agent)
	if err != nil {
		t.Fatal(err)
	}
	head, err := r.ResolveCommit("HEAD")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		call func(path string) error
	}{
		{"WorktreeAddBranch", func(p string) error { return r.WorktreeAddBranch(p, "sub", head) }},
		{"WorktreeAddDetached", func(p string) error { return r.WorktreeAddDetached(p, head) }},
	} {
		if err := c.call(filepath.Join(tempDir(t), c.name)); err != nil {
			t.Fatal(err)
		}
		if got := ran(t, log); !strings.Contains(got, "committed") || strings.Contains(got, "planted") {
			t.Errorf("%s from the agent's worktree ran %q, want the committed hook of the new checkout only", c.name, got)
		}
	}
}
