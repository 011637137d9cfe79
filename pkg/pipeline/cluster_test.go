package pipeline_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/internal/eventstest"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/store"
)

// clusterToken authenticates clients with the test cluster.
const clusterToken = "ferry-cluster-test-token"

// node is one server of a JetStream cluster run in this process.
type node struct {
	srv *server.Server
	url string // client URL with the token
}

// startCluster starts a JetStream cluster of n servers on loopback, each
// with its own store, clients authenticated by clusterToken, routes on
// ports chosen beforehand, and waits until it has a meta leader.
//
// Every node routes to every other, so any one can die; that needs the
// route ports before any server starts. They are free loopback ports,
// just released, so another process (a test package running beside this
// one) can take one first: such a node never listens, and the whole
// cluster is started again on new ports.
func startCluster(t *testing.T, n int) []*node {
	t.Helper()
	const attempts = 3
	for i := 1; ; i++ {
		nodes, err := tryCluster(t, n)
		if err == nil {
			return nodes
		}
		if i == attempts {
			t.Fatalf("cluster not started after %d attempts: %v", attempts, err)
		}
		t.Logf("cluster attempt %d: %v; starting again on new ports", i, err)
	}
}

// tryCluster starts n servers on fresh ports and returns them once each
// listens, or shuts them all down and says which did not.
func tryCluster(t *testing.T, n int) ([]*node, error) {
	t.Helper()
	ports := freePorts(t, 2*n) // a client and a route port for each node
	var routes []*url.URL
	for i := 0; i < n; i++ {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[n+i]))})
	}
	var nodes []*node
	stop := func() {
		for _, nd := range nodes {
			nd.srv.Shutdown()
			nd.srv.WaitForShutdown()
		}
	}
	for i := 0; i < n; i++ {
		opts := &server.Options{
			ServerName:         fmt.Sprintf("n%d", i),
			Host:               "127.0.0.1",
			Port:               ports[i],
			Authorization:      clusterToken,
			NoSigs:             true,
			NoLog:              true,
			JetStream:          true,
			StoreDir:           t.TempDir(),
			SyncAlways:         true,
			JetStreamMaxMemory: 64 << 20,
			JetStreamMaxStore:  1 << 30,
			Cluster: server.ClusterOpts{
				Name: "ferry-test",
				Host: "127.0.0.1",
				Port: ports[n+i],
			},
			Routes: routes,
		}
		srv, err := server.NewServer(opts)
		if err != nil {
			stop()
			return nil, err
		}
		srv.Start()
		nodes = append(nodes, &node{srv: srv})
	}
	for i, nd := range nodes {
		// A node whose port was taken never listens; one that can
		// listens within milliseconds.
		if !nd.srv.ReadyForConnections(10 * time.Second) {
			stop()
			return nil, fmt.Errorf("node %d (client port %d, route port %d) not listening", i, ports[i], ports[n+i])
		}
		u, err := url.Parse(nd.srv.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(clusterToken)
		nd.url = u.String()
	}
	t.Cleanup(stop)
	poll(t, "the cluster to elect a meta leader", func() bool {
		leaders := 0
		for _, nd := range nodes {
			if !nd.srv.JetStreamIsCurrent() {
				return false
			}
			if nd.srv.JetStreamIsLeader() {
				leaders++
			}
		}
		return leaders == 1
	})
	return nodes, nil
}

