package pipeline

import (
	"context"
	"errors"
	"regexp"
	"time"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/gc"
	"github.com/ferrydev/ferry/pkg/share"
)

// Act, then announce. Each state change Ferry makes is one function here
// that changes the store and then announces the event that reports it: the
// one-shot commands (ferry base, spawn, rm, gc) and the following stages
// (ferry-base --follow, ferry-gc --follow) call the same function, so an
// event is built in one place and carries every field whichever process
// made the change.

// Announcer publishes the event of a state change that is already durable.
// It never fails the change: an event it cannot deliver waits in the
// outbox, or is reported on the log.
type Announcer interface {
	Announce(ev events.Event)
}

// observerOf is the Observer of the Env an announcer was made from, nil
// for announcers made otherwise (tests).
func observerOf(a Announcer) Observer {
	if o, ok := a.(interface{ env() Env }); ok {
		return o.env().Observer
	}
	return nil
}

// OneShot is the announcer of a one-shot command called name: each event
// is published within a short bound, or waits in the store's outbox for the
// next process that reaches the bus (see Emit).
func (e Env) OneShot(name string) Announcer { return oneShot{e, name} }

type oneShot struct {
	e    Env
	name string
}

func (o oneShot) Announce(ev events.Event) { Emit(o.e, o.name, ev) }
func (o oneShot) env() Env                 { return o.e }

// OnConn is the announcer of a long-running stage connected to the bus:
// events go over its connection, queued in the outbox while the bus is
// away.
func (e Env) OnConn(ctx context.Context, c *bus.Conn) Announcer { return onConn{ctx, e, c} }

type onConn struct {
	ctx context.Context
	e   Env
	c   *bus.Conn
}

func (o onConn) Announce(ev events.Event) { publish(o.ctx, o.e, o.c, ev) }
func (o onConn) env() Env                 { return o.e }

var fullCommit = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// BuildBase builds the base o describes, or reuses it, and makes it current
// (base.Build), announcing base.building once a build starts, then
// base.ready, or base.failed with the warm command that failed. An
// interrupted build announces no failure: its commit is not at fault, and
// whoever builds it next announces the outcome.
func BuildBase(ctx context.Context, a Announcer, o base.Options) (*base.Result, error) {
	return BuildAndShare(ctx, a, o, nil)
}

// Share publishes a ready base for other hosts and returns the object it
// wrote (package share, over the stage's bus connection).
type Share func(ctx context.Context, r *base.Record) (object string, err error)

// BuildAndShare is BuildBase that, with share set, publishes the ready
// base before announcing it, so base.ready names the object. A failed
// publish leaves the base ready here: base.ready is announced without an
// object, and the error is returned.
func BuildAndShare(ctx context.Context, a Announcer, o base.Options, share Share) (*base.Result, error) {
	var plan *base.Plan
	onBuilding := o.OnBuilding
	o.OnBuilding = func(p *base.Plan) {
		plan = p
		a.Announce(&events.BaseBuilding{BaseID: p.ID, Commit: p.Commit, Fingerprint: p.Fingerprint(), Seed: p.Seed})
		if onBuilding != nil {
			onBuilding(p)
		}
	}
	start := time.Now()
	res, err := base.Build(ctx, o)
	if err == nil {
		r := res.Record
		if obs := observerOf(a); obs != nil && !res.Reused {
			obs.BaseBuilt(r.Seed != "", time.Since(start).Seconds())
		}
		ev := ReadyEvent(r, res.Reused, time.Since(start).Seconds(), "")
		if r.Seed != "" {
			if s, err := base.Read(o.Store, r.Seed); err == nil {
				ev.SeedSeconds = s.Timings.Total
			}
		}
		var serr error
		if share != nil {
			ev.Object, serr = share(ctx, r)
		}
		a.Announce(ev)
		adoptPendingAfter(a)
		return res, serr
	}
	if failure.KindOf(err) == failure.Interrupted || errors.Is(err, context.Canceled) {
		return nil, err
	}
	if obs := observerOf(a); obs != nil {
		obs.BaseFailed()
	}
	kind := failure.KindOf(err)
	ev := &events.BaseFailed{Error: err.Error(), ExitKind: kind.String(), ExitCode: kind.ExitCode(), Command: base.FailedCommand(err)}
	switch {
	case plan != nil:
		ev.BaseID, ev.Commit, ev.Fingerprint = plan.ID, plan.Commit, plan.Fingerprint()
	case fullCommit.MatchString(o.Rev):
		ev.Commit = o.Rev // failed before its id was known (the toolchain, say)
	default:
		return nil, err // a revision that names no commit: nothing to announce
	}
	a.Announce(ev)
	return nil, err
}

// Pull installs a published base (share.Pull) and announces base.ready
// naming its object (the base was not built here: Seconds is the pull's).
// A base already ready here is announced as reused.
func Pull(ctx context.Context, a Announcer, conn *bus.Conn, o share.PullOptions) (*share.Pulled, error) {
	return pull(ctx, a, conn, o, true)
}

