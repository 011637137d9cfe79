package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/events"
)

// Consumer defaults.
const (
	// DefaultAckWait is how long a delivered message may go without an ack
	// or a heartbeat (Message.KeepAlive) before it is redelivered: after a
	// consumer died, that is how long its work waits.
	DefaultAckWait = 30 * time.Second
	// DefaultMaxDeliver bounds redeliveries of one message, so a message
	// that kills its consumer every time does not do so forever.
	DefaultMaxDeliver = 5
)

// ConsumerOptions describe a durable consumer.
type ConsumerOptions struct {
	// Durable is the consumer's name, one per service, repository and (for
	// several build hosts on one bus) host: see DurableName.
	Durable string
	// Kinds are the kinds consumed; all must live in one stream.
	Kinds []events.Kind
	// RepoKey restricts the consumer to one repository; "" takes all.
	RepoKey string
	// AckWait: 0 means DefaultAckWait.
	AckWait time.Duration
	// MaxDeliver: 0 means DefaultMaxDeliver, -1 unlimited.
	MaxDeliver int
	// DeliverAll makes a new durable start at the beginning of the stream.
	// Otherwise a new commits consumer starts with the newest commit of each
	// repository and a new events consumer with events published after its
	// creation (it reconciles from the store first). An existing durable
	// keeps its position either way.
	DeliverAll bool
	// DeliverLast makes a new durable start with the last message of each
	// subject it consumes (a runner's base.ready: the newest base of each
	// repository), not only the messages published after its creation.
	DeliverLast bool
}

// DurableName builds a durable consumer name from a service ("ferry-base"),
// a store key and optionally a host name, escaped as subject tokens are so
// that the name holds no '.', '*', '>' or white space.
func DurableName(service, repoKey, host string) string {
	n := events.RepoToken(service) + "_" + events.RepoToken(repoKey)
	if host != "" {
		n += "_" + events.RepoToken(host)
	}
	return n
}

// Consumer is a durable pull consumer that hands out one message at a time
// (at most one unacknowledged per durable). A service calls Next, does the
// work, acknowledges, and only then calls Next again; it never calls Next
// concurrently on one durable. (A commit.seen replaced by a newer one while
// its build runs stops counting as unacknowledged, so a concurrent Next
// would get the newer commit during the build.)
type Consumer struct {
	c       *Conn
	cons    jetstream.Consumer
	ackWait time.Duration
}

// Consumer creates the durable consumer o describes, or updates it (a
// durable's filter, ack wait and redelivery limit may change; where it
// starts may not).
func (c *Conn) Consumer(ctx context.Context, o ConsumerOptions) (*Consumer, error) {
	if o.Durable == "" || len(o.Kinds) == 0 {
		return nil, fmt.Errorf("consumer: a durable name and at least one kind are required")
	}
	stream := StreamFor(o.Kinds[0])
	var filters []string
	for _, k := range o.Kinds {
		if StreamFor(k) != stream {
			return nil, fmt.Errorf("consumer %s: kinds %s and %s are in different streams", o.Durable, o.Kinds[0], k)
		}
		if o.RepoKey == "" {
			filters = append(filters, events.SubjectAll(k))
		} else {
			filters = append(filters, events.SubjectFor(o.RepoKey, k))
		}
	}
	cfg := jetstream.ConsumerConfig{
		Durable:        o.Durable,
		Description:    "Ferry durable consumer",
		FilterSubjects: filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        o.AckWait,
		MaxDeliver:     o.MaxDeliver,
		MaxAckPending:  1,
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = DefaultAckWait
	}
	if cfg.MaxDeliver == 0 {
		cfg.MaxDeliver = DefaultMaxDeliver
	}
	switch {
	case o.DeliverAll:
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	case stream == StreamCommits || o.DeliverLast:
		cfg.DeliverPolicy = jetstream.DeliverLastPerSubjectPolicy
	}
	if _, err := c.JS.Stream(ctx, stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		if err := c.EnsureStreams(ctx); err != nil {
			return nil, err
		}
	}
	cons, err := c.JS.CreateOrUpdateConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", o.Durable, stream, err)
	}
	return &Consumer{c: c, cons: cons, ackWait: cfg.AckWait}, nil
}

