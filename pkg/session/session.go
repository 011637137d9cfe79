// Package session runs a command for an agent as the agent's record says
// (in its sandbox at the canonical paths, or at host paths without one)
// and tells a call where the agent's build output is. It is what a cargo
// call through the shim needs of an agent, kept apart from package agent
// (spawn, adopt, rm), which links the base builder: the shim starts on
// every cargo call and links this package and package record instead.
//
// How a process enters an agent's sandbox is its fork's lifecycle
// (package lifecycle, by the backend the agent recorded at spawn): a
// reflink or copy fork is bind-mounted in a namespace of the call's own,
// an overlay fork is mounted once and joined by every later process of
// the agent. This package adds what every agent shares: the worktree's
// bind mount, the sealed store, and busy.lock. Neither package makes
// forks (package fork does), so the shim links neither that nor the base
// builder.
package session

import (
	"os"
	"path/filepath"

	"github.com/ferrydev/ferry/pkg/cargoenv"
	"github.com/ferrydev/ferry/pkg/confine"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/lifecycle"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

// Lifecycle returns the lifecycle of agent r's fork, by the backend r was
// forked with. A name this Ferry does not know (a record written by a
// newer one) is refused: without it nothing can tell how to enter the fork
// or who still uses it.
func Lifecycle(r *record.Agent) (lifecycle.Lifecycle, error) {
	b, err := lifecycle.For(r.Backend)
	if err != nil {
		return nil, failure.Wrap(failure.Refused, err, "use the Ferry that spawned it: a newer one knows the backend",
			"agent %q records fork backend %q, which this Ferry does not know", r.Name, r.Backend)
	}
	return b, nil
}

// Fork is agent r's fork as its backend sees it; x, when set, the
// session's confinement, whose private layers the backend mounts.
func Fork(s *store.Store, r *record.Agent, x *confine.Session) lifecycle.Agent {
	a := lifecycle.Agent{
		Name:  r.Name,
		Files: s.Agent(r.Name),
		Mount: s.MntTarget(),
		Base:  r.Base,
		BaseTarget: func() (string, error) {
			b, err := record.ReadBase(s, r.Base)
			if err != nil {
				return "", err
			}
			return b.Target, nil
		},
	}
	if x != nil && x.HasLayers() {
		private := store.PrivateFiles(a.Files.Private)
		a.Layers = x.Layers
		a.SlotLock = func(slot int) string { return private.Slot(slot).Lock }
	}
	return a
}

// HoldBusy takes busy.lock shared for a process run for the agent. The
// caller passes the returned lock's file to the child so the lock lives as
// long as the child and its descendants.
func HoldBusy(s *store.Store, name string) (*lock.Lock, error) {
	return lock.Shared(s.Agent(name).Busy)
}

// Command prepares argv to run in agent r's sandbox, at dir (a canonical or
// host path), with env as its whole environment; for an agent that builds
// at host paths, without a sandbox, at dir. The caller sets the
// command's standard streams and runs it with lifecycle.Session.Run; Close
// releases what a session not run holds.
func Command(s *store.Store, r *record.Agent, dir string, argv, env []string) (*lifecycle.Session, error) {
	if r.State != record.Ready {
		return nil, record.NotReady(r)
	}
	// Nothing an agent runs reaches the bus: its address and credentials
	// stay with Ferry (and the sandbox hides the bus's files).
	env = cargoenv.WithoutBus(env)
	b, err := Lifecycle(r)
	if err != nil {
		return nil, err
	}
	busy, err := HoldBusy(s, r.Name)
	if err != nil {
		return nil, err
	}
	var x *lifecycle.Session
	if r.HostPaths() {
		// No sandbox: the shim sends cargo to the fork from the
		// agent's record.
		x, err = lifecycle.Host(sandbox.Plan{Dir: dir, Argv: argv, Env: env}, busy)
	} else if inSandbox(s, r, b) {
		// A session of this agent starting another (ferry run from its
		// shell): the namespace is already the agent's.
		x, err = lifecycle.Inside(sandbox.Plan{Dir: dir, Argv: argv, Env: env}, busy)
	} else {
		x, err = enter(s, r, b, dir, argv, env, busy)
	}
	if err != nil {
		busy.Release()
		return nil, err
	}
	return x, nil
}

// enter builds the sandbox plan every agent shares and has the backend add
// its fork and admit the session.
func enter(s *store.Store, r *record.Agent, b lifecycle.Lifecycle, dir string, argv, env []string, busy *lock.Lock) (*lifecycle.Session, error) {
	if err := s.CheckWritable(); err != nil {
		return nil, err
	}
	seal, err := s.Seal()
	if err != nil {
		return nil, err
	}
	plan := sandbox.Plan{Dir: dir, Argv: argv, Env: env, Store: seal.Root, Masked: seal.Masked,
		Binds: []sandbox.Bind{{Source: r.Worktree, Target: s.MntSrc()}}}
	if r.Confinement == nil || !r.Confinement.World {
		// Spawned before Ferry confined the host, or on a host that
		// cannot: the store alone is sealed.
		plan.Writable = append(seal.Writable, s.Agent(r.Name).Freshness)
		return b.Enter(Fork(s, r, nil), plan, busy)
	}
	// Its worktree is writable, but not the link to its git dirs: a
	// build that repointed it would have git, run outside the sandbox
	// later, read hooks and config of its choosing.
	x := confine.For(r.Confinement, env, store.PrivateFiles(s.Agent(r.Name).Private),
		[]string{r.Worktree, s.Agent(r.Name).Freshness}, []string{filepath.Join(r.Worktree, ".git")})
	if err := x.Apply(&plan, s.MntTmp()); err != nil {
		return nil, err
	}
	return b.Enter(Fork(s, r, x), plan, busy)
}

// InSandbox reports whether this process already runs in agent r's sandbox:
// the canonical checkout is r's worktree and the canonical target is r's
// fork (as its backend mounts it).
func InSandbox(s *store.Store, r *record.Agent) bool {
	b, err := Lifecycle(r)
	return err == nil && inSandbox(s, r, b)
}

func inSandbox(s *store.Store, r *record.Agent, b lifecycle.Lifecycle) bool {
	src, err := os.Stat(s.MntSrc())
	if err != nil {
		return false
	}
	wt, err := os.Stat(r.Worktree)
	if err != nil || !os.SameFile(src, wt) {
		return false
	}
	return b.InSandbox(Fork(s, r, nil))
}
