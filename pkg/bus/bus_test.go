package bus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/internal/bustest"
	"github.com/ferrydev/ferry/internal/eventstest"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/failure"
)

const (
	repoA = "alpha-1a2b3c4d5e6f"
	repoB = "my.beta-0a0b0c0d0e0f" // a '.' in the key: escaped in subjects
	wait  = 10 * time.Second
)

func commit(i int) string { return fmt.Sprintf("%040x", i) }

func ready(repo string, i int) *events.BaseReady {
	return events.Stamp(&events.BaseReady{BaseID: commit(i) + "-fp", Commit: commit(i), Fingerprint: "fp"}, repo)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func streamMsgs(t *testing.T, c *bus.Conn, name string) uint64 {
	t.Helper()
	s, err := c.JS.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.Msgs
}

func TestDiscover(t *testing.T) {
	parent := t.TempDir()
	_, err := bus.Discover(bus.Config{Parent: parent})
	if !errors.Is(err, bus.ErrNoBus) || failure.KindOf(err) != failure.Prereq || failure.HintOf(err) == "" {
		t.Fatalf("no bus: %v", err)
	}
	h := bustest.StartIn(t, parent)
	ep, err := bus.Discover(bus.Config{Parent: parent})
	if err != nil || ep.URL != h.URL() || ep.Token != h.Token() || ep.Source != filepath.Join(parent, "bus", "bus.json") {
		t.Fatalf("from bus.json: %+v, %v", ep, err)
	}
	// FERRY_NATS_URL is the settings' business (config.Settings.BusURL):
	// discovery no longer reads it.
	t.Setenv("FERRY_NATS_URL", "nats://env.example:4222")
	if ep, _ := bus.Discover(bus.Config{Parent: parent}); ep.URL != h.URL() {
		t.Fatalf("discovery read FERRY_NATS_URL: %+v", ep)
	}
	if ep, _ := bus.Discover(bus.Config{Parent: parent, URL: "nats://cfg:4222"}); ep.URL != "nats://cfg:4222" || ep.Source != "config" {
		t.Fatalf("an explicit URL does not win: %+v", ep)
	}

	// A one-shot client finds the bus through bus.json and the token file.
	c, err := bus.Dial(ctxT(t), bus.Config{Parent: parent, Name: "t", Bound: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestStreamsCoverEveryKindOnce(t *testing.T) {
	for _, k := range events.Kinds() {
		subj := events.SubjectFor("my.repo-1", k)
		var in []string
		for _, s := range bus.Streams(1) {
			for _, f := range s.Subjects {
				if eventstest.Matches(f, subj) {
					in = append(in, s.Name)
				}
			}
		}
		if len(in) != 1 || in[0] != bus.StreamFor(k) {
			t.Errorf("%s (%s) is in streams %v, want [%s]", k, subj, in, bus.StreamFor(k))
		}
	}
}

func TestEnsureStreamsIsIdempotentAndKeepsReplicas(t *testing.T) {
	h := bustest.Start(t) // Start ensured them once
	c := bustest.Dial(t, h, "t")
	for i := 0; i < 2; i++ {
		if err := bus.EnsureStreams(ctxT(t), c.JS, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range bus.Streams(1) {
		s, err := c.JS.Stream(ctxT(t), want.Name)
		if err != nil {
			t.Fatal(err)
		}
		got := s.CachedInfo().Config
		if got.MaxMsgsPerSubject != want.MaxMsgsPerSubject || got.Duplicates != want.Duplicates ||
			got.Retention != want.Retention || got.Replicas != 1 || got.Storage != jetstream.FileStorage {
			t.Errorf("%s: %+v", want.Name, got)
		}
	}
	// R3 cannot be had on one server: asking for it is an error, not a
	// silent R1.
	if err := bus.EnsureStreams(ctxT(t), c.JS, 3); err == nil {
		t.Fatal("R3 streams on a single server")
	}
}

func TestPublishConsumeRoundTrip(t *testing.T) {
	h := bustest.Start(t)
	pub := bustest.Dial(t, h, "publisher")
	sub := bustest.Dial(t, h, "consumer")
	w := eventstest.Watch(t, sub.JS, events.SubjectRepo(repoB))

	cons, err := sub.Consumer(ctxT(t), bus.ConsumerOptions{
		Durable: bus.DurableName("ferry-gc", repoB, "host.example"),
		Kinds:   []events.Kind{events.KindBaseReady, events.KindAgentRemoved},
		RepoKey: repoB,
	})
	if err != nil {
		t.Fatal(err)
	}

	ev := ready(repoB, 1)
	ack, err := pub.Publish(ctxT(t), ev)
	if err != nil || ack.Stream != bus.StreamEvents || ack.Duplicate {
		t.Fatalf("publish: %+v, %v", ack, err)
	}
	// Another repository's event and another kind are not for this consumer.
	if _, err := pub.Publish(ctxT(t), ready(repoA, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctxT(t), events.Stamp(&events.BaseBuilding{BaseID: "x", Commit: commit(3), Fingerprint: "fp"}, repoB)); err != nil {
		t.Fatal(err)
	}
	rm := events.Stamp(&events.AgentRemoved{Name: "a", BaseID: commit(1) + "-fp"}, repoB)
	if _, err := pub.Publish(ctxT(t), rm); err != nil {
		t.Fatal(err)
	}

	got := eventstest.For(w, wait, func(e *events.BaseReady) bool { return e.ID == ev.ID })
	if got.Commit != ev.Commit || got.RepoKey != repoB || !got.Time.Equal(ev.Time) {
		t.Fatalf("watched %+v, published %+v", got, ev)
	}
	eventstest.For(w, wait, func(e *events.AgentRemoved) bool { return e.ID == rm.ID })
	if n := w.Count(func(e events.Event) bool { return e.EventHeader().RepoKey == repoA }); n != 0 {
		t.Fatalf("the watcher of %s saw %d events of %s", repoB, n, repoA)
	}

	for _, want := range []events.Event{ev, rm} {
		m, err := cons.Next(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if m.Event.EventHeader().ID != want.EventHeader().ID || m.Delivered() != 1 {
			t.Fatalf("consumed %+v (delivery %d), want %s", m.Event, m.Delivered(), want.EventHeader().ID)
		}
		if err := m.Ack(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if m, err := cons.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third message for the consumer: %+v, %v", m, err)
	}
}

func TestDuplicatePublishIsDeduplicated(t *testing.T) {
	h := bustest.Start(t)
	c := bustest.Dial(t, h, "t")
	ev := ready(repoA, 1)
	a1, err := c.Publish(ctxT(t), ev)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := c.Publish(ctxT(t), ev)
	if err != nil {
		t.Fatal(err)
	}
	if a1.Duplicate || !a2.Duplicate || a1.Sequence != a2.Sequence {
		t.Fatalf("acks %+v then %+v: want the second a duplicate of the first", a1, a2)
	}
	if n := streamMsgs(t, c, bus.StreamEvents); n != 1 {
		t.Fatalf("stream holds %d messages, want 1", n)
	}
	w := eventstest.Watch(t, c.JS, "ferry.>")
	eventstest.For(w, wait, func(e *events.BaseReady) bool { return e.ID == ev.ID })
	if n := w.Count(nil); n != 1 {
		t.Fatalf("watcher saw %d events", n)
	}
}

func TestConsumerTerminatesUndecodableAndKeepsServing(t *testing.T) {
	h := bustest.Start(t)
	c := bustest.Dial(t, h, "t")
	w := eventstest.Watch(t, c.JS, events.SubjectRepo(repoA))
	cons, err := c.Consumer(ctxT(t), bus.ConsumerOptions{
		Durable: bus.DurableName("ferry-gc", repoA, ""), Kinds: []events.Kind{events.KindBaseReady}, RepoKey: repoA,
		AckWait: 500 * time.Millisecond, // a message not terminated would come back quickly
	})
	if err != nil {
		t.Fatal(err)
	}
	subj := events.SubjectFor(repoA, events.KindBaseReady)
	good := ready(repoA, 7)
	otherRepo, _ := events.Encode(ready(repoB, 8)) // valid, but on repoA's subject
	raw := [][]byte{
		[]byte(`{"type": "ferry.base.ready.v1", "id": `), // not JSON
		[]byte(`{"type":"ferry.base.ready.v9","id":"x1","time":"2026-01-01T00:00:00Z","repo_key":"` + repoA + `","host":"h"}`),
		[]byte(`{"type":"ferry.base.ready.v1","id":"x2","time":"2026-01-01T00:00:00Z","repo_key":"` + repoA + `","host":"h"}`),
		otherRepo,
	}
	for i, data := range raw {
		if _, err := c.JS.Publish(ctxT(t), subj, data, jetstream.WithMsgID(fmt.Sprintf("raw-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Publish(ctxT(t), good); err != nil {
		t.Fatal(err)
	}

	var unknown *events.UnknownTypeError
	var malformed *events.MalformedError
	wantErr := []func(error) bool{
		func(err error) bool { return errors.As(err, &malformed) },
		func(err error) bool { return errors.As(err, &unknown) && unknown.Version == 9 },
		func(err error) bool {
			return errors.As(err, &malformed) && strings.Contains(err.Error(), "base_id is missing")
		},
		func(err error) bool { return errors.As(err, &malformed) && strings.Contains(err.Error(), "belongs on") },
	}
	for i, ok := range wantErr {
		_, err := cons.Next(ctxT(t))
		if !bus.Rejected(err) || !events.Undecodable(err) || !ok(err) {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	m, err := cons.Next(ctxT(t))
	if err != nil || m.Event.EventHeader().ID != good.ID {
		t.Fatalf("after the bad ones: %+v, %v", m, err)
	}
	// Terminated messages are not redelivered even after their ack wait.
	if err := m.Ack(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if m, err := cons.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("redelivered: %+v, %v", m, err)
	}

	// The watcher classifies them the same way.
	eventstest.For(w, wait, func(e *events.BaseReady) bool { return e.ID == good.ID })
	if bad := w.Bad(); len(bad) != 4 || !events.Undecodable(w.WaitBad(wait).Err) {
		t.Fatalf("watcher's undecodable messages: %d", len(bad))
	}
}

func TestCommitsKeepTheNewestPerRepository(t *testing.T) {
	h := bustest.Start(t)
	c := bustest.Dial(t, h, "t")
	seen := func(repo string, i int) *events.CommitSeen {
		return events.Stamp(&events.CommitSeen{Commit: commit(i), Ref: "HEAD"}, repo)
	}
	for i := 1; i <= 3; i++ {
		if _, err := c.Publish(ctxT(t), seen(repoA, i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Publish(ctxT(t), seen(repoB, 10)); err != nil {
		t.Fatal(err)
	}
	if n := streamMsgs(t, c, bus.StreamCommits); n != 2 {
		t.Fatalf("commits stream holds %d messages, want one per repository", n)
	}
	// A new builder starts with the newest commit of its repository.
	cons, err := c.Consumer(ctxT(t), bus.ConsumerOptions{
		Durable: bus.DurableName("ferry-base", repoA, ""), Kinds: []events.Kind{events.KindCommitSeen}, RepoKey: repoA,
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Event.(*events.CommitSeen).Commit; got != commit(3) {
		t.Fatalf("builder got %s, want the newest %s", got, commit(3))
	}
}

// The builder's pattern: while it works on one commit, the ref moves five
// times; after its ack it gets only the newest, then nothing.
func TestMovesDuringABuildYieldOneMoreBuild(t *testing.T) {
	h := bustest.Start(t)
	c := bustest.Dial(t, h, "t")
	cons, err := c.Consumer(ctxT(t), bus.ConsumerOptions{
		Durable: bus.DurableName("ferry-base", repoA, ""), Kinds: []events.Kind{events.KindCommitSeen}, RepoKey: repoA,
	})
	if err != nil {
		t.Fatal(err)
	}
	pub := func(i int) {
		if _, err := c.Publish(ctxT(t), events.Stamp(&events.CommitSeen{Commit: commit(i)}, repoA)); err != nil {
			t.Fatal(err)
		}
	}
	pub(1)
	m, err := cons.Next(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 6; i++ {
		pub(i)
	}
	if err := m.Ack(ctxT(t)); err != nil {
		t.Fatalf("ack of a replaced message: %v", err)
	}
	m2, err := cons.Next(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := m2.Event.(*events.CommitSeen).Commit; got != commit(6) || m2.Delivered() != 1 {
		t.Fatalf("after the build: %s (delivery %d), want %s", got, m2.Delivered(), commit(6))
	}
	m2.Ack(ctxT(t))
	idle, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel2()
	if x, err := cons.Next(idle); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third build: %+v, %v", x, err)
	}
}

// While its consumer heartbeats, a message is not handed out again, however
// many ack waits pass; a consumer that dies (stops heartbeating without
// acking) has it redelivered after the ack wait.
func TestHeartbeatHoldsAndSilenceRedelivers(t *testing.T) {
	h := bustest.Start(t)
	c := bustest.Dial(t, h, "t")
	cons, err := c.Consumer(ctxT(t), bus.ConsumerOptions{
		Durable: "redeliver", Kinds: []events.Kind{events.KindCommitSeen}, AckWait: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := events.Stamp(&events.CommitSeen{Commit: commit(1)}, repoA)
	if _, err := c.Publish(ctxT(t), ev); err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(ctxT(t))
	if err != nil || m.Delivered() != 1 {
		t.Fatalf("%+v, %v", m, err)
	}
	stop := m.KeepAlive()
	busy, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond) // four ack waits
	defer cancel()
	if x, err := cons.Next(busy); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("handed out again while heartbeating: %+v, %v", x, err)
	}
	stop()
	m2, err := cons.Next(ctxT(t)) // no ack, no heartbeat: it comes back
	if err != nil || m2.Event.EventHeader().ID != ev.ID || m2.Delivered() != 2 {
		t.Fatalf("redelivery: %+v, %v", m2, err)
	}
	m2.Ack(ctxT(t))
}

func TestEventsPackageStaysFreeOfNATS(t *testing.T) {
	out := goListDeps(t, "./events")
	if strings.Contains(out, "github.com/nats-io/") {
		t.Fatalf("package events imports NATS:\n%s", grepNATS(out))
	}
}

// A dependency test: the binaries run on every cargo and
// rustc call must not link NATS.
func goListDeps(t *testing.T, pkg string) string {
	t.Helper()
	goBin, err := goTool()
	if err != nil {
		t.Skipf("no go command to list dependencies: %v", err)
	}
	cmd := execCommand(goBin, "list", "-deps", pkg)
	cmd.Dir = moduleRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	return string(out)
}

func grepNATS(out string) string {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "nats-io") {
			b.WriteString("  " + l + "\n")
		}
	}
	return b.String()
}

func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = parent
	}
}