// freePorts returns k distinct loopback ports that were free a moment ago.
func freePorts(t *testing.T, k int) []int {
	t.Helper()
	var ports []int
	for i := 0; i < k; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close() // held until all are chosen, so they differ
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

func clusterURL(nodes []*node) string {
	var urls []string
	for _, nd := range nodes {
		if nd.srv.Running() {
			urls = append(urls, nd.url)
		}
	}
	return strings.Join(urls, ",")
}

// Two build hosts, each with its own store, on one three-node JetStream
// cluster with R3 streams: both build every new commit; with one node
// (the leader of the commits stream) killed, events still flow and both
// build the next commit.
func TestClusterTwoBuilders(t *testing.T) {
	start := time.Now()
	nodes := startCluster(t, 3)
	all := clusterURL(nodes)

	t.Logf("%v: cluster up", time.Since(start).Round(time.Millisecond))
	w := newWorld(t)
	w.open()
	root := t.TempDir()
	type builder struct {
		home  string
		store *store.Store
	}
	var builders []builder
	for _, name := range []string{"a", "b"} {
		home := filepath.Join(root, "build-host-"+name)
		b := builder{home: home, store: openStore(t, w.git, home)}
		builders = append(builders, b)
		startProc(t, w.repo.Dir, childEnv("FERRY_HOME="+home, "FERRY_WORKTREES="+filepath.Join(home, "worktrees"),
			"FERRY_NATS_URL="+all, "FERRY_BUS_REPLICAS=3"), "ferry-base", "--follow")
	}
	// The watcher has a store of its own too, and hosts nothing: the bus is
	// the cluster.
	watchHome := filepath.Join(root, "watch-host")
	startProc(t, w.repo.Dir, childEnv("FERRY_HOME="+watchHome, "FERRY_NATS_URL="+all, "FERRY_BUS_REPLICAS=3"),
		"ferry-watch", "--interval", "0.1")

	probe := dialCluster(t, all)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var last string // what the last look found, for the failure message
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last consumer look-up: %s", last)
		}
	})
	poll(t, "both builders' durable consumers", func() bool {
		// A short bound per look: on a loaded machine one slow answer from
		// the cluster must not use up the whole wait.
		lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
		defer lcancel()
		s, err := probe.JS.Stream(lctx, bus.StreamCommits)
		if err != nil {
			last = "stream: " + err.Error()
			return false
		}
		lister := s.ListConsumers(lctx)
		var names []string
		for ci := range lister.Info() {
			if ci.Config.Durable != "" {
				names = append(names, ci.Config.Durable)
			}
		}
		last = fmt.Sprintf("durables %v", names)
		if err := lister.Err(); err != nil {
			last += ", list: " + err.Error()
		}
		return len(names) >= 2
	})

	t.Logf("%v: consumers", time.Since(start).Round(time.Millisecond))
	if cs := consumers(t, probe, bus.StreamCommits); len(cs) != 2 {
		t.Fatalf("%d durable consumers of the commits stream, want one per build host (2)", len(cs))
	}
	for _, name := range []string{bus.StreamCommits, bus.StreamEvents} {
		s, err := probe.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Fatalf("stream %s has %d replicas, want 3", name, r)
		}
	}

	// The node to kill leads the commits stream; the test watches events
	// through another node.
	victim := streamLeader(t, probe, bus.StreamCommits)
	var through *node
	for _, nd := range nodes {
		if nd.srv.Name() != victim {
			through = nd
			break
		}
	}
	conn := dialCluster(t, through.url)
	ev := eventstest.Watch(t, conn.JS, events.SubjectRepo(w.store.Key))

	bothBuild := func(ev *eventstest.Watcher, c string) {
		t.Helper()
		poll(t, "both build hosts to build "+short(c), func() bool { return count(ev, readyFor(c)) >= 2 })
		r := eventstest.For(ev, wait, readyFor(c))
		for _, b := range builders {
			if cur, _ := b.store.Current(); cur != r.BaseID {
				t.Errorf("build host %s: current base %q, want %s", b.home, cur, r.BaseID)
			}
			if n := countWorktrees(t, w.repo, filepath.Join(b.store.BaseDir(r.BaseID), "src")); n != 1 {
				t.Errorf("build host %s: %d worktrees for %s, want 1", b.home, n, r.BaseID)
			}
		}
	}
	head0 := w.repo.Head
	bothBuild(ev, head0)
	c1 := w.commit()
	bothBuild(ev, c1)
	if n := count(ev, seen(c1)); n != 1 {
		t.Errorf("%d commit.seen for %s, want 1", n, short(c1))
	}
	t.Logf("%v: both build hosts built two commits; killing %s", time.Since(start).Round(time.Millisecond), victim)

	for _, nd := range nodes {
		if nd.srv.Name() == victim {
			nd.srv.Shutdown()
			nd.srv.WaitForShutdown()
		}
	}
	// The cluster elects new leaders for the streams and the consumers.
	poll(t, "new leaders after node "+victim+" died", func() bool {
		for _, name := range []string{bus.StreamCommits, bus.StreamEvents} {
			if l := streamLeaderNow(conn, name); l == "" || l == victim {
				return false
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := conn.JS.Stream(ctx, bus.StreamCommits)
		if err != nil {
			return false
		}
		n := 0
		for ci := range s.ListConsumers(ctx).Info() {
			if ci.Config.Durable == "" {
				continue
			}
			if ci.Cluster == nil || ci.Cluster.Leader == "" || ci.Cluster.Leader == victim {
				return false
			}
			n++
		}
		return n == 2
	})

	t.Logf("%v: new leaders elected", time.Since(start).Round(time.Millisecond))
	// A new watcher of the event log: an ephemeral consumer of the old one
	// may have lived on the dead node. It reads the streams from the start.
	ev = eventstest.Watch(t, conn.JS, events.SubjectRepo(w.store.Key))
	c2 := w.commit()
	bothBuild(ev, c2)
	settle(t, conn, ev, w.store.Key)
	t.Logf("%v: both build hosts built the commit made after the kill", time.Since(start).Round(time.Millisecond))
	if n := count(ev, seen(c2)); n != 1 {
		t.Errorf("%d commit.seen for %s, want 1", n, short(c2))
	}

	for _, c := range []string{c1, c2} {
		if n := count(ev, building(c)); n != 2 {
			t.Errorf("%d base.building for %s, want 2 (one per build host)", n, short(c))
		}
		if n := count(ev, readyFor(c)); n != 2 {
			t.Errorf("%d base.ready for %s, want 2 (one per build host)", n, short(c))
		}
	}
	// Each store holds its own ready base of every commit.
	for _, c := range []string{head0, c1, c2} {
		id := eventstest.For(ev, wait, readyFor(c)).BaseID
		for _, b := range builders {
			if _, err := base.Read(b.store, id); err != nil {
				t.Errorf("build host %s: base %s is not ready: %v", b.home, id, err)
			}
		}
	}
}

func dialCluster(t *testing.T, urls string) *bus.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, err := bus.DialWait(ctx, bus.Config{URL: urls, Name: "pipeline-test", Bound: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func streamLeader(t *testing.T, c *bus.Conn, name string) string {
	t.Helper()
	var l string
	poll(t, "a leader of "+name, func() bool {
		l = streamLeaderNow(c, name)
		return l != ""
	})
	return l
}

func streamLeaderNow(c *bus.Conn, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := c.JS.Stream(ctx, name)
	if err != nil {
		return ""
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}
