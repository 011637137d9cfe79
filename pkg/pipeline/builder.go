package pipeline

import (
	"context"
	"errors"
	"time"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/failure"
)

// BuilderOptions configure the following base builder.
type BuilderOptions struct {
	Env
	AckWait time.Duration // redelivery after a crash; 0 means the bus default
	Shim    bool          // warm through the shim (see base.Options)
}

// RunBuilder consumes commit.seen and builds each commit's base with the
// same code as one-shot ferry-base, until ctx ends. A build in progress is
// never interrupted by a newer commit: the stream keeps only the newest
// commit per repository, which is built next, and the ones in between are
// skipped. A failed commit is acknowledged, not retried; the watcher
// announces it again only after the ref moves. When ctx ends mid-build the
// build is stopped and discarded and the message left for redelivery, so no
// base is ever half published; a builder killed outright leaves the message
// unacknowledged, and whoever gets it next rebuilds from a clean slate.
func RunBuilder(ctx context.Context, o BuilderOptions) error {
	e := o.Env
	conn, err := bus.DialWait(ctx, e.BusConfig("ferry-base"), func(err error) { e.logf("ferry-base: outbox: %v", err) })
	if err != nil {
		return err
	}
	defer conn.Close()
	cons, err := consumer(ctx, e, conn, bus.ConsumerOptions{
		Durable: bus.DurableName("ferry-base", e.Store.Key, consumerHost(e)),
		Kinds:   []events.Kind{events.KindCommitSeen},
		RepoKey: e.Store.Key,
		AckWait: o.AckWait,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	e.logf("ferry-base: following commits of %s", e.Store.Key)
	for {
		m, err := cons.Next(ctx)
		if bus.Rejected(err) {
			e.logf("ferry-base: rejected a message: %v", err)
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		cs, ok := m.Event.(*events.CommitSeen)
		if !ok {
			m.Term("not a commit.seen")
			continue
		}
		if err := buildOne(ctx, o, conn, m, cs); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

func buildOne(ctx context.Context, o BuilderOptions, conn *bus.Conn, m *bus.Message, cs *events.CommitSeen) error {
	e := o.Env
	stop := m.KeepAlive() // heartbeat through long builds
	start := time.Now()
	res, err := base.Build(ctx, base.Options{
		Repo: e.Repo, Settings: e.Settings, Store: e.Store, Rev: cs.Commit,
		Progress: e.Log, Shim: o.Shim,
		OnBuilding: func(p *base.Plan) {
			publish(ctx, e, conn, &events.BaseBuilding{BaseID: p.ID, Commit: p.Commit, Fingerprint: p.Fingerprint()})
		},
	})
	stop()
	if ctx.Err() != nil {
		// Stopped: the partial base is discarded; leave the commit for the
		// next builder.
		m.Nak(0)
		return nil
	}
	if err != nil {
		var fe *failure.Error
		ev := &events.BaseFailed{Commit: cs.Commit, Error: err.Error(), ExitKind: failure.KindOf(err).String(),
			ExitCode: failure.KindOf(err).ExitCode()}
		if errors.As(err, &fe) {
			ev.Error = fe.Error()
		}
		e.logf("ferry-base: %s failed: %v", short(cs.Commit), err)
		publish(ctx, e, conn, ev)
	} else {
		r := res.Record
		publish(ctx, e, conn, &events.BaseReady{BaseID: r.ID, Commit: r.Commit, Fingerprint: r.Fingerprint,
			Current: true, Reused: res.Reused, Seconds: time.Since(start).Seconds(), Warnings: r.Warnings})
	}
	return m.Ack(ctx)
}

func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}
