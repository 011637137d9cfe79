package agent

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/cargoenv"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

// ShimDir is where the shim is installed as cargo: <store parent>/bin.
func ShimDir(s *store.Store) string { return s.ShimDir() }

// InstallShim installs the shim as cargo in ShimDir (see store.InstallShim).
func InstallShim(s *store.Store, shimBin string) error { return s.InstallShim(shimBin) }

// Environ is the environment of a process run for agent r: the caller's,
// with the shim first on PATH, FERRY_AGENT set for scripts, and no
// inherited build redirection (invariant 4).
func Environ(s *store.Store, r *Record, env []string) []string {
	path := cargoenv.Get(env, "PATH")
	out := cargoenv.Without(env, "FERRY_AGENT", "PATH")
	shim := ShimDir(s)
	var keep []string
	for _, p := range filepath.SplitList(path) {
		if p != shim {
			keep = append(keep, p)
		}
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
// whole process tree, and returns its exit status (128+signal if killed).
func Run(s *store.Store, r *Record, o RunOptions) (int, error) {
	if r.State != Ready {
		return 0, notReady(r)
	}
	dir := o.Dir
	if dir == "" {
		dir = r.Worktree
	}
	busy, err := HoldBusy(s, r.Name)
	if err != nil {
		return 0, err
	}
	defer busy.Release()
	cmd, err := sandbox.Command(sandbox.Plan{
		Binds: []sandbox.Bind{{Source: r.Worktree, Target: s.MntSrc()}, {Source: Target(s, r.Name), Target: s.MntTarget()}},
		Dir:   dir,
		Argv:  o.Argv,
		Env:   Environ(s, r, o.Env),
	})
	if err != nil {
		return 0, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = append(cmd.ExtraFiles, busy.File())
	return cmd.RunAsChild()
}
