package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/internal/bustest"
	"github.com/ferrydev/ferry/internal/eventstest"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/pipeline"
	"github.com/ferrydev/ferry/pkg/pipeline/watcher"
)

// The builder killed with SIGKILL in the middle of a build: nothing of the
// half-built base is published; the commit.seen it was working on is
// redelivered to the next builder, which discards the partial base and
// builds the commit exactly once more.
func TestBuilderKilledMidBuild(t *testing.T) {
	w := newWorld(t)
	w.open()
	w.start(nil, "ferry-watch", "--interval", "0.1")
	conn := dialHosted(t, w.home)
	ev := eventstest.Watch(t, conn.JS, events.SubjectRepo(w.store.Key))
	builderVars := []string{"FERRY_ACK_WAIT=2s"}
	builder := w.start(builderVars, "ferry-base", "--follow")

	// The pipeline builds the commit checked out at startup.
	first := eventstest.For(ev, wait, readyFor(w.repo.Head))
	w.checkPublished(first.BaseID)

	w.close()
	c := w.commit()
	b := eventstest.For(ev, wait, building(c))
	w.waitStarted()
	builder.kill(t)

	w.checkNotPublished(b.BaseID)
	if cur := w.current(); cur != first.BaseID {
		t.Fatalf("current base after the kill is %q, want the previous %s", cur, first.BaseID)
	}

	w.open()
	w.start(builderVars, "ferry-base", "--follow")
	eventstest.For(ev, wait, readyFor(c))
	settle(t, conn, ev, w.store.Key)

	w.checkPublished(b.BaseID)
	if n := count(ev, readyFor(c)); n != 1 {
		t.Errorf("%d base.ready events for %s, want 1", n, short(c))
	}
	// One base.building per attempt: the killed one and the rebuild.
	if n := count(ev, building(c)); n != 2 {
		t.Errorf("%d base.building events for %s, want 2", n, short(c))
	}
	// The rebuild came from redelivery, not from a second announcement.
	if n := count(ev, seen(c)); n != 1 {
		t.Errorf("%d commit.seen events for %s, want 1", n, short(c))
	}
	if n := count[*events.BaseFailed](ev, nil); n != 0 {
		t.Errorf("%d base.failed events, want none", n)
	}
	// Nothing is left of the killed build besides the rebuilt base.
	ents, err := os.ReadDir(w.store.BasesDir())
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range ents {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	if len(dirs) != 2 {
		t.Errorf("base directories %v, want the two ready bases", dirs)
	}
}

// The process hosting the bus killed with SIGKILL: bus.json is stale, and
// one-shot commands neither hang nor fail: they queue their events in the
// outbox. A new host (new port) gets every queued event exactly once, even
// when the outbox is forwarded by several processes.
func TestBusHostKilled(t *testing.T) {
	w := newWorld(t)
	w.open()
	watcher := w.start(nil, "ferry-watch", "--interval", "0.1")
	conn := dialHosted(t, w.home)
	ev := eventstest.Watch(t, conn.JS, events.SubjectRepo(w.store.Key))
	w.start(nil, "ferry-base", "--follow")
	first := eventstest.For(ev, wait, readyFor(w.repo.Head))
	w.checkPublished(first.BaseID)
	oldInfo, err := bus.ReadInfo(bus.Dir(w.home))
	if err != nil {
		t.Fatal(err)
	}

	watcher.kill(t)
	conn.Close()
	if _, err := bus.ReadInfo(bus.Dir(w.home)); err != nil {
		t.Fatalf("a host killed with SIGKILL cannot remove bus.json, but it is gone: %v", err)
	}

	// One-shot commands against the dead bus: each finishes within a few
	// seconds. The connection bound is 300 ms; a command that waited for
	// the bus would take at least the five seconds Emit allows per event.
	const quick = 4 * time.Second
	out, took := w.run("ferry", "spawn", "a1", "--json")
	var spawned struct {
		Worktree string `json:"worktree"`
	}
	if err := json.Unmarshal([]byte(out), &spawned); err != nil || spawned.Worktree == "" {
		t.Fatalf("ferry spawn output %q: %v", out, err)
	}
	timings := []string{fmt.Sprintf("spawn %v", took.Round(time.Millisecond))}
	check := func(what string, took time.Duration) {
		if took > quick {
			t.Errorf("%s took %v with the bus host dead, want under %v", what, took, quick)
		}
	}
	check("ferry spawn", took)
	_, took = w.run("ferry", "rm", "a1")
	check("ferry rm", took)
	timings = append(timings, fmt.Sprintf("rm %v", took.Round(time.Millisecond)))
	c := w.commit()
	out, took = w.run("ferry", "base", "--json")
	// Without the warm command and the final sync of the filesystem, which
	// depend on the build and the disk, not on the bus.
	var rec base.Record
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.Commit != c {
		t.Fatalf("ferry base --json output %q: %v", out, err)
	}
	took -= time.Duration((rec.Timings.Warm + rec.Timings.Finish) * float64(time.Second))
	check("ferry base (besides warming and syncing)", took)
	timings = append(timings, fmt.Sprintf("base %v (besides warming and syncing)", took.Round(time.Millisecond)))
	t.Logf("one-shot commands with the bus host dead: %s", strings.Join(timings, ", "))

	// Their events wait in the outbox.
	queued := outbox(t, w.home)
	wantKinds := map[events.Kind]int{events.KindAgentSpawned: 1, events.KindAgentRemoved: 1,
		events.KindBaseBuilding: 1, events.KindBaseReady: 1}
	gotKinds := map[events.Kind]int{}
	for _, q := range queued {
		gotKinds[q.kind]++
	}
	if fmt.Sprint(gotKinds) != fmt.Sprint(wantKinds) {
		t.Fatalf("outbox holds %v, want %v", gotKinds, wantKinds)
	}
	saved := map[string][]byte{}
	for _, q := range queued {
		saved[q.path] = q.data
	}

	// A new host, on a new port: the watcher and the builder (which
	// reconnects by re-reading bus.json) both forward the outbox.
	w.start(nil, "ferry-watch", "--interval", "0.1")
	poll(t, "a new bus.json", func() bool {
		in, err := bus.ReadInfo(bus.Dir(w.home))
		return err == nil && in.URL != oldInfo.URL && in.PID != oldInfo.PID
	})
	conn = dialHosted(t, w.home)
	ev = eventstest.Watch(t, conn.JS, events.SubjectRepo(w.store.Key))
	for _, q := range queued {
		ev.Wait(wait, func(e events.Event) bool { return e.EventHeader().ID == q.id })
	}
	poll(t, "the outbox to empty", func() bool { return len(outbox(t, w.home)) == 0 })

	// Forward the same files again, from two processes at once: this test
	// and a one-shot command, which forwards the outbox before its own event.
	for p, data := range saved {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	flushed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		fc, err := bus.Dial(ctx, bus.Config{Parent: w.home, Name: "flush-test", Bound: 5 * time.Second})
		if err != nil {
			flushed <- err
			return
		}
		defer fc.Close()
		_, err = fc.Flush(ctx)
		flushed <- err
	}()
	w.run("ferry", "spawn", "a2")
	if err := <-flushed; err != nil {
		t.Fatalf("flush: %v", err)
	}
	poll(t, "the outbox to empty again", func() bool { return len(outbox(t, w.home)) == 0 })
	eventstest.For(ev, wait, func(e *events.AgentSpawned) bool { return e.Name == "a2" })
	settle(t, conn, ev, w.store.Key)

	for _, q := range queued {
		if n := ev.Count(func(e events.Event) bool { return e.EventHeader().ID == q.id }); n != 1 {
			t.Errorf("event %s (%s) arrived %d times, want once", q.id, q.kind, n)
		}
	}
	if n := count(ev, func(e *events.AgentSpawned) bool { return e.Name == "a1" }); n != 1 {
		t.Errorf("%d agent.spawned for a1, want 1", n)
	}
	if n := count(ev, func(e *events.AgentRemoved) bool { return e.Name == "a1" }); n != 1 {
		t.Errorf("%d agent.removed for a1, want 1", n)
	}
	if n := count(ev, building(c)); n != 1 {
		t.Errorf("%d base.building for %s, want 1", n, short(c))
	}
	if n := count(ev, readyFor(c)); n != 1 {
		t.Errorf("%d base.ready for %s, want 1", n, short(c))
	}
}

type queuedEvent struct {
	path, id string
	kind     events.Kind
	data     []byte
}

// outbox reads the queued events under the store parent.
func outbox(t *testing.T, parent string) []queuedEvent {
	t.Helper()
	files, err := bus.Pending(parent)
	if err != nil {
		t.Fatal(err)
	}
	var out []queuedEvent
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // forwarded meanwhile
		}
		e, err := events.Decode(data)
		if err != nil {
			t.Fatalf("outbox file %s: %v", f, err)
		}
		out = append(out, queuedEvent{path: f, id: e.EventHeader().ID, kind: e.Kind(), data: data})
	}
	return out
}

