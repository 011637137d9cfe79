package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/store"
)

// committedName is how ferry.toml as committed is named in messages.
const committedName = "HEAD:" + config.FileName

// Settings returns the settings of a command run in repo's worktree:
// ferry.toml at its top and the environment (config.Load), except in an
// agent's worktree. There any of the agent's builds can write ferry.toml,
// and every setting in it steers a command run outside the sandbox:
// [sandbox] mode = "off" and [base] warm run the next base's build
// commands unconfined, [share] trusted-keys and [bus] decide whose bases
// a runner installs and where this host's go, [store] dir, [agent]
// worktree-dir and [paths] worktrees where Ferry writes, and the rest
// what the bases and agents made from there are. So in an agent's
// worktree, Ferry reads ferry.toml as its HEAD commits it, which no build
// can change (the sandbox keeps the git directories read-only), and note
// is what to tell the user when the working file says otherwise ("" when
// it does not).
//
// A worktree is an agent's when an agent of the store that either file
// names has it as its worktree, so a planted [store] dir cannot hide it.
// The main worktree never is one, and is read as it is with no more cost.
func Settings(repo *git.Repo) (settings *config.Settings, note string, err error) {
	env := config.OSEnv()
	working, werr := config.Load(repo.Top, env)
	if fi, err := os.Lstat(filepath.Join(repo.Top, ".git")); err == nil && fi.IsDir() {
		return working, "", werr // the main worktree: never an agent's
	}
	data, err := committedFile(repo)
	if err != nil {
		return nil, "", err
	}
	committed, cerr := config.LoadCommitted(repo.Top, env, data, committedName)
	common, err := repo.CommonDir()
	if err != nil {
		return nil, "", err
	}
	isAgent := func(s *config.Settings) bool {
		if s == nil {
			return false
		}
		st, err := store.Open(s.StoreParent, common, repo.Top)
		if err != nil {
			return false
		}
		a, err := agent.FindByWorktree(st, repo.Top)
		return err == nil && a != nil
	}
	// Each store either file names is asked; with no committed settings
	// to name one, the environment's or the default store is.
	asked := []*config.Settings{committed}
	if cerr != nil {
		asked[0], _ = config.LoadCommitted(repo.Top, env, nil, committedName)
	}
	if werr == nil {
		asked = append(asked, working)
	}
	agentHere := false
	for _, s := range asked {
		agentHere = agentHere || isAgent(s)
	}
	if !agentHere {
		return working, "", werr
	}
	if cerr != nil {
		return nil, "", failure.Wrap(failure.Usage, cerr,
			"commit a "+config.FileName+" that loads: in an agent's worktree Ferry reads it as committed, since the agent's builds can write the working file",
			"read %s in agent worktree %s", committedName, repo.Top)
	}
	switch {
	case werr != nil:
		note = fmt.Sprintf("%s in this agent's worktree does not load (%s): Ferry reads %s, which a build cannot change", config.FileName, firstLine(werr), committedName)
	default:
		if changed := config.Changed(committed, working); len(changed) > 0 {
			note = fmt.Sprintf("%s in this agent's worktree differs from %s (%s): Ferry reads it as committed, which a build cannot change; commit it to apply it",
				config.FileName, committedName, strings.Join(changed, ", "))
		}
	}
	return committed, note, nil
}

// committedFile returns ferry.toml as repo's HEAD commits it, nil when
// HEAD has none (or there is no commit yet).
func committedFile(repo *git.Repo) ([]byte, error) {
	out, err := repo.Run("", "cat-file", "blob", committedName)
	if err != nil {
		var ce *git.CommandError
		if errors.As(err, &ce) && ce.ExitCode() == 128 {
			return nil, nil // no such path in HEAD, or no HEAD
		}
		return nil, fmt.Errorf("read %s: %w", committedName, err)
	}
	return []byte(out), nil
}

// firstLine is the first line of err's message.
func firstLine(err error) string {
	line, _, _ := strings.Cut(err.Error(), "\n")
	return line
}

// SettingsFile is the content of the ferry.toml that settings (which
// Settings returned for repo) were read from: the committed file in an
// agent's worktree, the working file elsewhere; nil when there was none.
func SettingsFile(repo *git.Repo, settings *config.Settings) ([]byte, error) {
	switch settings.File {
	case "":
		return nil, nil
	case committedName:
		return committedFile(repo)
	}
	return os.ReadFile(settings.File)
}
