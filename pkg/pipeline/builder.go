package pipeline

import (
	"context"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/share"
)

// BuilderOptions configure the following base builder.
type BuilderOptions struct {
	Env
	Shim bool // warm through the shim (see base.Options)
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
	conn, err := bus.DialWait(ctx, e.BusConfig("ferry-base"), func(err error) { e.Logf("outbox: %v", err) })
	if err != nil {
		return err
	}
	defer conn.Close()
	cons, err := consumer(ctx, e, conn, bus.ConsumerOptions{
		Durable: bus.DurableName("ferry-base", e.Store.Key, consumerHost(e)),
		Kinds:   []events.Kind{events.KindCommitSeen},
		RepoKey: e.Store.Key,
		AckWait: e.Settings.AckWait,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	e.Logf("following commits of %s", e.Store.Key)
	for {
		m, err := next(ctx, cons, e)
		if m == nil || err != nil {
			return err
		}
		cs, ok := m.Event.(*events.CommitSeen)
		if !ok {
			m.Term("not a commit.seen")
			continue
		}
		// ferry.toml as it is now: each build reads it again.
		o.Env = o.Env.Reloaded()
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
	var publish Share
	if e.Settings.ShareBases {
		// [bus] share-bases: every base made ready is published, over
		// this stage's connection.
		publish = Publisher(e, conn)
	}
	_, err := BuildAndShare(ctx, e.OnConn(ctx, conn), base.Options{
		Repo: e.Repo, Settings: e.Settings, Store: e.Store, Rev: cs.Commit,
		Progress: e.Log, Prog: e.Prog, Shim: o.Shim,
	}, publish)
	stop()
	if ctx.Err() != nil {
		// Stopped: the partial base is discarded; leave the commit for the
		// next builder.
		m.Nak(0)
		return nil
	}
	if err != nil {
		e.Logf("%s failed: %v", Short(cs.Commit), err)
	}
	return m.Ack(ctx)
}

// Publisher is the Share of ferry-base --follow with [bus] share-bases:
// share.Publish to the configured bucket over conn, logged and counted in
// e.Observer.
func Publisher(e Env, conn *bus.Conn) Share {
	return func(ctx context.Context, r *base.Record) (string, error) {
		signer, err := share.HostSigner(e.Settings.StoreParent, func(f string, a ...any) { e.Logf(""+f, a...) })
		if err != nil {
			return "", err
		}
		p, err := share.Publish(ctx, conn, share.Bucket{Name: e.Settings.BasesBucket, MaxBytes: e.Settings.BasesMaxBytes, Replicas: e.Settings.BusReplicas}, r, signer)
		if err != nil {
			return "", err
		}
		if e.Observer != nil {
			e.Observer.BasePublished(p.Meta.Compressed, p.Seconds)
		}
		e.Logf("published %s (%.1f MB) in %.1fs", p.Object, float64(p.Meta.Compressed)/1e6, p.Seconds)
		return p.Object, nil
	}
}

// Short is a commit or base id cut to 12 characters, for messages.
func Short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// next waits for the consumer's next message, logging and skipping one the
// bus rejects (it does not decode); nil and no error once ctx is done.
func next(ctx context.Context, cons *bus.Consumer, e Env) (*bus.Message, error) {
	for {
		m, err := cons.Next(ctx)
		if bus.Rejected(err) {
			e.Logf("rejected a message: %v", err)
			continue
		}
		if err != nil && ctx.Err() != nil {
			return nil, nil
		}
		return m, err
	}
}
