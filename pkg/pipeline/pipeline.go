// Package pipeline runs Ferry's long-running stages over the bus: the
// watcher (which hosts the embedded bus), the following base builder and
// the following gc; and emits the events of one-shot commands.
//
// The store is the truth; events are triggers. Every stage publishes an
// event only after the state it reports is durable, consumes idempotently,
// and reconciles from the store when it starts, so a lost trigger costs
// latency, never correctness.
package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/store"
)

// Env is what every stage works on.
type Env struct {
	Repo     *git.Repo
	Settings *config.Settings
	Store    *store.Store
	Log      io.Writer // diagnostics; nil discards
	// Prog is the program whose diagnostics these are: Logf starts each
	// line with it, as the base builder's progress does (base.Options.Prog).
	Prog string
	// Bus overrides how to reach the bus (tests, in-process hosts); the zero
	// value means: from the settings, FERRY_NATS_URL or bus.json.
	Bus *bus.Config
	// Observer, when set, is told what BuildAndShare, Pull and Publisher
	// did through this Env's announcers, for a stage's metrics (package
	// metrics implements it). One-shot commands leave it nil.
	Observer Observer
	// Reload reads the settings again, for a long-running stage that
	// applies ferry.toml as it is at each build or pull (Reloaded); nil
	// keeps Settings as they are.
	Reload func() (*config.Settings, error)
}

// Reloaded is e with its settings read again (e.Reload), saying on the log
// which changed since they were last read, and that the bus's own settings
// (the connection is made) take effect at the next start. Settings that
// cannot be read leave e as it is, with the error on the log.
func (e Env) Reloaded() Env {
	if e.Reload == nil {
		return e
	}
	s, err := e.Reload()
	if err != nil {
		e.Logf("the settings could not be read again, so those read before stay: %v", err)
		return e
	}
	changed := config.Changed(e.Settings, s)
	if len(changed) == 0 {
		return e
	}
	msg := fmt.Sprintf("settings changed since they were last read: %s", strings.Join(changed, ", "))
	for _, c := range changed {
		if slices.Contains([]string{"bus-url", "bus-replicas", "ack-wait", "bus-monitor-port", "metrics-port"}, c) {
			msg += " (the bus's and the metrics' take effect when the stage restarts)"
			break
		}
	}
	e.Logf("%s", msg)
	e.Settings = s
	return e
}

// Observer is told what the stages did (see Env.Observer).
type Observer interface {
	BaseBuilt(seeded bool, seconds float64) // a base built and made ready, not reused
	BaseFailed()                            // a build that failed, not one stopped
	BasePulled(bytes int64, seconds float64)
	BasePublished(bytes int64, seconds float64)
}

// Logf writes one line of diagnostics to the log.
func (e Env) Logf(format string, args ...any) {
	if e.Log == nil {
		return
	}
	if e.Prog != "" {
		format = e.Prog + ": " + format
	}
	fmt.Fprintf(e.Log, format+"\n", args...)
}

// BusConfig is how the stage called name reaches the bus: e.Bus when set
// (tests, in-process hosts), else what the settings decided (an external
// URL, or the embedded bus found through the store parent, and the
// streams' replica count).
func (e Env) BusConfig(name string) bus.Config {
	if e.Bus != nil {
		c := *e.Bus
		c.Name = name
		if c.Parent == "" {
			c.Parent = e.Store.Parent
		}
		return c
	}
	return bus.Config{Parent: e.Store.Parent, URL: e.Settings.BusURL, Name: name, Replicas: e.Settings.BusReplicas}
}

// Emit publishes ev for a one-shot command after the state it reports is
// durable. When the bus cannot be reached in time the event waits in the
// store's outbox for the next process that connects; a failure to do even
// that is reported on the log and does not fail the command, whose state
// change has already happened.
func Emit(e Env, name string, ev events.Event) {
	ev = events.Stamp(ev, e.Store.Key)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := bus.Emit(ctx, e.BusConfig(name), ev); err != nil {
		e.Logf("warning: event %s not recorded: %v", ev.Kind(), err)
	}
}

// publish sends ev on a long-running connection, queueing it when the bus
// is away.
func publish(ctx context.Context, e Env, c *bus.Conn, ev events.Event) {
	ev = events.Stamp(ev, e.Store.Key)
	if _, err := c.PublishOrQueue(ctx, ev); err != nil {
		e.Logf("warning: event %s not recorded: %v", ev.Kind(), err)
	}
}

// consumerHost names this machine and store parent in durable consumer
// names: each build host, and each store parent on one host (two
// FERRY_HOMEs sharing a bus), has its own builder and gc consumers, since
// each store must see every trigger.
func consumerHost(e Env) string {
	h, _ := os.Hostname()
	sum := sha256.Sum256([]byte(e.Store.Parent))
	return h + "-" + hex.EncodeToString(sum[:4])
}

// consumer creates a durable consumer, retrying while the bus cannot answer
// yet (a cluster still electing its leaders answers nothing for a while),
// until ctx ends. A long-running stage waits for the bus rather than exit.
func consumer(ctx context.Context, e Env, conn *bus.Conn, o bus.ConsumerOptions) (*bus.Consumer, error) {
	wait := 100 * time.Millisecond
	for {
		cons, err := conn.Consumer(ctx, o)
		if err == nil || ctx.Err() != nil || !unanswered(err) {
			return cons, err
		}
		e.Logf("waiting for the bus (consumer %s): %v", o.Durable, err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		if wait < 5*time.Second {
			wait *= 2
		}
	}
}

// unanswered reports an error that means "nobody answered in time", as
// opposed to an answer that refuses.
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}
