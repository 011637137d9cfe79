package hook

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
)

// gitRepo makes a repository with one commit and branches a and b.
func gitRepo(t *testing.T) *git.Repo {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", dir},
		{"-C", dir, "commit", "-q", "--allow-empty", "-m", "one"},
		{"-C", dir, "branch", "a"},
		{"-C", dir, "branch", "b"},
	} {
		if out, err := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	repo, err := git.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// fakeFerry is a "ferry" that records its arguments, for the hook to run.
func fakeFerry(t *testing.T, log string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ferry")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho \"ferry $*\" >> "+log+"\nexit 9\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func gitIn(t *testing.T, dir string, args ...string) (string, int) {
	t.Helper()
	c := exec.Command("git", append([]string{"-C", dir}, args...)...)
	out, err := c.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// Installed over a hook that was there, Ferry's hook runs ferry only for
// git worktree add, runs the old hook after it with git's arguments, exits
// with the old hook's status (ferry's own failure does not count), and
// uninstalling puts the old hook back byte for byte. Installing twice
// changes nothing.
func TestGitHookChainsAndUninstalls(t *testing.T) {
	repo := gitRepo(t)
	dir, err := GitHooksDir(repo)
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "log")
	old := "#!/bin/sh\necho \"old $*\" >> " + log + "\nexit 3\n"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, GitHook), []byte(old), 0o755); err != nil {
		t.Fatal(err)
	}
	ferry := fakeFerry(t, log)
	ed, err := InstallGit(dir, ferry, false)
	if err != nil || !ed.Changed || ed.Action != "installed" || ed.Chained != filepath.Join(dir, GitHook+chainedSuffix) {
		t.Fatalf("install: %+v %v", ed, err)
	}
	if again, err := InstallGit(dir, ferry, false); err != nil || again.Changed {
		t.Fatalf("install again: %+v %v", again, err)
	}
	if !GitInstalled(dir) {
		t.Fatal("GitInstalled: false after install")
	}

	// A branch switch: the old hook only, its failure the checkout's.
	if out, code := gitIn(t, repo.Top, "checkout", "-q", "a"); code == 0 {
		t.Fatalf("checkout a: exit 0, want the old hook's failure\n%s", out)
	}
	data, _ := os.ReadFile(log)
	if strings.Contains(string(data), "ferry") || !strings.Contains(string(data), "old ") || !strings.HasSuffix(strings.TrimSpace(string(data)), " 1") {
		t.Fatalf("after a branch switch the log is\n%s", data)
	}
	os.Remove(log)

	// git worktree add: ferry with git's arguments, then the old hook.
	wt := filepath.Join(t.TempDir(), "wt")
	out, code := gitIn(t, repo.Top, "worktree", "add", "-q", "--detach", wt, "b")
	if code == 0 {
		t.Fatalf("worktree add: exit 0, want the old hook's failure\n%s", out)
	}
	// Run as git runs it, the hook's status is exactly the old hook's.
	hook := exec.Command(filepath.Join(dir, GitHook), strings.Repeat("0", 40), strings.Repeat("1", 40), "1")
	hook.Dir = wt
	if err := hook.Run(); err == nil || err.(*exec.ExitError).ExitCode() != 3 {
		t.Fatalf("the hook run directly: %v, want exit 3", err)
	}
	data, _ = os.ReadFile(log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "ferry hook git post-checkout 0000000000000000000000000000000000000000 ") || !strings.HasPrefix(lines[1], "old 0000000000000000000000000000000000000000 ") {
		t.Fatalf("after git worktree add the log is\n%s", data)
	}

	ed, err = UninstallGit(dir, false)
	if err != nil || ed.Action != "restored" {
		t.Fatalf("uninstall: %+v %v", ed, err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, GitHook)); string(got) != old {
		t.Fatalf("the old hook came back as\n%s", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, GitHook+chainedSuffix)); err == nil {
		t.Fatal("the kept copy is still there")
	}
	if ed, err := UninstallGit(dir, false); err != nil || ed.Changed {
		t.Fatalf("uninstall again: %+v %v", ed, err)
	}
}

// Without a hook before it, uninstalling removes Ferry's; with
// core.hooksPath absolute the hook goes there, and a relative one is
// refused with the line to add.
func TestGitHookPlace(t *testing.T) {
	repo := gitRepo(t)
	abs := t.TempDir()
	if _, err := repo.Run("", "config", "core.hooksPath", abs); err != nil {
		t.Fatal(err)
	}
	dir, err := GitHooksDir(repo)
	if err != nil || dir != abs {
		t.Fatalf("hooks dir %q (%v), want %q", dir, err, abs)
	}
	if dry, err := InstallGit(dir, "/opt/ferry/bin/ferry", true); err != nil || !dry.Changed || GitInstalled(dir) {
		t.Fatalf("dry run: %+v %v (installed %v)", dry, err, GitInstalled(dir))
	}
	if _, err := InstallGit(dir, "/opt/ferry/bin/ferry", false); err != nil {
		t.Fatal(err)
	}
	// Another ferry: the hook is pointed at it.
	if ed, err := InstallGit(dir, "/usr/local/bin/ferry", false); err != nil || ed.Action != "updated" {
		t.Fatalf("install of another ferry: %+v %v", ed, err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, GitHook)); !strings.Contains(string(data), "/usr/local/bin/ferry hook git") {
		t.Fatalf("hook:\n%s", data)
	}
	if ed, err := UninstallGit(dir, false); err != nil || ed.Action != "removed" {
		t.Fatalf("uninstall: %+v %v", ed, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, GitHook)); err == nil {
		t.Fatal("uninstall left the hook")
	}

	if _, err := repo.Run("", "config", "core.hooksPath", ".husky"); err != nil {
		t.Fatal(err)
	}
	_, err = GitHooksDir(repo)
	if failure.KindOf(err) != failure.Refused || !strings.Contains(failure.HintOf(err), "ferry hook git post-checkout") {
		t.Fatalf("relative core.hooksPath: %v (hint %q)", err, failure.HintOf(err))
	}
}
