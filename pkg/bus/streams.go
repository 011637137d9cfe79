package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/failure"
)

// Stream names.
const (
	StreamCommits = "FERRY_COMMITS"
	StreamEvents  = "FERRY_EVENTS"
)

// DedupWindow is how long JetStream remembers a Nats-Msg-Id. The outbox is
// the reason it is long: a publish whose acknowledgement was lost is also
// written to the outbox, and the outbox may be forwarded only when the next
// process connects, possibly hours later; within the window the second copy
// is dropped. The server keeps one small entry per event in the window.
const DedupWindow = 24 * time.Hour

// EventsMaxAge and EventsMaxBytes bound FERRY_EVENTS. Events are triggers
// and history, not truth: a consumer away for longer reconciles from the
// store on start, and `ferry events` shows a month.
const (
	EventsMaxAge   = 30 * 24 * time.Hour
	EventsMaxBytes = 256 << 20
)

// Streams returns the configuration of Ferry's streams with the given
// replica count (1 for a single server, 3 for a three-node cluster).
//
// FERRY_COMMITS holds commit.seen with limits retention and at most one
// message per subject (discard old): a newer commit of a repository replaces
// an older one still waiting, so a builder that finishes a long build finds
// only the newest commit, and intermediate ones are skipped. Work-queue
// retention would also drop a message once acked, but it allows only one
// consumer per subject, and every build host runs its own builder with its
// own durable consumer that must see every new commit; with limits
// retention each durable keeps its own position, which is what work-queue
// semantics per builder needs. The message a builder is working on may be
// replaced meanwhile; acknowledging a replaced message is harmless, and a
// builder killed mid-build gets the newest commit (or the same one, if none
// came) redelivered.
//
// FERRY_EVENTS holds base.*, agent.* and gc.* events with limits retention,
// bounded by EventsMaxAge and EventsMaxBytes.
//
// Both are file-backed and deduplicate by Nats-Msg-Id within DedupWindow.
func Streams(replicas int) []jetstream.StreamConfig {
	if replicas <= 0 {
		replicas = 1
	}
	return []jetstream.StreamConfig{
		{
			Name:              StreamCommits,
			Description:       "Ferry: the newest commit seen per repository",
			Subjects:          []string{events.SubjectAll(events.KindCommitSeen)},
			Retention:         jetstream.LimitsPolicy,
			MaxMsgsPerSubject: 1,
			MaxMsgs:           -1,
			MaxBytes:          -1,
			Discard:           jetstream.DiscardOld,
			Storage:           jetstream.FileStorage,
			Replicas:          replicas,
			Duplicates:        DedupWindow,
		},
		{
			Name:              StreamEvents,
			Description:       "Ferry: base, agent and gc events",
			Subjects:          []string{"ferry.*.base.*", "ferry.*.agent.*", "ferry.*.gc.*"},
			Retention:         jetstream.LimitsPolicy,
			MaxMsgsPerSubject: -1,
			MaxMsgs:           -1,
			MaxBytes:          EventsMaxBytes,
			MaxAge:            EventsMaxAge,
			Discard:           jetstream.DiscardOld,
			Storage:           jetstream.FileStorage,
			Replicas:          replicas,
			Duplicates:        DedupWindow,
		},
	}
}

// StreamFor names the stream that holds events of kind k.
func StreamFor(k events.Kind) string {
	if k == events.KindCommitSeen {
		return StreamCommits
	}
	return StreamEvents
}

// EnsureStreams creates Ferry's streams, or brings existing ones to the
// configuration of Streams; it is idempotent and safe to run concurrently.
// With replicas 0, a new stream is R1 and an existing one keeps its replica
// count, so a one-shot client never shrinks a cluster's R3 stream.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, replicas int) error {
	for _, want := range Streams(replicas) {
		if err := ensureStream(ctx, js, want, replicas == 0); err != nil {
			return err
		}
	}
	return nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, keepReplicas bool) error {
	retries := 0
	for attempt := 0; ; attempt++ {
		s, err := js.Stream(ctx, want.Name)
		if unanswered(ctx, err) && retries < maxUnanswered {
			// In a cluster, a stream another client has just created does
			// not answer until its replicas have elected a leader.
			retries++
			continue
		}
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			_, err = js.CreateStream(ctx, want)
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) && attempt == 0 {
				continue // created concurrently with another config: compare it
			}
			if unanswered(ctx, err) && retries < maxUnanswered {
				retries++
				continue
			}
			if err != nil {
				return streamError(want.Name, "create", err)
			}
			return nil
		}
		if err != nil {
			return streamError(want.Name, "look up", err)
		}
		have := s.CachedInfo().Config
		if keepReplicas {
			want.Replicas = have.Replicas
		}
		if sameStream(have, want) {
			return nil
		}
		if _, err := js.UpdateStream(ctx, want); err != nil {
			return streamError(want.Name, "update", err)
		}
		return nil
	}
}

// maxUnanswered bounds the retries of a stream request that got no answer
// in time (each waits for the JetStream API timeout, 5 s by default).
const maxUnanswered = 5

// unanswered reports a JetStream API request that timed out while ctx is
// still alive: a cluster electing a leader, worth asking again.
func unanswered(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil &&
		(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout))
}

// sameStream compares the fields Streams decides.
func sameStream(a, b jetstream.StreamConfig) bool {
	return slices.Equal(a.Subjects, b.Subjects) && a.Retention == b.Retention &&
		a.MaxMsgsPerSubject == b.MaxMsgsPerSubject && a.MaxMsgs == b.MaxMsgs &&
		a.MaxBytes == b.MaxBytes && a.MaxAge == b.MaxAge && a.Discard == b.Discard &&
		a.Storage == b.Storage && a.Replicas == b.Replicas && a.Duplicates == b.Duplicates
}

func streamError(name, op string, err error) error {
	return failure.Wrap(failure.Prereq, err,
		"the server must have JetStream enabled; a stream made by something else under this name must be removed (nats stream rm "+name+")",
		"%s stream %s", op, name)
}

// EnsureStreams ensures the streams on c with c's replica count.
func (c *Conn) EnsureStreams(ctx context.Context) error {
	c.ensureMu.Lock()
	defer c.ensureMu.Unlock()
	if err := EnsureStreams(ctx, c.JS, c.cfg.Replicas); err != nil {
		return fmt.Errorf("bus at %s: %w", c.ep.URL, err)
	}
	return nil
}
