package agent

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

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
	drop := map[string]bool{
		"CARGO_TARGET_DIR": true, "CARGO_BUILD_TARGET_DIR": true, "CARGO_BUILD_BUILD_DIR": true, "FERRY_AGENT": true,
	}
	out := make([]string, 0, len(env)+2)
	path := ""
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if k == "PATH" {
			path = v
			continue
		}
		if !drop[k] {
			out = append(out, kv)
		}
	}
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
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	signal.Ignore(syscall.SIGINT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	go func() {
		for sig := range sigs {
			cmd.Process.Signal(sig)
		}
	}()
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 0, err
}
