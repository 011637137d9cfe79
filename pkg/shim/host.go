package shim

import (
	"path/filepath"

	"github.com/ferrydev/ferry/pkg/cargoenv"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/remap"
	"github.com/ferrydev/ferry/pkg/session"
	"github.com/ferrydev/ferry/pkg/store"
)

// runAtHostPaths runs cargo for agent a, which builds without the
// namespace sandbox (its record says so, decided at spawn): in the working
// directory as it is, with the selected workspace's target dir in the
// agent's fork, exactly as the sandbox would give it at the canonical
// paths (nested workspaces under ferry-ws/); in remap mode through the
// worktree's link to the fork, with rustc run through ferry-rustc. cargo inherits busy.lock
// through exec, so rm and gc see the call.
func (c *Call) runAtHostPaths(cargo string, a *record.Agent, s *store.Store, top string) (int, error) {
	rel, err := filepath.Rel(top, c.Dir)
	if err != nil {
		return 0, err
	}
	fork, ok := session.HostTarget(s, a)
	if !ok {
		return 0, failure.New(failure.Refused, "remove it with `ferry rm --force "+a.Name+"` and spawn it again",
			"agent %q has no fork at %s", a.Name, s.Agent(a.Name).Target)
	}
	// No sandbox here: cargo itself runs unconfined in the worktree. The
	// probe still keeps out of it, as in the sandbox's case.
	ws, err := c.workspace(cargo, top, rel, c.probeDir(s, a))
	if err != nil {
		return 0, err
	}
	callerEnv, wrap := c.Env, []string(nil)
	if a.Remap != nil {
		// Remap mode: the target through the worktree's link, rustc
		// through ferry-rustc, as the base was built (replacing any
		// inherited wrapper: execve keeps duplicates, and Cargo reads
		// the first).
		if fork, err = session.RemapTarget(a); err != nil {
			return 0, err
		}
		callerEnv = cargoenv.Without(c.Env, remap.EnvWrapper, remap.EnvChannel)
		wrap = remap.Env(a.Remap.Wrapper, a.Remap.Channel)
	}
	target := store.NestedTarget(fork, ws)
	env := append(cargoenv.WithFreshness(cargoEnv(callerEnv, a.Name, target, c.Dir), a.FreshnessEnv), wrap...)
	env = c.underCI(env, c.Dir, func(p string) string { return p }, func() string { return c.baseCargo(s, a) })
	if obs := c.watch(s, a, top, ws); obs != nil {
		obs.target = target
		args := obs.plan.args
		env = c.marked(env, "", cargo, c.Dir, args)
		x, err := session.Command(s, a, c.Dir, append([]string{cargo}, args...), env)
		if err != nil {
			return 0, err
		}
		return obs.run(x)
	}
	return 0, c.execBusy(s, a, cargo, c.Dir, c.Args, env)
}
