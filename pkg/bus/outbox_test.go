package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/internal/bustest"
	"github.com/ferrydev/ferry/internal/eventstest"
	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/store"
)

// deadURL is a loopback address nothing listens on.
func deadURL(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "nats://" + addr
}

func oneShot(parent string) bus.Config {
	return bus.Config{Parent: parent, Name: "ferry-spawn"}
}

func TestEmitWithoutABusQueuesThenFlushDeliversOnce(t *testing.T) {
	parent := t.TempDir()

	// 1. No bus at all: queued, and fast.
	ev := events.Stamp(&events.AgentSpawned{Name: "a", Branch: "ferry/a", Worktree: "/wt/a", BaseID: "b"}, repoB)
	start := time.Now()
	d, err := bus.Emit(ctxT(t), oneShot(parent), ev)
	if err != nil || d != bus.Queued {
		t.Fatalf("Emit with no bus: %v, %v", d, err)
	}
	file := filepath.Join(bus.OutboxDir(parent, repoB), ev.ID+".json")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("outbox file: %v", err)
	}
	if back, err := events.Decode(data); err != nil || back.EventHeader().ID != ev.ID {
		t.Fatalf("outbox file holds %s: %v", data, err)
	}

	// 2. A stale bus.json (host killed): queued within the bound.
	os.MkdirAll(bus.Dir(parent), 0o755)
	os.WriteFile(store.BusFiles(bus.Dir(parent)).Token, []byte("t\n"), 0o600)
	atomicfile.WriteJSON(store.BusFiles(bus.Dir(parent)).Info, bus.Info{URL: deadURL(t), PID: 1}, 0o644)
	ev2 := events.Stamp(&events.AgentRemoved{Name: "a"}, repoB)
	d, err = bus.Emit(ctxT(t), oneShot(parent), ev2)
	if err != nil || d != bus.Queued {
		t.Fatalf("Emit with a dead bus: %v, %v", d, err)
	}
	// Not a timing test (see make bench): only a guard against hanging.
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("two emits without a bus took %v", el)
	}
	if p, _ := bus.Pending(parent); len(p) != 2 || filepath.Base(p[0]) != ev.ID+".json" {
		t.Fatalf("pending %v, want both, oldest first", p)
	}

	// 3. The bus comes back; a process connects and flushes.
	h := bustest.StartIn(t, parent)
	c := bustest.Dial(t, h, "t")
	w := eventstest.Watch(t, c.JS, "ferry.>")
	n, err := c.Flush(ctxT(t))
	if err != nil || n != 2 {
		t.Fatalf("Flush: %d, %v", n, err)
	}
	eventstest.For(w, wait, func(e *events.AgentSpawned) bool { return e.ID == ev.ID })
	eventstest.For(w, wait, func(e *events.AgentRemoved) bool { return e.ID == ev2.ID })
	if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("outbox file after flush: %v", err)
	}
	// Exactly once: a second flush has nothing, a repeat publish is a
	// duplicate, and the stream holds the two events.
	if n, err := c.Flush(ctxT(t)); n != 0 || err != nil {
		t.Fatalf("second Flush: %d, %v", n, err)
	}
	if ack, err := c.Publish(ctxT(t), ev); err != nil || !ack.Duplicate {
		t.Fatalf("republish: %+v, %v", ack, err)
	}
	if n := streamMsgs(t, c, bus.StreamEvents); n != 2 {
		t.Fatalf("stream holds %d events, want 2", n)
	}
	if n := w.Count(nil); n != 2 {
		t.Fatalf("watcher saw %d events, want 2", n)
	}
}

func TestConcurrentFlushesDeliverEachEventOnce(t *testing.T) {
	parent := t.TempDir()
	const n = 40
	var ids []string
	for i := 0; i < n; i++ {
		repo := repoA
		if i%2 == 1 {
			repo = repoB
		}
		ev := ready(repo, i)
		ids = append(ids, ev.ID)
		if err := bus.Queue(parent, ev); err != nil {
			t.Fatal(err)
		}
	}
	h := bustest.StartIn(t, parent)
	conns := []*bus.Conn{bustest.Dial(t, h, "f1"), bustest.Dial(t, h, "f2"), bustest.Dial(t, h, "f3")}
	var wg sync.WaitGroup
	counts := make([]int, len(conns))
	errs := make([]error, len(conns))
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[i], errs[i] = c.Flush(context.Background())
		}()
	}
	wg.Wait()
	total := 0
	for i := range conns {
		if errs[i] != nil {
			t.Fatalf("flush %d: %v", i, errs[i])
		}
		total += counts[i]
	}
	t.Logf("forwarded per flusher: %v (%d publishes for %d events; the rest were duplicates)", counts, total, n)
	if total < n {
		t.Fatalf("flushes forwarded %d in all, want at least %d", total, n)
	}
	if p, _ := bus.Pending(parent); len(p) != 0 {
		t.Fatalf("%d files left in outboxes", len(p))
	}
	if got := streamMsgs(t, conns[0], bus.StreamEvents); got != n {
		t.Fatalf("stream holds %d events, want exactly %d (forwarded %v)", got, n, counts)
	}
	w := eventstest.Watch(t, conns[0].JS, "ferry.>")
	eventstest.For(w, wait, func(e *events.BaseReady) bool { return e.ID == ids[n-1] })
	for _, id := range ids {
		if c := w.Count(func(e events.Event) bool { return e.EventHeader().ID == id }); c != 1 {
			t.Fatalf("event %s seen %d times", id, c)
		}
	}
}

