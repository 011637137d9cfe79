package bus

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/events"
)

// Replay reads repository repoKey's event log from both streams: every
// stored event, oldest first, then, with follow, each new one as it arrives
// until ctx ends. each is called from one goroutine at a time; bad reports
// a message that cannot be decoded (it is skipped).
func (c *Conn) Replay(ctx context.Context, repoKey string, follow bool, each func(events.Event), bad func(subject string, err error)) error {
	var mu sync.Mutex
	var backlog []events.Event
	replayed := false
	caughtUp := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for _, stream := range []string{StreamCommits, StreamEvents} {
		cons, err := c.JS.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{events.SubjectRepo(repoKey)},
			DeliverPolicy:  jetstream.DeliverAllPolicy,
		})
		if err != nil {
			return fmt.Errorf("read the %s stream: %w", stream, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			signalled := false
			for {
				m, err := cons.Next(jetstream.FetchMaxWait(500 * time.Millisecond))
				if err != nil {
					// Nothing more stored (or the fetch timed out): this
					// stream's backlog is read.
					if !signalled {
						signalled = true
						caughtUp <- struct{}{}
					}
					if !follow || ctx.Err() != nil {
						return
					}
					continue
				}
				ev, err := DecodeMessage(m.Subject(), m.Data())
				mu.Lock()
				switch {
				case err != nil:
					bad(m.Subject(), err)
				case !replayed:
					backlog = append(backlog, ev)
				default:
					each(ev)
				}
				mu.Unlock()
			}
		}()
	}
	for range 2 {
		select {
		case <-caughtUp:
		case <-ctx.Done():
		}
	}
	mu.Lock()
	sort.SliceStable(backlog, func(i, j int) bool {
		return backlog[i].EventHeader().Time.Before(backlog[j].EventHeader().Time)
	})
	for _, ev := range backlog {
		each(ev)
	}
	backlog, replayed = nil, true
	mu.Unlock()
	if follow {
		<-ctx.Done()
	}
	wg.Wait()
	return nil
}
