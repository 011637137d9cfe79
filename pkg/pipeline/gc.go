package pipeline

import (
	"context"
	"time"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/share"
)

// RunGC collects once from the store, then again on every base.ready and
// agent.removed, and every ReapInterval (a hook-created agent becomes
// abandoned by time passing, which no event announces), until ctx ends. A
// trigger for something already collected is a no-op: gc works from the
// store, not from the event.
func RunGC(ctx context.Context, e Env) error {
	conn, err := bus.DialWait(ctx, e.BusConfig("ferry-gc"), func(err error) { e.Logf("outbox: %v", err) })
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer conn.Close()
	if err := collect(ctx, e, conn); err != nil {
		return err
	}
	cons, err := consumer(ctx, e, conn, bus.ConsumerOptions{
		Durable: bus.DurableName("ferry-gc", e.Store.Key, consumerHost(e)),
		Kinds:   []events.Kind{events.KindBaseReady, events.KindAgentRemoved},
		RepoKey: e.Store.Key,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// One loop collects, for a message or a tick, so two passes never run
	// at once; the consumer only receives.
	msgs, errc := make(chan *bus.Message), make(chan error, 1)
	go func() {
		for {
			m, err := next(ctx, cons, e)
			if err != nil {
				errc <- err
				return
			}
			if m == nil {
				return // ctx is done
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	tick := time.NewTicker(ReapInterval(e.Settings.ReapAfter))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			if ctx.Err() != nil {
				return nil
			}
			return err
		case <-tick.C:
			if err := collect(ctx, e, conn); err != nil && ctx.Err() == nil {
				e.Logf("%v", err)
			}
		case m := <-msgs:
			if err := collect(ctx, e, conn); err != nil {
				e.Logf("%v", err)
				m.Nak(0)
				continue
			}
			if err := m.Ack(ctx); err != nil && ctx.Err() == nil {
				e.Logf("ack: %v", err)
			}
		}
	}
}

// ReapInterval is how often a running gc collects without being told to,
// for reap-after: a quarter of it, within a second and an hour, so an
// abandoned agent goes at most a quarter late (an hour, by default).
func ReapInterval(reapAfter time.Duration) time.Duration {
	return min(max(reapAfter/4, time.Second), time.Hour)
}

func collect(ctx context.Context, e Env, conn *bus.Conn) error {
	res, err := Collect(e.OnConn(ctx, conn), e, false)
	if err != nil {
		return err
	}
	if len(res.Bases)+len(res.Agents)+len(res.Reaped) > 0 {
		e.Logf("deleted %d base(s), rolled back %d agent(s), reaped %d agent(s)", len(res.Bases), len(res.Agents), len(res.Reaped))
	}
	Unpublish(ctx, e, conn, res.Bases)
	return nil
}

// Unpublish deletes from the bases bucket the objects of the bases gc
// deleted that this store published (share.Unpublish), over conn, or with
// conn nil (one-shot ferry gc) over a connection of its own when the bus
// answers within its bound. It never fails the collection: a bus that is
// away leaves the objects, which the bucket's limits age out, and the
// failure is logged.
func Unpublish(ctx context.Context, e Env, conn *bus.Conn, ids []string) []string {
	if len(ids) == 0 {
		return nil
	}
	if conn == nil {
		c, err := bus.Dial(ctx, e.BusConfig("ferry-gc"))
		if err != nil {
			return nil // no bus here: nothing was published from this store through it
		}
		defer c.Close()
		conn = c
	}
	b := share.Bucket{Name: e.Settings.BasesBucket}
	deleted, err := share.Unpublish(ctx, conn, b, e.Store.Dir, ids)
	if err != nil {
		e.Logf("warning: %v", err)
	}
	if len(deleted) > 0 {
		e.Logf("deleted %d published base(s) from the bus", len(deleted))
	}
	return deleted
}