func TestEmitWithABusFlushesOlderEventsFirst(t *testing.T) {
	parent := t.TempDir()
	old := events.Stamp(&events.CommitSeen{Commit: commit(1)}, repoA)
	if err := bus.Queue(parent, old); err != nil {
		t.Fatal(err)
	}
	h := bustest.StartIn(t, parent)
	newer := events.Stamp(&events.CommitSeen{Commit: commit(2)}, repoA)
	cfg := oneShot(parent)
	cfg.Bound = 5 * time.Second
	d, err := bus.Emit(ctxT(t), cfg, newer)
	if err != nil || d != bus.Published {
		t.Fatalf("Emit: %v, %v", d, err)
	}
	if p, _ := bus.Pending(parent); len(p) != 0 {
		t.Fatalf("outbox not flushed: %v", p)
	}
	// The commits stream keeps one per repository: the newer one, because
	// the queued older one went first.
	c := bustest.Dial(t, h, "t")
	st, err := c.JS.Stream(ctxT(t), bus.StreamCommits)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := st.GetLastMsgForSubject(ctxT(t), events.SubjectFor(repoA, events.KindCommitSeen))
	if err != nil {
		t.Fatal(err)
	}
	var got events.CommitSeen
	json.Unmarshal(msg.Data, &got)
	if got.Commit != commit(2) {
		t.Fatalf("newest commit on the bus is %s, want %s", got.Commit, commit(2))
	}
}

func TestFlushSetsAsideWhatItCannotForward(t *testing.T) {
	parent := t.TempDir()
	dir := bus.OutboxDir(parent, repoA)
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "garbage.json"), []byte("{not json"), 0o644)
	os.WriteFile(filepath.Join(dir, ".tmp-partial.json"), []byte("{"), 0o644) // atomicfile's temp: ignored
	future := `{"type":"ferry.watch.paused.v3","id":"0000000000000001aa","time":"2026-01-01T00:00:00Z","repo_key":"` + repoA + `","host":"h"}`
	os.WriteFile(filepath.Join(dir, "0000000000000001aa.json"), []byte(future), 0o644)
	good := ready(repoA, 1)
	bus.Queue(parent, good)

	h := bustest.StartIn(t, parent)
	c := bustest.Dial(t, h, "t")
	n, err := c.Flush(ctxT(t))
	if n != 1 || err == nil || !strings.Contains(err.Error(), "garbage.json") || !strings.Contains(err.Error(), "newer Ferry") {
		t.Fatalf("Flush: %d, %v", n, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "garbage.json.bad")); err != nil {
		t.Fatalf("garbage not set aside: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "0000000000000001aa.json")); err != nil {
		t.Fatalf("a newer Ferry's event was not kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-partial.json")); err != nil {
		t.Fatalf("a temporary file was touched: %v", err)
	}
}

// A long-running client survives a restart of the host (on a new port) and
// forwards what one-shot commands queued meanwhile.
func TestDialWaitFollowsARestartedHost(t *testing.T) {
	parent := t.TempDir()
	h := bustest.StartIn(t, parent)
	ctx := ctxT(t)
	c, err := bus.DialWait(ctx, bus.Config{Parent: parent, Name: "ferry-gc", Bound: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	url1 := h.URL()
	h.Shutdown()

	// The host is down: a one-shot command queues.
	ev := events.Stamp(&events.AgentRemoved{Name: "gone"}, repoA)
	if d, err := bus.Emit(ctx, oneShot(parent), ev); err != nil || d != bus.Queued {
		t.Fatalf("Emit while down: %v, %v", d, err)
	}

	h2 := bustest.StartIn(t, parent)
	if h2.URL() == url1 {
		t.Logf("the new host got the old port by chance: %s", url1)
	}
	// The long-running client reconnects through the new bus.json and
	// flushes the outbox on its own.
	w := eventstest.Watch(t, bustest.Dial(t, h2, "w").JS, "ferry.>")
	eventstest.For(w, wait, func(e *events.AgentRemoved) bool { return e.ID == ev.ID })
	if _, err := c.Publish(ctx, ready(repoA, 9)); err != nil {
		t.Fatalf("publish after the restart: %v", err)
	}
}

func TestDialWaitWaitsForTheHost(t *testing.T) {
	parent := t.TempDir()
	done := make(chan error, 1)
	go func() {
		c, err := bus.DialWait(context.Background(), bus.Config{Parent: parent, Name: "ferry-base"}, nil)
		if err == nil {
			c.Close()
		}
		done <- err
	}()
	bustest.StartIn(t, parent)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("DialWait did not connect after the host started")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := bus.DialWait(ctx, bus.Config{Parent: t.TempDir()}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("DialWait with a cancelled context: %v", err)
	}
}
