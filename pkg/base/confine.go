package base

import (
	"context"
	"path/filepath"
	"time"

	"github.com/ferrydev/ferry/pkg/confine"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

// A base's warm commands run the same build scripts an agent's builds do,
// so their sandbox confines the host as an agent's does (package confine):
// read-only but for the canonical checkout and target and the records of
// the warm build and /tmp, with private layers over $HOME and $CARGO_HOME
// and a $TMPDIR of their own, all in the base's private/ while it builds, removed
// before it is ready. One thing must reach the host's $CARGO_HOME: the
// registry crates the commit locks, which agents' builds read at the paths
// the base recorded. A layer the base discards would take them with it,
// and every agent would build those crates again (or, offline, fail). So
// before the warm commands `cargo fetch` downloads and extracts them into
// the host's $CARGO_HOME, in a sandbox that keeps it writable: cargo fetch
// runs no build script and no proc macro.

// decideConfinement probes, in the background, what the warm commands'
// sandbox confines on this host; nil for a base built at host paths.
func decideConfinement(o Options, r *Record) task[*confine.Record] {
	if r.HostPaths() {
		return func() (*confine.Record, error) { return nil, nil }
	}
	return begin(func() (*confine.Record, error) {
		if err := o.Store.Init(); err != nil {
			return nil, err
		}
		ro := confine.Repository(o.Repo)
		if !o.Settings.WorktreesInRepo {
			// The agents' worktrees (in the repository, the main
			// checkout above covers them).
			ro = append(ro, filepath.Join(o.Settings.WorktreeParent, o.Store.Key))
		}
		rec := confine.Decide(o.Store.Parent, o.Store.TmpDir(), o.env(), o.Settings.SandboxWritable, ro)
		return &rec, nil
	})
}

// sayGaps says once, on the progress stream, what the warm commands'
// sandbox leaves unconfined on this host (`ferry doctor` says it too).
func sayGaps(o Options, rec *confine.Record) {
	if rec == nil {
		return
	}
	for _, g := range rec.Gaps {
		o.say("note: %s", g)
	}
}

// confined applies r's confinement to plan, a warm command's in a store
// whose canonical $TMPDIR mountpoint is tmp, with writable the host paths
// it writes besides the canonical mounts; with
// cargoHome, the host's $CARGO_HOME stays writable too (prefetch).
func confined(r *Record, plan *sandbox.Plan, tmp string, writable []string, cargoHome string) error {
	if r.Confinement == nil || !r.Confinement.World {
		plan.Writable = append(plan.Writable, writable...)
		return nil
	}
	if cargoHome != "" {
		writable = append(writable, cargoHome)
	}
	x := confine.For(r.Confinement, plan.Env, store.PrivateFiles(store.BaseFiles(r.Dir).Private), writable, nil)
	if err := x.Apply(plan, tmp); err != nil {
		return err
	}
	// Warm commands run one at a time: one slot.
	layers, err := x.Layers(0, true)
	if err != nil {
		return err
	}
	plan.Private = layers
	return nil
}

// prefetch downloads the crates the commit locks into the host's
// $CARGO_HOME before the warm commands, when their sandbox keeps
// $CARGO_HOME in a layer of its own, unless the seed had the same unit
// inputs (its build fetched them). A failure only warns: the warm build
// then downloads them into its own layer, and agents build them again.
func prefetch(ctx context.Context, o Options, p *Plan, r, seed *Record) {
	if r.Confinement == nil || !r.Confinement.Layers || (seed != nil && seed.UnitInputs == p.UnitInputs) {
		return
	}
	env := warmEnv(o.env(), r, "", "")
	home, private := confine.For(r.Confinement, env, store.PrivateFiles(store.BaseFiles(r.Dir).Private), nil, nil).PrivateCargoHome()
	if !private {
		return
	}
	start := time.Now()
	code, _, _, err := runWarmIn(ctx, o, r, "cargo fetch", env, home, o.progress())
	switch {
	case err != nil:
		o.say("warning: cargo fetch could not run (%v): crates the warm build downloads stay in its sandbox, and agents download them again", err)
	case code != 0:
		o.say("warning: cargo fetch exited with status %d: crates the warm build downloads stay in its sandbox, and agents download them again", code)
	default:
		o.say("fetched the locked crates into %s in %.1fs", home, since(start))
	}
}
