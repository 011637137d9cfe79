package agent

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/cargoenv"
	"github.com/ferrydev/ferry/pkg/session"
	"github.com/ferrydev/ferry/pkg/store"
)

// Environ is the environment of a process run for agent r: the caller's,
// with the shim first on PATH, FERRY_AGENT set for scripts, and no
// inherited build redirection (invariant 4), and the base's freshness
// variables.
func Environ(s *store.Store, r *Record, env []string) []string {
	path := cargoenv.Get(env, "PATH")
	out := cargoenv.WithFreshness(cargoenv.Without(env, "FERRY_AGENT", "PATH"), r.FreshnessEnv)
	shim := s.ShimDir()
	var keep []string
	seen := map[string]bool{}
	for _, p := range filepath.SplitList(path) {
		// The shim goes first, once, however the entry names it; a later
		// copy of an entry finds nothing the first did not.
		if seen[p] || isDir(p, shim) {
			continue
		}
		seen[p] = true
		keep = append(keep, p)
	}
	return append(out, "PATH="+strings.Join(append([]string{shim}, keep...), string(filepath.ListSeparator)), "FERRY_AGENT="+r.Name)
}

// RunOptions describe a command run in an agent's sandbox.
type RunOptions struct {
	Argv []string
	Dir  string // working directory; default the worktree. Host paths work in the sandbox.
	Env  []string
}

// Run runs a command in agent r's sandbox, holding busy.lock shared for its
// whole process tree (and, for an overlay agent, mount.lock), and returns
// its exit status (128+signal if killed).
func Run(s *store.Store, r *Record, o RunOptions) (int, error) {
	dir := o.Dir
	if dir == "" {
		dir = r.Worktree
	}
	x, err := session.Command(s, r, dir, o.Argv, Environ(s, r, o.Env))
	if err != nil {
		return 0, err
	}
	x.Cmd.Stdin, x.Cmd.Stdout, x.Cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return x.Run()
}

// isDir reports whether the search path entry p names dir (resolved):
// written as it is, with a trailing slash, or through a link.
func isDir(p, dir string) bool {
	if p == "" {
		return false // the working directory
	}
	if filepath.Clean(p) == dir {
		return true
	}
	resolved, err := filepath.EvalSymlinks(p)
	return err == nil && resolved == dir
}