// A malformed message and an event of an unknown version on the commits
// subject are logged and terminated, and the builder goes on serving; a
// commit.seen published twice with the same id is stored and built once.
func TestBuilderRejectsBadMessages(t *testing.T) {
	w := newWorld(t)
	w.open()
	h := bustest.StartIn(t, w.home)
	cfg := h.ClientConfig("pipeline-test")
	log := &testenv.Buffer{}
	e := w.env(log)
	e.Bus = &cfg
	conn := bustest.Dial(t, h, "pipeline-test")
	ev := eventstest.Watch(t, conn.JS, events.SubjectRepo(w.store.Key))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	builder := runStage(t, log, func(ctx context.Context) error {
		return pipeline.RunBuilder(ctx, pipeline.BuilderOptions{Env: e})
	})
	poll(t, "the builder's consumer", func() bool { return len(consumers(t, conn, bus.StreamCommits)) == 1 })
	durable := consumers(t, conn, bus.StreamCommits)[0].Name

	subject := events.SubjectFor(w.store.Key, events.KindCommitSeen)
	other := w.commit() // announced only in the unknown version: never built
	c := w.commit()
	header := func(typ string) map[string]any {
		return map[string]any{"type": typ, "id": events.NewID(), "time": time.Now().UTC(),
			"repo_key": w.store.Key, "host": "elsewhere"}
	}
	v2 := header(events.TypeOf(events.KindCommitSeen, 2))
	v2["commit"] = other
	v2data, _ := json.Marshal(v2)
	noCommit, _ := json.Marshal(header(events.KindCommitSeen.Type())) // valid type, no commit

	for _, bad := range []struct {
		name string
		data []byte
		says string // in the builder's log
	}{
		{"not JSON", []byte("{not json"), "malformed event"},
		{"missing commit", noCommit, "commit is missing"},
		{"unknown version", v2data, "version 2 of commit.seen is not known"},
	} {
		ack, err := conn.JS.Publish(ctx, subject, bad.data, jetstream.WithMsgID(events.NewID()))
		if err != nil {
			t.Fatalf("publish %s: %v", bad.name, err)
		}
		// Terminated: the consumer's ack floor passes it, and it is never
		// delivered again.
		poll(t, "the builder to terminate the "+bad.name+" message", func() bool {
			ci := consumerInfo(t, conn, durable)
			return ci.AckFloor.Stream >= ack.Sequence && ci.NumAckPending == 0
		})
		want := fmt.Sprintf("terminated message %d on %s", ack.Sequence, subject)
		if got := log.String(); strings.Count(got, want) != 1 || !strings.Contains(got, bad.says) {
			t.Errorf("the builder's log does not say %q (%q) once:\n%s", want, bad.says, got)
		}
	}

	// Still serving: a valid commit.seen is built; published twice with
	// one id, it is stored and built once.
	cs := events.Stamp(&events.CommitSeen{Commit: c, Ref: "HEAD"}, w.store.Key)
	first, err := conn.Publish(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	ready := eventstest.For(ev, wait, readyFor(c))
	again, err := conn.Publish(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Duplicate || again.Sequence != first.Sequence {
		t.Errorf("second publish of event %s: %+v, want a duplicate of sequence %d", cs.ID, again, first.Sequence)
	}
	settle(t, conn, ev, w.store.Key)

	w.checkPublished(ready.BaseID)
	if n := count(ev, building(c)); n != 1 {
		t.Errorf("%d base.building for %s, want 1", n, short(c))
	}
	if n := count(ev, readyFor(c)); n != 1 {
		t.Errorf("%d base.ready for %s, want 1", n, short(c))
	}
	if n := count(ev, building(other)) + count(ev, readyFor(other)); n != 0 {
		t.Errorf("%d events about %s, announced only in an unknown version; want none", n, short(other))
	}
	ci := consumerInfo(t, conn, durable)
	if ci.NumRedelivered != 0 || ci.Delivered.Consumer != 4 {
		t.Errorf("consumer delivered %d messages (%d redelivered), want 4 deliveries, none again",
			ci.Delivered.Consumer, ci.NumRedelivered)
	}
	if err := builder.stop(); err != nil {
		t.Errorf("builder: %v", err)
	}
}

func consumerInfo(t *testing.T, c *bus.Conn, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := c.JS.Consumer(ctx, bus.StreamCommits, durable)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ci
}

// The ref moves five times while a build runs: the build is not
// interrupted, and after it exactly one more is made, of the newest commit.
func TestRefMovesDuringBuild(t *testing.T) {
	w := newWorld(t)
	w.open()
	log := &testenv.Buffer{}
	e := w.env(log)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	busCfg := make(chan bus.Config, 1)
	watcherDone := make(chan error, 1)
	go func() {
		watcherDone <- watcher.Run(ctx, watcher.Options{Env: e, Rev: "HEAD",
			Interval: 100 * time.Millisecond, Ready: func(c bus.Config) { busCfg <- c }})
	}()
	var cfg bus.Config
	select {
	case cfg = <-busCfg:
	case err := <-watcherDone:
		t.Fatalf("watcher: %v", err)
	case <-time.After(wait):
		t.Fatal("the watcher did not start")
	}
	be, builderCfg := e, cfg
	be.Bus = &builderCfg
	builderDone := make(chan error, 1)
	go func() { builderDone <- pipeline.RunBuilder(ctx, pipeline.BuilderOptions{Env: be}) }()
	t.Cleanup(func() {
		cancel()
		<-builderDone
		<-watcherDone
		if t.Failed() {
			t.Logf("pipeline log:\n%s", log)
		}
	})
	cfg.Name = "pipeline-test"
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := bus.Dial(dctx, cfg)
	dcancel()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ev := eventstest.Watch(t, conn.JS, events.SubjectRepo(w.store.Key))
	head0 := w.repo.Head
	first := eventstest.For(ev, wait, readyFor(head0))

	w.close()
	c1 := w.commit()
	// The follower refreshes: the new commit's base is seeded from the
	// first (same unit inputs: the commit adds a note).
	if b := eventstest.For(ev, wait, building(c1)); b.Seed != first.BaseID {
		t.Errorf("base.building for %s names seed %q, want %s", short(c1), b.Seed, first.BaseID)
	}
	w.waitStarted()
	var moves []string
	prev := c1
	for i := 0; i < 5; i++ {
		c := w.commit()
		moves = append(moves, c)
		cs := eventstest.For(ev, wait, seen(c)) // announced while the build runs
		if cs.Previous != prev {
			t.Errorf("commit.seen of %s names %q as previous, want %s", short(c), cs.Previous, short(prev))
		}
		prev = c
	}
	if w.ready(eventstest.For(ev, wait, building(c1)).BaseID) || count(ev, readyFor(c1)) != 0 {
		t.Fatal("the first build finished before the ref stopped moving; the test proves nothing")
	}
	w.open()
	last := moves[len(moves)-1]
	if r := eventstest.For(ev, wait, readyFor(last)); r.Seed == "" || !slices.Contains([]string{"reflink", "layer", "copy"}, r.SeedBy) {
		t.Errorf("base.ready of %s: seed %q by %q, want a seed and how the build started from it", short(last), r.Seed, r.SeedBy)
	}
	settle(t, conn, ev, w.store.Key)

	for _, c := range append([]string{c1}, moves...) {
		want := 0
		if c == c1 || c == last {
			want = 1
		}
		if n := count(ev, building(c)); n != want {
			t.Errorf("%d base.building for %s, want %d", n, short(c), want)
		}
		if n := count(ev, readyFor(c)); n != want {
			t.Errorf("%d base.ready for %s, want %d", n, short(c), want)
		}
	}
	// Two builds after the first base: no more, no fewer.
	if n := count(ev, func(e *events.BaseBuilding) bool { return e.Commit != head0 }); n != 2 {
		t.Errorf("%d builds while and after the ref moved, want 2", n)
	}
	w.checkPublished(eventstest.For(ev, wait, readyFor(last)).BaseID)
}

// `ferry up` stopped with SIGTERM in the middle of a build: the watcher,
// the builder and gc all exit, the build is stopped and discarded (its
// base neither ready nor current, its checkout gone), and ferry up exits 0.
func TestUpStopsCleanlyMidBuild(t *testing.T) {
	w := newWorld(t)
	w.open()
	up := w.start(nil, "ferry", "up", "--interval", "0.1")
	// Should the test fail before it stops ferry up, stop it the way a user
	// would, then whatever of its process tree is left.
	tree := map[int]string{} // pid → start time
	t.Cleanup(func() {
		select {
		case <-up.done:
		default:
			up.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-up.done:
			case <-time.After(wait):
			}
		}
		for p, st := range tree {
			if now, ok := startTime(p); ok && now == st {
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
	})
	conn := dialHosted(t, w.home)
	ev := eventstest.Watch(t, conn.JS, events.SubjectRepo(w.store.Key))
	first := eventstest.For(ev, wait, readyFor(w.repo.Head))

	w.close()
	c := w.commit()
	b := eventstest.For(ev, wait, building(c))
	w.waitStarted()

	pid := up.cmd.Process.Pid
	children := map[string]int{}
	for _, p := range descendants(pid) {
		if pp, _ := ppid(p); pp == pid {
			children[comm(p)] = p
		}
	}
	if len(children) != 3 || children["ferry-watch"] == 0 || children["ferry-base"] == 0 || children["ferry-gc"] == 0 {
		t.Fatalf("children of ferry up: %v, want ferry-watch, ferry-base and ferry-gc", children)
	}
	warming := 0
	for _, p := range descendants(pid) {
		if st, ok := startTime(p); ok {
			tree[p] = st
			if strings.Contains(cmdline(p), w.gate) {
				warming++
			}
		}
	}
	if warming == 0 {
		t.Fatalf("no warm command among the processes of ferry up: %v", tree)
	}
	conn.Close()
	if err := up.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := up.wait(t); err != nil {
		t.Fatalf("ferry up: %v, want exit status 0\n%s", err, up.out)
	}
	for p, st := range tree {
		if now, ok := startTime(p); ok && now == st {
			t.Errorf("process %d (%s) of ferry up still runs after it exited", p, comm(p))
		}
	}
	if out := up.out.String(); strings.Contains(out, "error:") || !strings.Contains(out, "ferry up: stopped") {
		t.Errorf("ferry up's output:\n%s", out)
	}

	// Nothing of the interrupted build is published or left behind.
	w.checkNotPublished(b.BaseID)
	if cur := w.current(); cur != first.BaseID {
		t.Errorf("current base %q, want the previous %s", cur, first.BaseID)
	}
	if _, err := os.Stat(w.store.BaseDir(b.BaseID)); !os.IsNotExist(err) {
		t.Errorf("the interrupted base's directory is still there: %v", err)
	}
	if n := w.worktrees(b.BaseID); n != 0 {
		t.Errorf("%d registered worktrees for the interrupted base, want 0", n)
	}

	// The event log, read back from the stopped bus's store: the build
	// started and neither finished nor failed.
	h := bustest.StartIn(t, w.home)
	conn = bustest.Dial(t, h, "pipeline-test")
	ev = eventstest.Watch(t, conn.JS, events.SubjectRepo(w.store.Key))
	settleStopped(t, conn, ev, w.store.Key)
	if n := count(ev, building(c)); n != 1 {
		t.Errorf("%d base.building for %s, want 1", n, short(c))
	}
	if n := count(ev, readyFor(c)) + count(ev, func(e *events.BaseFailed) bool { return e.Commit == c }); n != 0 {
		t.Errorf("%d base.ready or base.failed for the interrupted %s, want none", n, short(c))
	}
}

// settleStopped is settle for a bus whose services are gone: their
// durables may hold work for the next start, so only the marker is waited for.
func settleStopped(t *testing.T, c *bus.Conn, w *eventstest.Watcher, repoKey string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	mark := events.Stamp(&events.GCCollected{DeletedBases: []string{}}, repoKey)
	if _, err := c.Publish(ctx, mark); err != nil {
		t.Fatal(err)
	}
	w.Wait(wait, func(e events.Event) bool { return e.EventHeader().ID == mark.ID })
}

func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}