// Import installs a base from an archive file (share.Import) and announces
// base.ready naming no object: the base is in no bucket for runners to
// pull.
func Import(ctx context.Context, a Announcer, o share.ImportOptions) (*share.Pulled, error) {
	res, err := share.Import(ctx, o)
	if err != nil {
		return nil, err
	}
	a.Announce(ReadyEvent(res.Record, res.Reused, res.Seconds, ""))
	adoptPendingAfter(a)
	return res, nil
}

// pull is Pull; with announceReused false a base already ready here is
// made current without an announcement, so that runners answering each
// other's base.ready do not go on forever.
func pull(ctx context.Context, a Announcer, conn *bus.Conn, o share.PullOptions, announceReused bool) (*share.Pulled, error) {
	res, err := share.Pull(ctx, conn, o)
	if err != nil {
		return nil, err
	}
	if res.Reused && !announceReused {
		return res, nil
	}
	if obs := observerOf(a); obs != nil && !res.Reused && res.Meta != nil {
		obs.BasePulled(res.Meta.Compressed, res.Seconds)
	}
	a.Announce(ReadyEvent(res.Record, res.Reused, res.Seconds, res.Object))
	adoptPendingAfter(a)
	return res, nil
}

// adoptPendingAfter adopts the worktrees left pending (AdoptPending) once
// a base became ready through a's Env, when a has one.
func adoptPendingAfter(a Announcer) {
	if en, ok := a.(interface{ env() Env }); ok && en.env().Repo != nil && en.env().Settings != nil {
		AdoptPending(a, en.env())
	}
}

// ReadyEvent is the base.ready of base r, made current: reused or made
// ready in seconds, published as object ("" when it was not).
func ReadyEvent(r *base.Record, reused bool, seconds float64, object string) *events.BaseReady {
	ev := &events.BaseReady{BaseID: r.ID, Commit: r.Commit, Fingerprint: r.Fingerprint,
		Current: true, Reused: reused, Seconds: seconds, Warnings: r.Warnings,
		Incomplete: r.Incomplete, Seed: r.Seed, SeedBy: r.SeedBy, Object: object}
	for _, w := range r.Warm {
		ev.Warm = append(ev.Warm, events.WarmCommand{Command: w.Command, Why: w.Why, Demanded: w.Demanded})
	}
	return ev
}

// Spawn creates an agent (agent.Spawn) and announces agent.spawned.
func Spawn(a Announcer, o agent.SpawnOptions) (*agent.Record, error) {
	r, err := agent.Spawn(o)
	if err != nil {
		return nil, err
	}
	a.Announce(spawnedEvent(r))
	return r, nil
}

// Adopt makes an existing worktree an agent (agent.Adopt) and announces
// agent.spawned; adopting an agent's worktree again announces nothing.
func Adopt(a Announcer, o agent.AdoptOptions) (*agent.Adoption, error) {
	ad, err := agent.Adopt(o)
	if err != nil {
		return nil, err
	}
	if !ad.Already {
		a.Announce(spawnedEvent(ad.Record))
	}
	return ad, nil
}

// spawnedEvent is the agent.spawned of agent r, spawned or adopted.
func spawnedEvent(r *agent.Record) *events.AgentSpawned {
	return &events.AgentSpawned{Name: r.Name, Branch: r.Branch, Worktree: r.Worktree,
		BaseID: r.Base, Backend: r.Backend, StartCommit: r.StartCommit}
}

// removedEvent is the agent.removed of removal rm, removed or reaped.
func removedEvent(rm *agent.Removal) *events.AgentRemoved {
	return &events.AgentRemoved{Name: rm.Name, Branch: rm.Branch, Worktree: rm.Worktree,
		BaseID: rm.Base, OrphanRef: rm.OrphanRef}
}

// Remove removes an agent (agent.Remove) and announces agent.removed.
func Remove(a Announcer, e Env, name string, o agent.RemoveOptions) (*agent.Removal, error) {
	rm, err := agent.Remove(e.Repo, e.Store, name, o)
	if err != nil {
		return nil, err
	}
	ev := removedEvent(rm)
	ev.Forced = o.Force
	a.Announce(ev)
	return rm, nil
}

// Collect runs one gc pass (gc.RunWith, reaping after
// e.Settings.ReapAfter), announces agent.removed for each agent it reaped
// (as `ferry rm` does for the agents it removes) and, when it deleted a
// base, rolled back a spawn or reaped an agent, gc.collected. A dry run
// announces nothing.
func Collect(a Announcer, e Env, dry bool) (*gc.Result, error) {
	o := gc.Options{DryRun: dry, ReapAfter: config.DefaultReapAfter}
	if e.Settings != nil {
		o.ReapAfter = e.Settings.ReapAfter
	}
	res, err := gc.RunWith(e.Repo, e.Store, o)
	if err != nil {
		return nil, err
	}
	if dry {
		return res, nil
	}
	for _, v := range res.HookAgents {
		if rm := v.Removal; v.Reaped && rm != nil {
			ev := removedEvent(rm)
			ev.Reaped = true
			a.Announce(ev)
		}
	}
	if len(res.Bases)+len(res.Agents)+len(res.Reaped) > 0 {
		a.Announce(&events.GCCollected{DeletedBases: res.Bases, KeptBases: res.Kept, RolledBackAgents: res.Agents,
			ReapedAgents: res.Reaped})
	}
	return res, nil
}
