// Package watch polls a git ref and decides when a commit deserves a base.
//
// A commit is announced once it has been seen on two polls in a row (a ref
// that moves twice within one interval is not built twice), unless it is the
// commit of the current base at startup or the last commit built or failed:
// a failed commit is not retried until the ref moves. Polls are skipped
// while the watcher's worktree is in the middle of a rebase, merge,
// cherry-pick, revert or bisect, whose intermediate commits are not worth a
// build. One git rev-parse per poll; the store is not touched.
package watch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/store"
)

// Options configure a Watcher.
type Options struct {
	Repo     *git.Repo
	Rev      string        // the ref to follow; default HEAD
	Interval time.Duration // default 2s
	// Skip is the commit of the current base at startup: already built.
	Skip string
	// Announce is called, from Run's goroutine, with each commit to build.
	Announce func(commit string) error
	// Log receives one line per notable decision; may be nil.
	Log func(format string, args ...any)
}

// Watcher is the poller's state.
type Watcher struct {
	o         Options
	gitDir    string
	mu        sync.Mutex
	prev      string // the commit of the previous poll
	announced string // the last commit announced
	handled   string // the last commit built or failed
}

// New checks that the ref names a commit and returns a watcher.
func New(o Options) (*Watcher, error) {
	if o.Rev == "" {
		o.Rev = "HEAD"
	}
	if o.Interval <= 0 {
		o.Interval = 2 * time.Second
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if _, err := o.Repo.ResolveCommit(o.Rev); err != nil {
		return nil, err
	}
	gitDir, err := o.Repo.GitDir()
	if err != nil {
		return nil, err
	}
	return &Watcher{o: o, gitDir: gitDir}, nil
}

// Handled records that commit was built or failed, so it is not announced
// again until the ref moves away and back.
func (w *Watcher) Handled(commit string) {
	w.mu.Lock()
	w.handled = commit
	w.mu.Unlock()
}

// Busy names the git operation in progress in the watched worktree, or "".
func Busy(gitDir string) string {
	for _, p := range []struct{ file, op string }{
		{"rebase-merge", "rebase"}, {"rebase-apply", "rebase"}, {"MERGE_HEAD", "merge"},
		{"CHERRY_PICK_HEAD", "cherry-pick"}, {"REVERT_HEAD", "revert"}, {"BISECT_LOG", "bisect"},
	} {
		if _, err := os.Lstat(filepath.Join(gitDir, p.file)); err == nil {
			return p.op
		}
	}
	return ""
}

// Poll runs one poll and returns the commit it announced, or "".
func (w *Watcher) Poll() (string, error) {
	if op := Busy(w.gitDir); op != "" {
		w.o.Log("watch: %s in progress; poll skipped", op)
		return "", nil
	}
	c, err := w.o.Repo.ResolveCommit(w.o.Rev)
	if err != nil {
		w.o.Log("watch: %v", err)
		return "", nil // a ref deleted for a moment is not fatal
	}
	w.mu.Lock()
	prev := w.prev
	w.prev = c
	stable := c == prev
	skip := c == w.announced || c == w.handled || c == w.o.Skip
	w.mu.Unlock()
	if !stable || skip {
		return "", nil
	}
	if err := w.o.Announce(c); err != nil {
		return "", err
	}
	w.mu.Lock()
	w.announced = c
	w.mu.Unlock()
	return c, nil
}

// Run polls every interval until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.o.Interval)
	defer t.Stop()
	for {
		if _, err := w.Poll(); err != nil {
			w.o.Log("watch: announce: %v", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// TakeLock takes watch.lock, refusing when another watcher holds it.
func TakeLock(s *store.Store) (*lock.Lock, error) {
	l, err := lock.TryTake(s.WatchLockPath())
	if err == lock.ErrBusy {
		pid := lock.Owner(s.WatchLockPath())
		return nil, failure.New(failure.Refused,
			fmt.Sprintf("stop it first (kill %d), or let it keep watching", pid),
			"another watcher (pid %d) is watching this repository", pid)
	}
	if err != nil {
		return nil, err
	}
	if err := l.WriteOwner(); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}
