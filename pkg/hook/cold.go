package hook

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/pipeline"
)

// Hooks never block the tool. When a hook cannot give a warm agent for a
// reason that is not the user's (no base yet, the first base still
// building, a host that blocks the sandbox, a full store), the tool still
// gets its worktree, cold, as it would have made it itself; the hook says
// why on stderr and, when only a base is missing, asks for it
// (pipeline.AskForBase) and leaves the worktree pending: the builder adopts
// it once the base is ready, if it has not built by then. Bad input (a
// payload without what the hook needs, a path that is no worktree) is
// still refused.

// Cold is a worktree a hook left without an agent, and why.
type Cold struct {
	Path    string `json:"path"`
	Branch  string `json:"branch,omitempty"`
	Why     string `json:"why"`
	Asked   string `json:"asked,omitempty"` // how the missing base was asked for
	Pending bool   `json:"pending"`         // adopted once a base is ready
}

// Message is Cold said in one line for the tool's log.
func (c *Cold) Message() string {
	msg := fmt.Sprintf("%s builds cold: %s", c.Path, c.Why)
	if c.Asked != "" {
		msg += "; " + c.Asked
	}
	if c.Pending {
		msg += "; it becomes a warm agent once the base is ready, if it has not built by then"
	}
	return msg
}

// ColdWorthy reports whether err, from a spawn or an adoption, is one the
// tool should not pay for: anything but bad input.
func ColdWorthy(err error) bool { return failure.KindOf(err) != failure.Usage }

// Defer is what a hook does with a worktree at path, made by tool, that
// could not become an agent because of err: when err is the missing base,
// it records the worktree as pending and asks for the base.
func Defer(e Env, path, tool, session, commit string, err error) *Cold {
	c := &Cold{Path: path, Why: err.Error()}
	if h := failure.HintOf(err); h != "" && !errors.Is(err, agent.ErrNoBase) {
		c.Why += " (" + h + ")"
	}
	if !errors.Is(err, agent.ErrNoBase) {
		return c
	}
	c.Why = "no base is ready yet"
	if perr := agent.AddPending(e.Store, agent.Pending{Worktree: path, Tool: tool, Session: session, Commit: commit}); perr != nil {
		c.Why += fmt.Sprintf(" (and it could not be recorded for adoption: %v)", perr)
		return c
	}
	c.Pending = true
	if commit == "" || e.Ferry == "" {
		return c
	}
	asked, aerr := pipeline.AskForBase(e.Env, e.Ferry, commit)
	if aerr != nil {
		c.Asked = fmt.Sprintf("could not ask for its base (%v): run `ferry base`", aerr)
	} else {
		c.Asked = asked
	}
	return c
}

// claudeWorktree makes the worktree Claude Code makes without a
// WorktreeCreate hook: <repo>/.claude/worktrees/<name> on a new branch
// worktree-<name>, starting at start (HEAD when empty), "-2", "-3" …
// appended to name while the path or the branch is taken. The directory is
// ignored through the repository's info/exclude, as Claude Code's
// documentation asks of the user.
func claudeWorktree(e Env, name, start string) (path, branch, commit string, err error) {
	if start == "" {
		start = "HEAD"
	}
	if commit, err = e.Repo.ResolveCommit(start); err != nil {
		return "", "", "", err
	}
	if err := e.Repo.Exclude("/" + config.RepoWorktrees + "/"); err != nil {
		return "", "", "", err
	}
	for n := 1; n <= maxTries; n++ {
		nm := agent.CleanName(name, "worktree", n)
		path = filepath.Join(e.Repo.Top, filepath.FromSlash(config.RepoWorktrees), nm)
		branch = "worktree-" + nm
		if _, err := os.Lstat(path); err == nil {
			continue
		}
		if _, err := e.Repo.Run("", "show-ref", "--verify", "--quiet", "refs/heads/"+branch); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return "", "", "", err
		}
		if err := e.Repo.WorktreeAddBranch(path, branch, commit); err != nil {
			return "", "", "", err
		}
		return path, branch, commit, nil
	}
	return "", "", "", failure.New(failure.Refused, "remove worktrees you no longer need", "no free worktree name for %q under %s", name, config.RepoWorktrees)
}
