package hook

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/pipeline"
	"github.com/ferrydev/ferry/pkg/store"
)

// Env is what a hook works on: the repository the payload points at, its
// settings and store (pipeline.Env), who announces the change, and where
// spawn's progress goes.
type Env struct {
	pipeline.Env
	Announcer pipeline.Announcer
	Progress  io.Writer
	// Ferry is the ferry binary a hook starts to build a missing base
	// (see Defer); empty: none is started.
	Ferry string
	// Place are files WorktreeCreate places in the worktrees it makes
	// for the session (SettingsCopy).
	Place []agent.Placed
}

// maxTries bounds the names Create tries when the one it chose is taken.
const maxTries = 100

// Create makes the agent a WorktreeCreate payload asks for, through
// pipeline.Spawn (so agent.spawned is announced): named after the
// worktree name the payload gives (AgentName; "-2", "-3" … appended while
// an agent, a branch or a worktree directory has the name), starting at
// the payload's base revision or else the repository's HEAD, at Ferry's
// worktree path (a path the payload proposes is not used: the tool is
// told where the worktree is), and recorded with Tool and the session id.
//
// When no agent can be made for a reason that is not the user's (see
// Defer), Create makes the worktree as Claude Code would without the hook
// and returns it as Cold, with a nil error.
func Create(e Env, p *Payload) (*agent.Record, *Cold, error) {
	if err := p.CheckEvent(EventWorktreeCreate); err != nil {
		return nil, nil, err
	}
	r, err := create(e, p)
	if err == nil || !ColdWorthy(err) {
		return r, nil, err
	}
	want, _ := p.NameAsked()
	path, branch, commit, cerr := claudeWorktree(e, AgentName(want, p.SessionID, 1), p.Start())
	if cerr != nil {
		return nil, nil, errors.Join(err, fmt.Errorf("and the worktree could not be made without Ferry: %w", cerr))
	}
	// The tool's worktree, as Claude Code makes its own: with the local
	// settings it copies into them (SettingsCopy), left to the tool.
	for _, f := range e.Place {
		dst := filepath.Join(path, filepath.FromSlash(f.Rel))
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err == nil {
			os.WriteFile(dst, f.Data, 0o600)
		}
	}
	c := Defer(e, path, Tool, p.SessionID, commit, err)
	c.Branch = branch
	return nil, c, nil
}

func create(e Env, p *Payload) (*agent.Record, error) {
	want, _ := p.NameAsked()
	failed := 0
	for n := 1; n <= maxTries; n++ {
		name := AgentName(want, p.SessionID, n)
		if t, err := taken(e, name); err != nil {
			return nil, err
		} else if t {
			continue
		}
		r, err := pipeline.Spawn(e.Announcer, agent.SpawnOptions{
			Repo: e.Repo, Settings: e.Settings, Store: e.Store,
			Name: name, From: p.Start(), Tool: Tool, Session: p.SessionID,
			Place: e.Place, Progress: e.Progress,
		})
		if err == nil {
			return r, nil
		}
		// Another hook took the name between the check and the spawn
		// (subagents start together): try the next one.
		if failure.KindOf(err) == failure.Refused && failed < 10 {
			if t, terr := taken(e, name); terr == nil && t {
				failed++
				continue
			}
		}
		return nil, err
	}
	return nil, failure.New(failure.Refused, "remove agents you no longer need with `ferry rm`, or name the worktree differently",
		"no free agent name for %q: %s through %s are taken", want, AgentName(want, p.SessionID, 1), AgentName(want, p.SessionID, maxTries))
}

