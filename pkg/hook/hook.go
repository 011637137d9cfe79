// Package hook connects agent tools that create worktrees themselves to
// Ferry: Claude Code's WorktreeCreate, WorktreeRemove and SessionStart
// hooks, and the settings entries that install them.
//
// Claude Code makes worktrees for `claude --worktree NAME`, for its
// EnterWorktree tool and for subagents isolated in a worktree. With
// Ferry's WorktreeCreate hook installed, each of those is a Ferry agent
// instead (a worktree with a fork of the warm base, whose first cargo
// build reuses the base), recorded with the tool and the session it was
// made for; WorktreeRemove removes it again when that loses nothing; and
// SessionStart puts Ferry's cargo shim first on PATH for the shell
// commands of a session working in an agent's worktree.
//
// The hooks read Claude Code's JSON payload (Payload). Its fields have
// been spelled differently across Claude Code versions and documentation
// revisions; ParsePayload accepts every spelling known (see Payload), and
// ignores what it does not know.
//
// Like every library package, this one never prints: the command layer
// (`ferry hook`, package ferrycmd) writes what the tool reads on stdout
// and everything else on stderr.
package hook

import (
	"encoding/json"
	"errors"
	"io"
	"path/filepath"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/failure"
)

// Tool is the agent tool these hooks serve, as agent records name it.
const Tool = "claude-code"

// Claude Code's hook events Ferry answers.
const (
	EventWorktreeCreate = "WorktreeCreate"
	EventWorktreeRemove = "WorktreeRemove"
	EventSessionStart   = "SessionStart"
	// EventCwdChanged fires when a session's working directory changes
	// (a `cd`, EnterWorktree); its cwd is the new directory, and it gets
	// CLAUDE_ENV_FILE as SessionStart does (Claude Code 2.1.83 and later).
	EventCwdChanged = "CwdChanged"
)

// Events are the events Ferry installs hooks for, in the order it adds them.
var Events = []string{EventWorktreeCreate, EventWorktreeRemove, EventSessionStart, EventCwdChanged}

// Payload is a hook's input: one JSON object Claude Code writes on the
// hook's stdin.
//
// Every event carries session_id, transcript_path, cwd and hook_event_name
// (the hooks reference, https://code.claude.com/docs/en/hooks, "Common
// input fields"). What else WorktreeCreate and WorktreeRemove carry has
// been documented one way and sent another, so every spelling found is
// accepted:
//
//   - the name of the worktree: `name`, what Claude Code sends (payloads
//     captured from 2.1.165 and 2.1.207 in anthropics/claude-code issues
//     #65646 and #77566); `worktree_name`, with `source_ref` and
//     `base_path`, as the hooks reference gave it in June 2026 (quoted in
//     #65646); `worktree_path` alone, a path whose last element is then
//     the name, as the reference gave it in July 2026 (quoted in #77566);
//     and, from third-party hooks written against other builds and not
//     seen in the reference, `branch_name` and a `worktree` object (name,
//     path, branch, originalRepoDir);
//   - where the worktree starts, when said at all: `base_commit`,
//     `base_ref` or `source_ref` (`base_path` is a directory for the
//     worktree, not a revision, and is not used);
//   - the worktree to remove: `worktree_path` (the reference and every
//     captured payload), or, accepted defensively, `path` or
//     `worktree.path`.
type Payload struct {
	Event      string `json:"hook_event_name"`
	SessionID  string `json:"session_id"`
	Cwd        string `json:"cwd"`
	Transcript string `json:"transcript_path"`
	Source     string `json:"source"` // SessionStart: startup, resume, clear or compact

	Name         string `json:"name"`
	WorktreeName string `json:"worktree_name"`
	BranchName   string `json:"branch_name"`
	WorktreePath string `json:"worktree_path"`
	Path         string `json:"path"`
	BaseCommit   string `json:"base_commit"`
	BaseRef      string `json:"base_ref"`
	SourceRef    string `json:"source_ref"`
	Worktree     *struct {
		Name            string `json:"name"`
		Path            string `json:"path"`
		Branch          string `json:"branch"`
		OriginalRepoDir string `json:"originalRepoDir"`
	} `json:"worktree"`
}

// ParsePayload reads one JSON object from r. It stops at the end of the
// object: a tool that keeps stdin open does not make the hook wait.
func ParsePayload(r io.Reader) (*Payload, error) {
	var p Payload
	dec := json.NewDecoder(r)
	if err := dec.Decode(&p); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, failure.New(failure.Usage, "Claude Code runs this command with the event's JSON on stdin; install it with `ferry hook claude-code install`",
				"no hook payload on stdin")
		}
		return nil, failure.Wrap(failure.Usage, err, "Claude Code runs this command with the event's JSON on stdin; install it with `ferry hook claude-code install`",
			"bad hook payload on stdin")
	}
	return &p, nil
}

// CheckEvent refuses a payload that names another event than the hook
// was installed for.
func (p *Payload) CheckEvent(event string) error {
	if p.Event != "" && p.Event != event {
		return failure.New(failure.Usage, "install the hooks again with `ferry hook claude-code install`",
			"the payload is for %s, but this is the %s hook", p.Event, event)
	}
	return nil
}

// NameAsked is the name the tool gave the worktree to create, and the
// field it came from ("" when the payload names none).
func (p *Payload) NameAsked() (name, field string) {
	switch {
	case p.Name != "":
		return p.Name, "name"
	case p.WorktreeName != "":
		return p.WorktreeName, "worktree_name"
	case p.BranchName != "":
		return p.BranchName, "branch_name"
	case p.Worktree != nil && p.Worktree.Name != "":
		return p.Worktree.Name, "worktree.name"
	case p.WorktreePath != "":
		return filepath.Base(filepath.Clean(p.WorktreePath)), "worktree_path"
	case p.Worktree != nil && p.Worktree.Path != "":
		return filepath.Base(filepath.Clean(p.Worktree.Path)), "worktree.path"
	}
	return "", ""
}

// Start is the revision the worktree is to start at, or "" for the
// repository's HEAD.
func (p *Payload) Start() string {
	for _, s := range []string{p.BaseCommit, p.BaseRef, p.SourceRef} {
		if s != "" {
			return s
		}
	}
	return ""
}

// RemovePath is the path of the worktree to remove.
func (p *Payload) RemovePath() string {
	switch {
	case p.WorktreePath != "":
		return p.WorktreePath
	case p.Path != "":
		return p.Path
	case p.Worktree != nil:
		return p.Worktree.Path
	}
	return ""
}

// Dirs are the directories to find the repository in, best first: the
// payload's cwd, the repository a worktree object names, then those the
// caller adds (Claude Code's CLAUDE_PROJECT_DIR, the hook's working
// directory). Empty ones are left out.
func (p *Payload) Dirs(more ...string) []string {
	var out []string
	add := func(d string) {
		if d == "" {
			return
		}
		for _, o := range out {
			if o == d {
				return
			}
		}
		out = append(out, d)
	}
	add(p.Cwd)
	if p.Worktree != nil {
		add(p.Worktree.OriginalRepoDir)
	}
	for _, d := range more {
		add(d)
	}
	return out
}

// AgentName makes name fit agent.CheckName (agent.CleanName); a name
// that leaves nothing is "claude-" and the first 8 characters of session
// (or "claude"). n > 1 appends "-n".
func AgentName(name, session string, n int) string {
	fallback := "claude"
	if s := agent.CleanName(session, "", 1); s != "" {
		if len(s) > 8 {
			s = agent.CleanName(s[:8], "", 1)
		}
		fallback = "claude-" + s
	}
	return agent.CleanName(name, fallback, n)
}
