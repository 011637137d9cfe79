package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/lock"
)

// AdoptPending adopts (Adopt) every worktree a hook left cold while no base
// was ready (agent.Pending), now that one is: each that still exists and
// has not built yet becomes an agent and is announced; one that went, built
// on its own or is refused is dropped, and said on the log. A worktree that
// still finds no base stays pending.
func AdoptPending(a Announcer, e Env) []*agent.Adoption {
	all, err := agent.PendingAll(e.Store)
	if err != nil {
		e.Logf("pending adoptions: %v", err)
		return nil
	}
	var out []*agent.Adoption
	for _, p := range all {
		if _, err := os.Stat(p.Worktree); errors.Is(err, fs.ErrNotExist) {
			agent.DropPending(e.Store, p.Worktree)
			continue
		}
		ad, err := Adopt(a, agent.AdoptOptions{Repo: e.Repo, Settings: e.Settings, Store: e.Store,
			Path: p.Worktree, Name: "", Tool: p.Tool, Session: p.Session})
		if err != nil && failure.KindOf(err) == failure.Refused && errors.Is(err, agent.ErrNoBase) {
			continue // still none: keep it for the next base
		}
		agent.DropPending(e.Store, p.Worktree)
		if err != nil {
			e.Logf("not adopting %s, which %s made while no base was ready: %v", p.Worktree, p.Tool, err)
			continue
		}
		e.Logf("adopted %s as agent %s (made by %s while no base was ready): its next build is warm", p.Worktree, ad.Name, p.Tool)
		out = append(out, ad)
	}
	return out
}

// AskForBase asks for a base of commit for a worktree left cold: when a
// pipeline runs (ferry-watch holds the store's watch lock) it announces the
// commit as seen, which the builder builds; otherwise it starts `ferry
// base --rev commit` in the background, detached, its output in the
// store's tmp/, unless a build of the store is running already. It says
// what it did.
func AskForBase(e Env, ferry, commit string) (string, error) {
	if held, err := lock.Held(e.Store.WatchLockPath()); err == nil && held {
		Emit(e, "ferry-hook", &events.CommitSeen{Commit: commit})
		return "announced commit " + commit[:12] + " to the running pipeline (ferry up), which builds its base", nil
	}
	if err := os.MkdirAll(e.Store.TmpDir(), 0o755); err != nil {
		return "", err
	}
	logPath := filepath.Join(e.Store.TmpDir(), "base-"+commit[:12]+".log")
	// One background build per commit: the log file is its lock.
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return "", err
	}
	defer logf.Close()
	if err := syscall.Flock(int(logf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return "a base build of " + commit[:12] + " is running already (" + logPath + ")", nil
	}
	fmt.Fprintf(logf, "%s: building the base of %s for a worktree a hook made cold\n", time.Now().UTC().Format(time.RFC3339), commit[:12])
	cmd := exec.CommandContext(context.Background(), ferry, "base", "--rev", commit)
	cmd.Dir = e.Repo.Top
	cmd.Env = git.HookEnviron()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{logf} // holds the lock for as long as the build runs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start ferry base in the background: %w", err)
	}
	cmd.Process.Release()
	return "started `ferry base --rev " + commit[:12] + "` in the background (log: " + logPath + ")", nil
}