// taken reports whether spawning agent name would collide with an agent
// (in any state), a branch, or a non-empty directory at its worktree path.
func taken(e Env, name string) (bool, error) {
	if _, err := agent.Read(e.Store, name); err == nil {
		return true, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	branch := e.Settings.BranchPrefix + name
	if e.Repo.CheckBranchName(branch) != nil {
		return true, nil
	}
	if _, err := e.Repo.Run("", "show-ref", "--verify", "--quiet", "refs/heads/"+branch); err == nil {
		return true, nil
	}
	// Where spawn puts the worktree (agent.SpawnOptions.Path's default).
	path := agent.DefaultPath(e.Repo, e.Settings, e.Store, name)
	ents, err := os.ReadDir(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err != nil || len(ents) > 0, nil
}

// Remove removes the agent whose worktree a WorktreeRemove payload names,
// exactly as `ferry rm` without --force would (pipeline.Remove, which
// announces agent.removed), and only an agent a Claude Code hook made.
//
// When removing it would lose work (uncommitted changes, commits no
// branch, tag or remote reaches), or cannot be done now (processes still
// run for it, another agent is nested in it), the agent is kept, whole,
// and the error says why: a Kept error, failure kind Refused. A path that
// holds no worktree and names no agent is already removed: nil, nil. A
// worktree there that is not an agent's is left alone (refused).
func Remove(e Env, p *Payload) (*agent.Removal, error) {
	if err := p.CheckEvent(EventWorktreeRemove); err != nil {
		return nil, err
	}
	path := p.RemovePath()
	if path == "" {
		return nil, failure.New(failure.Usage, "Claude Code sends worktree_path; check that the hook is installed for WorktreeRemove",
			"the payload names no worktree to remove")
	}
	r, err := agentAt(e.Store, path)
	if err != nil {
		return nil, err
	}
	if r == nil {
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, failure.New(failure.Refused, "Ferry removes only the worktrees its hook made; remove this one with `git worktree remove` if it holds nothing you need",
			"%s is not a Ferry agent's worktree; left as it is", path)
	}
	if r.Tool != Tool {
		return nil, kept(r, failure.New(failure.Refused, "",
			"agent %q was made by `ferry spawn`, not by a %s hook", r.Name, Tool))
	}
	rm, err := pipeline.Remove(e.Announcer, e.Env, r.Name, agent.RemoveOptions{})
	if err != nil {
		if failure.KindOf(err) == failure.Refused {
			return nil, kept(r, err)
		}
		return nil, err
	}
	return rm, nil
}

// agentAt returns the agent whose worktree is path (which may no longer
// exist), or nil.
func agentAt(s *store.Store, path string) (*agent.Record, error) {
	all, err := agent.All(s)
	if err != nil {
		return nil, err
	}
	clean := filepath.Clean(path)
	for _, r := range all {
		if filepath.Clean(r.Worktree) == clean || git.SamePath(r.Worktree, clean) {
			return r, nil
		}
	}
	return nil, nil
}

// Kept is an agent the WorktreeRemove hook did not remove, and why (the
// refusal, which Err wraps). Remove returns it as a failure of kind
// Refused whose hint says what the user can do with the agent.
type Kept struct {
	Name, Worktree string
	Err            error
}

func (k *Kept) Error() string {
	return fmt.Sprintf("kept agent %q at %s, removing nothing: %v", k.Name, k.Worktree, k.Err)
}

func (k *Kept) Unwrap() error { return k.Err }

func kept(r *agent.Record, why error) error {
	return failure.Wrap(failure.Refused, &Kept{Name: r.Name, Worktree: r.Worktree, Err: why},
		fmt.Sprintf("it stays for you: `ferry rm %s` once its work is committed and reachable from a branch, tag or remote, or `ferry rm --force %s` to discard its changes (keeping its commits under refs/ferry/orphaned/)", r.Name, r.Name),
		"")
}

// Session is what SessionStart did for a session in an agent's worktree.
type Session struct {
	Agent    string `json:"agent"` // "" in a checkout that is no agent's
	Worktree string `json:"worktree"`
	EnvFile  string `json:"env_file"`
	Line     string `json:"line"`    // the line that puts the shim first on PATH
	Written  bool   `json:"written"` // false: the file held it already
}

// SessionStart puts the shim directory first on PATH for the shell
// commands of a session in a repository Ferry serves (its store exists):
// an agent's worktree, and also its main checkout or another worktree,
// since the session's subagents isolated in worktrees run their commands
// with the session's environment, in agents' worktrees, and no
// SessionStart of their own. It appends an export line to envFile, the
// file Claude Code gives SessionStart hooks (CLAUDE_ENV_FILE) and reads
// before each shell command. Outside agents the shim runs the next cargo
// on PATH unchanged. In a repository Ferry does not serve it does nothing
// and returns nil, nil. Only PATH is set: the shim finds the agent from the
// working directory of each cargo call (invariant 4), never from the
// environment.
func SessionStart(s *store.Store, repo *git.Repo, envFile string) (*Session, error) {
	r, err := agent.FindByWorktree(s, repo.Top)
	if err != nil {
		return nil, err
	}
	sess := &Session{Worktree: repo.Top, EnvFile: envFile}
	if r != nil && r.State == agent.Ready {
		sess.Agent, sess.Worktree = r.Name, r.Worktree
	} else if _, err := os.Stat(s.Dir); err != nil {
		return nil, nil // not a repository Ferry serves
	}
	if envFile == "" {
		return nil, failure.New(failure.Prereq,
			"use a Claude Code that gives SessionStart hooks CLAUDE_ENV_FILE, or have the session run `eval \"$(ferry env)\"` before cargo",
			"CLAUDE_ENV_FILE is not set: cannot put Ferry's cargo shim on the session's PATH in %s", repo.Top)
	}
	line := PathLine(s.ShimDir())
	sess.Line = line
	data, err := os.ReadFile(envFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", envFile, err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if l == line {
			return sess, nil // resume, clear and compact start the session again
		}
	}
	add := line + "\n"
	if len(data) > 0 && !bytes.HasSuffix(data, []byte("\n")) {
		add = "\n" + add
	}
	f, err := os.OpenFile(envFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", envFile, err)
	}
	if _, err := f.WriteString(add); err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", envFile, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("write %s: %w", envFile, err)
	}
	sess.Written = true
	return sess, nil
}

// PathLine is the shell line that puts dir first on PATH.
func PathLine(dir string) string {
	return "export PATH=" + shellWord(dir) + `:"$PATH"`
}
