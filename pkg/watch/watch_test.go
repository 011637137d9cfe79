package watch

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/store"
)

func gitRepo(t *testing.T) (*git.Repo, func(args ...string) string) {
	t.Helper()
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		c := exec.Command("git", args...)
		c.Dir = dir
		c.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("init", "-q", "-b", "main")
	run("commit", "-q", "--allow-empty", "-m", "one")
	r, err := git.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r, run
}

func TestAnnouncesStableCommitsOnce(t *testing.T) {
	repo, run := gitRepo(t)
	var got []string
	w, err := New(Options{Repo: repo, Skip: run("rev-parse", "HEAD"), Announce: func(c string) error { got = append(got, c); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	poll := func() string {
		t.Helper()
		c, err := w.Poll()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// The current base's commit is never announced.
	poll()
	if c := poll(); c != "" {
		t.Fatalf("announced the startup base's commit %s", c)
	}
	run("commit", "-q", "--allow-empty", "-m", "two")
	two := run("rev-parse", "HEAD")
	if c := poll(); c != "" {
		t.Fatal("announced a commit seen on one poll only")
	}
	if c := poll(); c != two {
		t.Fatalf("second poll announced %q, want %s", c, two)
	}
	if c := poll(); c != "" {
		t.Fatal("announced the same commit twice")
	}
	// A ref that moves on every poll is never announced.
	run("commit", "-q", "--allow-empty", "-m", "three")
	poll()
	run("commit", "-q", "--allow-empty", "-m", "four")
	if c := poll(); c != "" {
		t.Fatal("announced a commit the ref already left")
	}
	four := run("rev-parse", "HEAD")
	// A failed commit is not retried until the ref moves.
	w.Handled(four)
	if c := poll(); c != "" {
		t.Fatal("announced a commit already built or failed")
	}
	if len(got) != 1 || got[0] != two {
		t.Fatalf("announced %v", got)
	}
}

func TestSkipsPollsDuringGitOperations(t *testing.T) {
	repo, run := gitRepo(t)
	w, err := New(Options{Repo: repo, Announce: func(string) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	gitDir, _ := repo.GitDir()
	for _, f := range []string{"MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "BISECT_LOG", "rebase-merge"} {
		p := filepath.Join(gitDir, f)
		os.WriteFile(p, []byte(run("rev-parse", "HEAD")+"\n"), 0o644)
		w.Poll()
		if c, _ := w.Poll(); c != "" {
			t.Fatalf("announced during %s", f)
		}
		os.Remove(p)
	}
	w.Poll()
	if c, _ := w.Poll(); c == "" {
		t.Fatal("nothing announced after the operation ended")
	}
}

func TestRefusesRevisionWithoutCommit(t *testing.T) {
	repo, _ := gitRepo(t)
	_, err := New(Options{Repo: repo, Rev: "no-such-ref", Announce: func(string) error { return nil }})
	if failure.KindOf(err) != failure.Usage {
		t.Fatalf("err = %v, want a usage error", err)
	}
}

func TestSecondWatcherRefusedNamingHolder(t *testing.T) {
	s := &store.Store{Dir: t.TempDir()}
	l, err := TakeLock(s)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	_, err = TakeLock(s)
	if failure.KindOf(err) != failure.Refused || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("err = %v, want a refusal naming pid %d", err, os.Getpid())
	}
}
