// Package watcher is ferry-watch's stage: it polls a ref (package watch)
// and publishes commit.seen, hosting the embedded bus (package
// bus/embedded) unless an external one is configured. It is the one package
// that links the NATS server, and only ferry-watch imports it (a test
// checks each binary's dependencies).
package watcher

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/bus/embedded"
	"github.com/ferrydev/ferry/pkg/pipeline"
	"github.com/ferrydev/ferry/pkg/watch"
)

// Options configure ferry-watch.
type Options struct {
	pipeline.Env
	Rev      string
	Interval time.Duration
	GC       bool // also run the following gc in this process
	// Ready, when set, receives the bus configuration once the watcher is
	// connected (and hosting, if it hosts).
	Ready func(bus.Config)
}

// Run polls the ref and publishes commit.seen until ctx ends. Unless
// an external bus is configured ([bus] url or FERRY_NATS_URL) it hosts the
// embedded bus for the other stages.
func Run(ctx context.Context, o Options) error {
	e := o.Env
	if err := e.Store.Init(); err != nil {
		return err
	}
	l, err := watch.TakeLock(e.Store)
	if err != nil {
		return err
	}
	defer l.Release()

	cfg := e.BusConfig("ferry-watch")
	if e.Bus == nil && cfg.URL == "" {
		h, err := embedded.Start(embedded.Options{Dir: bus.Dir(e.Store.Parent), MonitorPort: e.Settings.BusMonitorPort})
		if err != nil {
			return err
		}
		defer h.Shutdown()
		cfg = h.ClientConfig("ferry-watch")
		cfg.Parent = e.Store.Parent
		e.Logf("hosting the bus at %s", h.URL())
		if m := h.MonitorURL(); m != "" {
			e.Logf("NATS monitoring at %s", m)
		}
	}
	conn, err := bus.DialWait(ctx, cfg, func(err error) { e.Logf("outbox: %v", err) })
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer conn.Close()
	if err := conn.EnsureStreams(ctx); err != nil {
		return err
	}

	skip := ""
	if cur, _ := e.Store.Current(); cur != "" {
		if r, err := base.Read(e.Store, cur); err == nil {
			skip = r.Commit
		}
	}
	previous := skip // the commit announced before, or the current base's
	w, err := watch.New(watch.Options{
		Repo: e.Repo, Rev: o.Rev, Interval: o.Interval, Skip: skip,
		Announce: func(c string) error {
			e.Logf("%s is new at %s", pipeline.Short(c), o.Rev)
			ev := events.Stamp(&events.CommitSeen{Commit: c, Ref: o.Rev, Previous: previous}, e.Store.Key)
			if _, err := conn.PublishOrQueue(ctx, ev); err != nil {
				return err
			}
			previous = c
			return nil
		},
		Log: e.Logf,
	})
	if err != nil {
		return err
	}
	// Built or failed commits are not announced again until the ref moves.
	for _, k := range []events.Kind{events.KindBaseReady, events.KindBaseFailed} {
		sub, err := conn.NC.Subscribe(events.SubjectFor(e.Store.Key, k), func(m *nats.Msg) {
			ev, err := bus.DecodeMessage(m.Subject, m.Data)
			if err != nil {
				return
			}
			switch ev := ev.(type) {
			case *events.BaseReady:
				w.Handled(ev.Commit)
			case *events.BaseFailed:
				w.Handled(ev.Commit)
			}
		})
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
	}
	if o.GC {
		go func() {
			ge := e
			ge.Bus = &cfg
			if err := pipeline.RunGC(ctx, ge); err != nil && ctx.Err() == nil {
				e.Logf("gc: %v", err)
			}
		}()
	}
	if o.Ready != nil {
		o.Ready(cfg)
	}
	return w.Run(ctx)
}
