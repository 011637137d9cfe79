// Package eventstest lets a test wait for an event instead of sleeping.
//
// A Watcher reads Ferry's streams from their beginning with ordered
// consumers, so it sees what the streams hold (a deduplicated publish shows
// once) and an event published before Watch was called as well as after.
// Wait returns the first event matching a predicate, or fails the test when
// none arrives in time:
//
//	w := eventstest.Watch(t, conn.JS, events.SubjectRepo(key))
//	runTheBuilder()
//	ready := eventstest.For(w, 10*time.Second, func(e *events.BaseReady) bool { return e.Commit == c })
//
// It lives under internal/ and not beside the schemas in events/ because it
// reads Ferry's streams (pkg/bus.Streams) and decodes messages as the
// consumers do (pkg/bus.DecodeMessage): pkg/bus imports events, so a helper
// in events/ importing pkg/bus would make the schemas depend on the
// transport built on them.
package eventstest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/bus"
)

// Bad is a message on a watched subject that did not decode.
type Bad struct {
	Subject string
	Data    []byte
	Err     error // *events.UnknownTypeError or *events.MalformedError
}

// Watcher records the events on a subject filter.
type Watcher struct {
	t      testing.TB
	filter string

	mu      sync.Mutex
	arrived chan struct{} // closed and replaced on every arrival
	seen    []events.Event
	bad     []Bad
}

// Watch starts recording every event whose subject matches filter (NATS
// wildcards allowed, e.g. events.SubjectRepo(key) or "ferry.>") in Ferry's
// streams, from their first message on. It stops when the test ends.
func Watch(t testing.TB, js jetstream.JetStream, filter string) *Watcher {
	t.Helper()
	w := &Watcher{t: t, filter: filter, arrived: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 0
	for _, cfg := range bus.Streams(1) {
		if !collides(filter, cfg.Subjects) {
			continue
		}
		cons, err := js.OrderedConsumer(ctx, cfg.Name, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("eventstest: watch %s on %s: %v", filter, cfg.Name, err)
		}
		cc, err := cons.Consume(w.record)
		if err != nil {
			t.Fatalf("eventstest: watch %s on %s: %v", filter, cfg.Name, err)
		}
		t.Cleanup(cc.Stop)
		n++
	}
	if n == 0 {
		t.Fatalf("eventstest: no Ferry stream holds %s (is the bus up and its streams ensured?)", filter)
	}
	return w
}

func (w *Watcher) record(m jetstream.Msg) {
	if !Matches(w.filter, m.Subject()) {
		return
	}
	ev, err := bus.DecodeMessage(m.Subject(), m.Data())
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.bad = append(w.bad, Bad{Subject: m.Subject(), Data: append([]byte(nil), m.Data()...), Err: err})
	} else {
		w.seen = append(w.seen, ev)
	}
	close(w.arrived)
	w.arrived = make(chan struct{})
}

// Wait returns the first recorded event for which match returns true (nil
// matches any), waiting up to timeout for it to arrive; on timeout it fails
// the test, listing what did arrive. Call it from the test's goroutine.
func (w *Watcher) Wait(timeout time.Duration, match func(events.Event) bool) events.Event {
	w.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		for _, e := range w.seen {
			if match == nil || match(e) {
				w.mu.Unlock()
				return e
			}
		}
		arrived := w.arrived
		w.mu.Unlock()
		select {
		case <-arrived:
		case <-deadline.C:
			w.t.Fatalf("eventstest: no matching event on %s within %v; saw %s", w.filter, timeout, w.summary())
			return nil
		}
	}
}

// For is Wait for events of type E: it returns the first E for which match
// returns true (nil matches any E).
func For[E events.Event](w *Watcher, timeout time.Duration, match func(E) bool) E {
	w.t.Helper()
	e := w.Wait(timeout, func(e events.Event) bool {
		x, ok := e.(E)
		return ok && (match == nil || match(x))
	})
	x, _ := e.(E)
	return x
}

// WaitBad returns the first recorded message that did not decode, waiting
// up to timeout; on timeout it fails the test.
func (w *Watcher) WaitBad(timeout time.Duration) Bad {
	w.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		if len(w.bad) > 0 {
			b := w.bad[0]
			w.mu.Unlock()
			return b
		}
		arrived := w.arrived
		w.mu.Unlock()
		select {
		case <-arrived:
		case <-deadline.C:
			w.t.Fatalf("eventstest: no undecodable message on %s within %v", w.filter, timeout)
			return Bad{}
		}
	}
}

// Count is how many recorded events match (nil matches all). Combine it with
// a Wait for a later event, or with the stream's message count, to assert
// that something arrived exactly once without sleeping.
func (w *Watcher) Count(match func(events.Event) bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, e := range w.seen {
		if match == nil || match(e) {
			n++
		}
	}
	return n
}

// Events returns the recorded events in arrival order.
func (w *Watcher) Events() []events.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]events.Event(nil), w.seen...)
}

// Bad returns the recorded messages that did not decode.
func (w *Watcher) Bad() []Bad {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Bad(nil), w.bad...)
}

func (w *Watcher) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen)+len(w.bad) == 0 {
		return "nothing"
	}
	var b strings.Builder
	for _, e := range w.seen {
		fmt.Fprintf(&b, "\n  %s %s", events.Subject(e), e.EventHeader().ID)
	}
	for _, x := range w.bad {
		fmt.Fprintf(&b, "\n  %s (undecodable: %v)", x.Subject, x.Err)
	}
	return b.String()
}

// Matches reports whether subject matches the NATS filter ('*' is one
// token, a final '>' one or more).
func Matches(filter, subject string) bool {
	f := strings.Split(filter, ".")
	s := strings.Split(subject, ".")
	for i, tok := range f {
		if tok == ">" && i == len(f)-1 {
			return len(s) > i
		}
		if i >= len(s) || tok != "*" && tok != s[i] {
			return false
		}
	}
	return len(f) == len(s)
}

// collides reports whether some subject could match both filter and one of
// subjects.
func collides(filter string, subjects []string) bool {
	for _, s := range subjects {
		if overlap(strings.Split(filter, "."), strings.Split(s, ".")) {
			return true
		}
	}
	return false
}

func overlap(a, b []string) bool {
	for i := 0; ; i++ {
		switch {
		case i == len(a) || i == len(b):
			return len(a) == len(b)
		case a[i] == ">" || b[i] == ">":
			return true
		case a[i] != "*" && b[i] != "*" && a[i] != b[i]:
			return false
		}
	}
}
