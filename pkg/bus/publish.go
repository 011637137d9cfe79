package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/store"
)

// Delivery says what became of an event handed to Emit or PublishOrQueue.
type Delivery int

const (
	// Published: JetStream acknowledged the event (or already held it).
	Published Delivery = iota + 1
	// Queued: the event waits in its repository's outbox for the next
	// process that connects.
	Queued
)

func (d Delivery) String() string {
	switch d {
	case Published:
		return "published"
	case Queued:
		return "queued"
	}
	return "unknown"
}

// Publish validates ev, publishes it on its subject with its id as
// Nats-Msg-Id and waits (at most the configured AckTimeout) for JetStream's
// acknowledgement. A repeated id within DedupWindow is acknowledged as a
// duplicate and stored once. If no stream takes the subject, Publish ensures
// the streams and tries again.
func (c *Conn) Publish(ctx context.Context, ev events.Event) (*jetstream.PubAck, error) {
	data, err := events.Encode(ev)
	if err != nil {
		return nil, err
	}
	return c.publish(ctx, events.Subject(ev), ev.EventHeader().ID, data)
}

func (c *Conn) publish(ctx context.Context, subject, id string, data []byte) (*jetstream.PubAck, error) {
	ack, err := c.publishOnce(ctx, subject, id, data, 0)
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		// No stream yet (an external server nobody set up, or a host that
		// has just started): create them, then retry through short
		// leadership blips in a cluster.
		if err := c.EnsureStreams(ctx); err != nil {
			return nil, fmt.Errorf("publish %s: %w", subject, err)
		}
		ack, err = c.publishOnce(ctx, subject, id, data, 2)
	}
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", subject, err)
	}
	return ack, nil
}

func (c *Conn) publishOnce(ctx context.Context, subject, id string, data []byte, retries int) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ackTimeout())
	defer cancel()
	return c.JS.Publish(ctx, subject, data,
		jetstream.WithMsgID(id),
		jetstream.WithRetryAttempts(retries),
		jetstream.WithRetryWait(100*time.Millisecond))
}

// PublishOrQueue publishes ev, or, when that fails for any reason but an
// invalid event, writes it to its repository's outbox. Long-running
// processes use it so that a bus restart never loses an event.
func (c *Conn) PublishOrQueue(ctx context.Context, ev events.Event) (Delivery, error) {
	data, err := events.Encode(ev)
	if err != nil {
		return 0, err
	}
	if _, err := c.publish(ctx, events.Subject(ev), ev.EventHeader().ID, data); err == nil {
		return Published, nil
	}
	if err := queue(c.cfg.Parent, ev.EventHeader(), data); err != nil {
		return 0, err
	}
	return Queued, nil
}

// Emit delivers one event for a one-shot command, after the state change it
// reports is durable: it finds and connects to the bus within cfg's bound,
// forwards any outbox waiting under the store parent, publishes ev and waits
// for the acknowledgement. When the bus is not running, cannot be reached
// in time or does not acknowledge, ev goes to the outbox instead and Emit
// still succeeds (Queued). It fails only for an invalid event, an outbox
// that cannot be written, or a bus directory under a store parent others
// could change (store.OwnerError), where it queues nothing either.
func Emit(ctx context.Context, cfg Config, ev events.Event) (Delivery, error) {
	data, err := events.Encode(ev)
	if err != nil {
		return 0, err
	}
	c, err := Dial(ctx, cfg)
	var notOwned *store.OwnerError
	if errors.As(err, &notOwned) {
		return 0, err
	}
	if err != nil {
		if err := queue(cfg.Parent, ev.EventHeader(), data); err != nil {
			return 0, err
		}
		return Queued, nil
	}
	defer c.Close()
	// Older events first, so a newer commit.seen replaces an older one.
	if _, err := c.Flush(ctx); err != nil {
		if err := queue(cfg.Parent, ev.EventHeader(), data); err != nil {
			return 0, err
		}
		return Queued, nil
	}
	if _, err := c.publish(ctx, events.Subject(ev), ev.EventHeader().ID, data); err != nil {
		if err := queue(cfg.Parent, ev.EventHeader(), data); err != nil {
			return 0, err
		}
		return Queued, nil
	}
	return Published, nil
}
