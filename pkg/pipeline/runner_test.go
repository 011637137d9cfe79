package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/internal/bustest"
	"github.com/ferrydev/ferry/internal/eventstest"
	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/pipeline"
	"github.com/ferrydev/ferry/pkg/share"
	"github.com/ferrydev/ferry/pkg/store"
)

// runnerHost is a runner's machine: its own clone of the world's
// repository, its own store parent, and the fleet's bus by URL.
type runnerHost struct {
	t     *testing.T
	dir   string // the clone
	home  string
	wts   string
	store *store.Store
	vars  []string
}

func newRunnerHost(t *testing.T, w *world, busURL string) *runnerHost {
	t.Helper()
	root := t.TempDir()
	r := &runnerHost{t: t, dir: filepath.Join(root, "repo"), home: filepath.Join(root, "home"), wts: filepath.Join(root, "worktrees")}
	if out, err := exec.Command("git", "clone", "-q", w.repo.Dir, r.dir).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	// The same warm commands as the publisher: the same fingerprint.
	toml, err := os.ReadFile(filepath.Join(w.repo.Dir, config.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, config.FileName), toml, 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := git.Open(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	r.store = openStore(t, g, r.home)
	// The world's host signs with its key; the runner trusts it.
	signer, _, err := share.EnsureSigner(w.home)
	if err != nil {
		t.Fatal(err)
	}
	r.vars = []string{"FERRY_HOME=" + r.home, "FERRY_WORKTREES=" + r.wts, "FERRY_NATS_URL=" + busURL,
		"FERRY_ACK_WAIT=2s", "FERRY_TRUSTED_KEYS=" + signer.Public(), knobs.OverlayHold + "=0"}
	return r
}

func (r *runnerHost) start(vars []string, args ...string) *proc {
	r.t.Helper()
	return startProc(r.t, r.dir, childEnv(append(append([]string{}, r.vars...), vars...)...), args...)
}

// bases maps the runner's base ids to "ready" or "partial".
func (r *runnerHost) bases() map[string]string {
	r.t.Helper()
	out := map[string]string{}
	ents, _ := os.ReadDir(r.store.BasesDir())
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if _, err := base.Read(r.store, e.Name()); err == nil {
			out[e.Name()] = "ready"
		} else {
			out[e.Name()] = "partial"
		}
	}
	return out
}

func (r *runnerHost) current() string {
	r.t.Helper()
	c, err := r.store.Current()
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

// hostedURL is the URL, with its token, of the bus hosted under parent.
func hostedURL(t *testing.T, parent string) string {
	t.Helper()
	var in *bus.Info
	poll(t, "bus.json", func() bool {
		var err error
		in, err = bus.ReadInfo(bus.Dir(parent))
		return err == nil
	})
	tok, err := bus.ReadToken(store.BusFiles(bus.Dir(parent)).Token)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(in.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(tok)
	return u.String()
}

// The whole loop with processes: a build host runs ferry-watch (hosting
// the bus) and ferry-base --follow with [bus] share-bases; a runner, with
// its own clone and store parent, runs ferry-base --follow --pull.
//   - The runner starts before anything is published: it waits, and never
//     builds (the publisher's build is held at the gate meanwhile).
//   - The publisher's base.ready names the object; the runner pulls it and
//     is killed mid-extraction (failpoint share/pull-extracting): a partial
//     base, nothing ready. Restarted, it gets the announcement again after
//     the ack wait, discards the partial base and ends with the base ready
//     and current, relocated from the publisher's store path.
//   - While the runner is stopped the publisher builds a new commit, which
//     the runner's clone does not have: `ferry up --runner` at the next boot
//     catches up through its durable consumer, fetching the commit.
func TestRunnerFollowsPublisher(t *testing.T) {
	w := newWorld(t)
	// More than the failpoint's 100 files in the checkout.
	for i := 0; i < 120; i++ {
		if err := w.repo.Write(fmt.Sprintf("many/f%03d.txt", i), fmt.Sprintf("%d\n", i)); err != nil {
			t.Fatal(err)
		}
	}
	head0, err := w.repo.Commit("many files")
	if err != nil {
		t.Fatal(err)
	}
	toml := filepath.Join(w.repo.Dir, config.FileName)
	f, err := os.OpenFile(toml, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "[bus]\nshare-bases = true\n")
	f.Close()

	w.start(nil, "ferry-watch", "--interval", "0.1")
	busURL := hostedURL(t, w.home)
	conn := dialHosted(t, w.home)
	ev := eventstest.Watch(t, conn.JS, "ferry.>")
	r := newRunnerHost(t, w, busURL)

	// Nothing published yet: the runner waits.
	runner := r.start([]string{knobs.Failpoint + "=share/pull-extracting"}, "ferry-base", "--follow", "--pull")
	w.start(nil, "ferry-base", "--follow")
	w.waitStarted()
	poll(t, "the runner's consumer", func() bool {
		for _, c := range consumers(t, conn, bus.StreamEvents) {
			if strings.HasPrefix(c.Name, "ferry-runner_") {
				return true
			}
		}
		return false
	})
	time.Sleep(500 * time.Millisecond)
	if bs := r.bases(); len(bs) != 0 {
		t.Fatalf("before anything was published the runner has bases %v", bs)
	}

	// Published: the runner pulls, and is killed mid-pull.
	w.open()
	ready := eventstest.For(ev, wait, func(e *events.BaseReady) bool { return e.Commit == head0 && e.Object != "" })
	if ready.Object != ready.BaseID {
		t.Fatalf("base.ready names object %q for base %s", ready.Object, ready.BaseID)
	}
	if err := runner.wait(t); err == nil {
		t.Fatalf("the runner with the failpoint armed exited cleanly:\n%s", runner.out)
	}
	if bs := r.bases(); bs[ready.BaseID] != "partial" || len(bs) != 1 {
		t.Fatalf("a runner killed mid-pull left %v, want base %s partial", bs, ready.BaseID)
	}

	// Restarted: it repairs and ends ready.
	runner = r.start(nil, "ferry-base", "--follow", "--pull")
	pulled := eventstest.For(ev, wait, func(e *events.BaseReady) bool {
		return e.BaseID == ready.BaseID && e.EventHeader().RepoKey == r.store.Key
	})
	if pulled.Object != ready.Object {
		t.Errorf("the runner's base.ready names object %q, want %q", pulled.Object, ready.Object)
	}
	rec, err := base.Read(r.store, ready.BaseID)
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	if rec.Pulled == nil || rec.Pulled.From != w.store.Dir || rec.Store != r.store.Dir {
		t.Errorf("pulled record: store %s, pulled %+v; want from %s", rec.Store, rec.Pulled, w.store.Dir)
	}
	if cur := r.current(); cur != ready.BaseID {
		t.Errorf("runner's current base is %q, want %s", cur, ready.BaseID)
	}

	// Stopped; the fleet moves on; the next boot catches up.
	runner.kill(t)
	c1 := w.commit()
	next := eventstest.For(ev, wait, func(e *events.BaseReady) bool { return e.Commit == c1 && e.Object != "" })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	up := r.start([]string{fmt.Sprintf("FERRY_METRICS_PORT=%d", metricsPort)}, "ferry", "up", "--runner")
	eventstest.For(ev, wait, func(e *events.BaseReady) bool {
		return e.BaseID == next.BaseID && e.EventHeader().RepoKey == r.store.Key
	})
	if cur := r.current(); cur != next.BaseID {
		t.Errorf("after catching up the runner's current base is %q, want %s", cur, next.BaseID)
	}
	if bs := r.bases(); bs[next.BaseID] != "ready" {
		t.Errorf("after catching up: %v", bs)
	}
	// A runner never builds: no base.building came from its store.
	if n := ev.Count(func(e events.Event) bool {
		return e.Kind() == events.KindBaseBuilding && e.EventHeader().RepoKey == r.store.Key
	}); n != 0 {
		t.Errorf("the runner announced %d base.building, want none", n)
	}
	// Its ferry-base serves its metrics at the port + 1: the pull counts.
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort+1))
	if err != nil {
		t.Fatal(err)
	}
	scraped, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(scraped), "\nferry_bases_pulled_total 1\n") {
		t.Errorf("the runner's metrics do not count its pull:\n%s", scraped)
	}
	up.cmd.Process.Signal(os.Interrupt)
	up.wait(t)
	t.Logf("runner:\n%s", up.out)
}