// RejectedError reports a message Next could not decode (an unknown type or
// version, or a malformed event) and has terminated, so it is never
// redelivered. The consumer logs it and goes on.
type RejectedError struct {
	Subject string
	Seq     uint64 // stream sequence
	Err     error  // *events.UnknownTypeError or *events.MalformedError
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("terminated message %d on %s: %v", e.Seq, e.Subject, e.Err)
}

func (e *RejectedError) Unwrap() error { return e.Err }

// Rejected reports whether err is a *RejectedError.
func Rejected(err error) bool {
	var r *RejectedError
	return errors.As(err, &r)
}

// DecodeMessage decodes a message's event and checks that it was published
// on the event's own subject (a base.ready of repository A published on B's
// subject is malformed).
func DecodeMessage(subject string, data []byte) (events.Event, error) {
	ev, err := events.Decode(data)
	if err != nil {
		return nil, err
	}
	if want := events.Subject(ev); want != subject {
		return nil, &events.MalformedError{Type: ev.EventHeader().Type,
			Problems: []string{fmt.Sprintf("published on %s, but the event belongs on %s", subject, want)}}
	}
	return ev, nil
}

// Next waits until a message arrives or ctx ends. A message that does not
// decode is terminated and returned as a *RejectedError; the caller logs it
// and calls Next again. Transient errors (the bus restarting) are retried
// with backoff inside Next.
func (cn *Consumer) Next(ctx context.Context) (*Message, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxInterval = 2 * time.Second
	b.MaxElapsedTime = 0
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := cn.cons.Next(jetstream.FetchContext(fctx))
		cancel()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return nil, ctx.Err()
			case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
				b.Reset()
				continue
			case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, jetstream.ErrConsumerNotFound),
				errors.Is(err, jetstream.ErrConsumerDeleted):
				return nil, fmt.Errorf("next message: %w", err)
			}
			select { // the bus is away or busy: wait and retry
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(b.NextBackOff()):
			}
			continue
		}
		b.Reset()
		ev, err := DecodeMessage(m.Subject(), m.Data())
		if err != nil {
			var seq uint64
			if md, merr := m.Metadata(); merr == nil {
				seq = md.Sequence.Stream
			}
			rej := &RejectedError{Subject: m.Subject(), Seq: seq, Err: err}
			if terr := m.TermWithReason(truncate(err.Error(), 200)); terr != nil {
				return nil, errors.Join(rej, fmt.Errorf("terminate: %w", terr))
			}
			return nil, rej
		}
		return &Message{Event: ev, Msg: m, ackWait: cn.ackWait}, nil
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// Message is a delivered event. The consumer acknowledges it when its work
// is durable, or lets it be redelivered by not doing so.
type Message struct {
	Event events.Event
	Msg   jetstream.Msg // the raw message

	ackWait time.Duration
}

// Ack acknowledges the message and waits for the server to confirm, so a
// finished piece of work is not redelivered because an ack got lost.
func (m *Message) Ack(ctx context.Context) error { return m.Msg.DoubleAck(ctx) }

// Nak asks for redelivery after delay (0: at once).
func (m *Message) Nak(delay time.Duration) error {
	if delay > 0 {
		return m.Msg.NakWithDelay(delay)
	}
	return m.Msg.Nak()
}

// Term terminates the message: it is never redelivered.
func (m *Message) Term(reason string) error { return m.Msg.TermWithReason(reason) }

// InProgress tells the server the work goes on, restarting the ack wait.
func (m *Message) InProgress() error { return m.Msg.InProgress() }

// KeepAlive sends InProgress every third of the ack wait until stop is
// called, so a long build is not redelivered to another worker while its
// builder lives; when the builder dies the heartbeats stop with it.
func (m *Message) KeepAlive() (stop func()) {
	every := m.ackWait / 3
	if every < 10*time.Millisecond {
		every = 10 * time.Millisecond
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = m.Msg.InProgress() // a lost heartbeat is retried on the next tick
			}
		}
	}()
	return func() {
		select {
		case <-done:
		default:
			close(done)
		}
		<-finished
	}
}

// Delivered is how many times the message has been delivered (1 the first time).
func (m *Message) Delivered() uint64 {
	md, err := m.Msg.Metadata()
	if err != nil {
		return 0
	}
	return md.NumDelivered
}

// Seq is the message's stream sequence.
func (m *Message) Seq() uint64 {
	md, err := m.Msg.Metadata()
	if err != nil {
		return 0
	}
	return md.Sequence.Stream
}