// natsServer is a JetStream server on a fixed loopback port with a store
// of its own, so a test can stop it and start it again where clients
// reconnect.
type natsServer struct {
	opts *server.Options
	srv  *server.Server
	url  string // with the token
}

func startNATS(t *testing.T) *natsServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	l.Close()
	n := &natsServer{opts: &server.Options{
		ServerName: "runner-test", Host: "127.0.0.1", Port: p, Authorization: clusterToken,
		NoSigs: true, NoLog: true, JetStream: true, StoreDir: t.TempDir(),
	}, url: fmt.Sprintf("nats://%s@127.0.0.1:%d", clusterToken, p)}
	n.up(t)
	t.Cleanup(n.down)
	return n
}

func (n *natsServer) up(t *testing.T) {
	t.Helper()
	srv, err := server.NewServer(n.opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(wait) {
		t.Fatal("the bus did not start")
	}
	n.srv = srv
}

func (n *natsServer) down() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// A publisher slower than the runner, and a bus that goes away: the
// runner gets a base.ready for an object whose upload has not finished (no
// digest yet) and waits, neither pulling it nor building; the bus stops and
// starts again (same address, same store) while it waits; when the upload
// finishes the runner installs the base, and it goes on to install the
// next one published after the bus came back.
func TestRunnerWaitsForPublisherAndBus(t *testing.T) {
	w := newWorld(t)
	w.open()
	nats := startNATS(t)
	r := newRunnerHost(t, w, nats.url)
	runner := r.start(nil, "ferry-base", "--follow", "--pull")
	publish := func(args ...string) string {
		t.Helper()
		c := exec.Command(filepath.Join(testenv.Binaries(t), "ferry"), append([]string{"base", "--json"}, args...)...)
		c.Dir, c.Env = w.repo.Dir, childEnv(append(w.baseVars(), "FERRY_NATS_URL="+nats.url)...)
		out, err := c.Output()
		if err != nil {
			t.Fatalf("ferry base %v: %v\n%s", args, err, out)
		}
		var rec struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(out, &rec); err != nil {
			t.Fatal(err)
		}
		return rec.ID
	}
	readyOn := func(id string) {
		t.Helper()
		poll(t, "base "+id+" ready on the runner", func() bool { return r.bases()[id] == "ready" && r.current() == id })
	}

	id0 := publish("--publish")
	readyOn(id0)

	// Built, uploaded, but its digest not written yet: what a runner sees
	// while the publisher's upload runs.
	w.commit()
	id1 := publish()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	conn, err := bus.Dial(ctx, bus.Config{URL: nats.url, Name: "runner-test", Bound: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := base.Read(w.store, id1)
	if err != nil {
		t.Fatal(err)
	}
	signer, _, err := share.EnsureSigner(w.home)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := share.Publish(ctx, conn, share.Bucket{}, rec, signer); err != nil {
		t.Fatal(err)
	}
	obs, err := conn.JS.ObjectStore(ctx, share.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := obs.GetInfo(ctx, id1)
	if err != nil {
		t.Fatal(err)
	}
	complete := info.ObjectMeta
	uploading := complete
	uploading.Metadata = map[string]string{}
	for k, v := range complete.Metadata {
		uploading.Metadata[k] = v
	}
	var m share.Meta
	if err := json.Unmarshal([]byte(complete.Metadata["ferry-meta"]), &m); err != nil {
		t.Fatal(err)
	}
	m.Digest = ""
	b, _ := json.Marshal(m)
	uploading.Metadata["ferry-meta"], uploading.Metadata["digest"] = string(b), ""
	if err := obs.UpdateMeta(ctx, id1, uploading); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Publish(ctx, events.Stamp(&events.BaseReady{BaseID: id1, Commit: rec.Commit,
		Fingerprint: rec.Fingerprint, Current: true, Object: id1}, w.store.Key)); err != nil {
		t.Fatal(err)
	}
	poll(t, "the runner to wait for the upload", func() bool {
		return strings.Contains(runner.out.String(), "still being uploaded")
	})
	conn.Close()

	// The bus goes away and comes back while the runner waits.
	nats.down()
	time.Sleep(time.Second)
	if bs := r.bases(); bs[id1] != "" {
		t.Fatalf("the runner installed base %s before its upload finished: %v", id1, bs)
	}
	nats.up(t)
	if conn, err = bus.Dial(ctx, bus.Config{URL: nats.url, Name: "runner-test", Bound: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if obs, err = conn.JS.ObjectStore(ctx, share.DefaultBucket); err != nil {
		t.Fatal(err)
	}
	if err := obs.UpdateMeta(ctx, id1, complete); err != nil {
		t.Fatal(err)
	}
	readyOn(id1)

	// And the next base, published after the bus came back.
	w.commit()
	id2 := publish("--publish")
	readyOn(id2)
	select {
	case <-runner.done:
		t.Fatalf("the runner exited: %v", runner.err)
	default:
	}
	if strings.Contains(runner.out.String(), "building") {
		t.Errorf("the runner built something:\n%s", runner.out)
	}
	t.Logf("runner:\n%s", runner.out)
}

// The three-node loopback cluster: a publisher and two runners, with the
// bucket's stream (R3) losing its leader while the runners pull. The
// leader is shut down as soon as a runner has a partial base; a pull whose
// reads fail is retried (the runner waits for the bus), and both runners
// end with the base ready and current.
func TestClusterRunnersSurviveLeaderLoss(t *testing.T) {
	nodes := startCluster(t, 3)
	all := clusterURL(nodes)
	w := newWorld(t)
	// A target big enough for the pull to take a while: incompressible.
	warm := `mkdir -p "$CARGO_TARGET_DIR/debug" && head -c 96000000 /dev/urandom > "$CARGO_TARGET_DIR/debug/blob"`
	if err := os.WriteFile(filepath.Join(w.repo.Dir, config.FileName), fmt.Appendf(nil, "[base]\nwarm = [%q]\n", warm), 0o644); err != nil {
		t.Fatal(err)
	}
	var runners []*runnerHost
	var procs []*proc
	for range 2 {
		r := newRunnerHost(t, w, all)
		r.vars = append(r.vars, "FERRY_BUS_REPLICAS=3")
		runners = append(runners, r)
		procs = append(procs, r.start(nil, "ferry-base", "--follow", "--pull"))
	}
	probe := dialCluster(t, all)
	poll(t, "both runners' consumers", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := probe.JS.Stream(ctx, bus.StreamEvents); err != nil {
			return false // the runners have not made it yet
		}
		n := 0
		for _, c := range consumers(t, probe, bus.StreamEvents) {
			if strings.HasPrefix(c.Name, "ferry-runner_") {
				n++
			}
		}
		return n == 2
	})

	published := make(chan string, 1)
	go func() {
		c := exec.Command(filepath.Join(testenv.Binaries(t), "ferry"), "base", "--publish", "--json")
		c.Dir, c.Env = w.repo.Dir, childEnv(append(w.baseVars(), "FERRY_NATS_URL="+all, "FERRY_BUS_REPLICAS=3")...)
		var stderr strings.Builder
		c.Stderr = &stderr
		out, err := c.Output()
		var rec struct {
			ID string `json:"id"`
		}
		if err == nil {
			err = json.Unmarshal(out, &rec)
		}
		if err != nil {
			t.Errorf("ferry base --publish: %v\n%s%s", err, stderr.String(), out)
		}
		published <- rec.ID
	}()
	partial := func() bool {
		for _, r := range runners {
			for _, s := range r.bases() {
				if s == "partial" {
					return true
				}
			}
		}
		return false
	}
	poll(t, "a runner pulling", partial)
	victim := streamLeaderNow(probe, "OBJ_"+share.DefaultBucket)
	for _, nd := range nodes {
		if nd.srv.Name() == victim {
			nd.srv.Shutdown()
			nd.srv.WaitForShutdown()
		}
	}
	midPull := partial()
	t.Logf("shut down %s, the leader of the bucket's stream; a pull still running: %v", victim, midPull)
	id := <-published
	if id == "" {
		t.FailNow()
	}
	for i, r := range runners {
		poll(t, fmt.Sprintf("runner %d to have base %s", i, id), func() bool {
			return r.bases()[id] == "ready" && r.current() == id
		})
		if _, err := base.Read(r.store, id); err != nil {
			t.Errorf("runner %d: %v", i, err)
		}
		if strings.Contains(procs[i].out.String(), "building") {
			t.Errorf("runner %d built:\n%s", i, procs[i].out)
		}
	}
	for i, p := range procs {
		t.Logf("runner %d:\n%s", i, p.out)
	}
}

// [bus] runner-builds: a runner builds what it cannot pull (here a base
// announced without an object), announcing it as a build host does.
// Without it the same announcement is skipped (TestRunnerWaitsForPublisherAndBus).
func TestRunnerBuildsWhenConfigured(t *testing.T) {
	w := newWorld(t)
	w.open()
	h := bustest.StartIn(t, w.home)
	cfg := h.ClientConfig("test")
	conn := bustest.Dial(t, h, "test")
	ev := eventstest.Watch(t, conn.JS, "ferry.>")
	r := newRunnerHost(t, w, "")
	toml := filepath.Join(r.dir, config.FileName)
	data, err := os.ReadFile(toml)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(toml, append(data, "[bus]\nrunner-builds = true\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := git.Open(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	cenv := testenv.NewEnv(t.TempDir(), r.dir)
	cenv.Set("FERRY_HOME", r.home)
	cenv.Set("FERRY_WORKTREES", r.wts)
	settings, err := config.Load(g.Top, cenv)
	if err != nil {
		t.Fatal(err)
	}
	if !settings.RunnerBuilds {
		t.Fatal("[bus] runner-builds = true did not set RunnerBuilds")
	}
	log := &testenv.Buffer{}
	re := pipeline.Env{Repo: g, Settings: settings, Store: r.store, Log: log, Bus: &cfg}
	runStage(t, log, func(ctx context.Context) error {
		return pipeline.RunRunner(ctx, pipeline.RunnerOptions{Env: re})
	})

	e := w.env(&testenv.Buffer{})
	e.Bus = &cfg
	res, err := pipeline.BuildBase(context.Background(), e.OneShot("ferry-base"), base.Options{
		Repo: e.Repo, Settings: e.Settings, Store: e.Store, Rev: "HEAD"})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Record.ID
	eventstest.For(ev, wait, func(b *events.BaseBuilding) bool { return b.BaseID == id && b.EventHeader().RepoKey == r.store.Key })
	eventstest.For(ev, wait, func(b *events.BaseReady) bool { return b.BaseID == id && b.EventHeader().RepoKey == r.store.Key })
	rec, err := base.Read(r.store, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Pulled != nil || rec.Store != r.store.Dir {
		t.Errorf("the runner's base %s: store %s, pulled %+v; want built here", id, rec.Store, rec.Pulled)
	}
	if !strings.Contains(log.String(), "runner-builds") {
		t.Errorf("the runner's log does not say why it built:\n%s", log)
	}
}

// ferry up --runner refuses to start without the fleet's bus.
func TestUpRunnerNeedsTheFleetsBus(t *testing.T) {
	w := newWorld(t)
	c := exec.Command(filepath.Join(testenv.Binaries(t), "ferry"), "up", "--runner")
	c.Dir, c.Env = w.repo.Dir, childEnv(w.baseVars()...)
	out, err := c.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "FERRY_NATS_URL") {
		t.Fatalf("ferry up --runner without a bus: %v\n%s", err, out)
	}
}

// The bus stops while a runner pulls, and starts again (same address,
// same store): nothing is ready while it is down, and the runner ends with
// the base ready and current, its digest checked. (Seen: the client
// resumes the object's chunks once it has reconnected, so the pull
// finishes, about 20 s for 96 MB with the outage; a pull that failed
// instead would be retried by the runner, as it retries one whose object
// is not complete.)
func TestRunnerPullSurvivesBusRestart(t *testing.T) {
	w := newWorld(t)
	warm := `mkdir -p "$CARGO_TARGET_DIR/debug" && head -c 96000000 /dev/urandom > "$CARGO_TARGET_DIR/debug/blob"`
	if err := os.WriteFile(filepath.Join(w.repo.Dir, config.FileName), fmt.Appendf(nil, "[base]\nwarm = [%q]\n", warm), 0o644); err != nil {
		t.Fatal(err)
	}
	nats := startNATS(t)
	r := newRunnerHost(t, w, nats.url)
	runner := r.start(nil, "ferry-base", "--follow", "--pull")
	c := exec.Command(filepath.Join(testenv.Binaries(t), "ferry"), "base", "--publish", "--json")
	c.Dir, c.Env = w.repo.Dir, childEnv(append(w.baseVars(), "FERRY_NATS_URL="+nats.url)...)
	out, err := c.Output()
	var rec struct {
		ID string `json:"id"`
	}
	if err == nil {
		err = json.Unmarshal(out, &rec)
	}
	if err != nil {
		t.Fatalf("ferry base --publish: %v\n%s", err, out)
	}
	poll(t, "the runner pulling", func() bool { return r.bases()[rec.ID] != "" })
	nats.down()
	midPull := r.bases()[rec.ID] == "partial"
	time.Sleep(time.Second)
	if s := r.bases()[rec.ID]; midPull && s == "ready" {
		t.Fatalf("base %s ready on the runner while the bus was down mid-pull", rec.ID)
	}
	nats.up(t)
	poll(t, "the runner to end with the base", func() bool { return r.bases()[rec.ID] == "ready" && r.current() == rec.ID })
	t.Logf("bus stopped mid-pull: %v; runner:\n%s", midPull, runner.out)
}
