package deploy_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
)

var nodeFiles = []string{"nats/node-1.conf", "nats/node-2.conf", "nats/node-3.conf"}

const routeHost = "nats-%d.example.internal"

// parseNode parses a node configuration the way nats-server does.
func parseNode(t *testing.T, file string) *server.Options {
	t.Helper()
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return opts
}

// TestNATSConfigs parses the three node configurations with nats-server's
// own parser and checks what Ferry relies on: JetStream with a file store,
// token auth, one cluster with authenticated routes to all three nodes, and
// monitoring on loopback only. The files must differ only in server_name.
func TestNATSConfigs(t *testing.T) {
	var tokens []string
	var bodies []string
	for i, f := range nodeFiles {
		n := i + 1
		o := parseNode(t, f)
		if want := fmt.Sprintf("ferry-nats-%d", n); o.ServerName != want {
			t.Errorf("%s: server_name %q, want %q", f, o.ServerName, want)
		}
		if !o.JetStream {
			t.Errorf("%s: JetStream is off", f)
		}
		if o.StoreDir == "" || !filepath.IsAbs(o.StoreDir) {
			t.Errorf("%s: JetStream store_dir %q is not an absolute path", f, o.StoreDir)
		}
		if o.JetStreamMaxStore < 1<<30 {
			t.Errorf("%s: max_file_store %d is below 1 GB; FERRY_EVENTS alone may take 256 MB", f, o.JetStreamMaxStore)
		}
		if o.Authorization == "" {
			t.Errorf("%s: no client token", f)
		}
		tokens = append(tokens, o.Authorization)
		if o.Port != 4222 {
			t.Errorf("%s: client port %d, want 4222", f, o.Port)
		}
		if o.HTTPHost != "127.0.0.1" {
			t.Errorf("%s: monitoring listens on %q, want 127.0.0.1 only", f, o.HTTPHost)
		}
		if o.Cluster.Name != "ferry" || o.Cluster.Port != 6222 {
			t.Errorf("%s: cluster %q on port %d, want ferry on 6222", f, o.Cluster.Name, o.Cluster.Port)
		}
		if o.Cluster.Username == "" || o.Cluster.Password == "" {
			t.Errorf("%s: routes are not authenticated", f)
		}
		if len(o.Routes) != 3 {
			t.Fatalf("%s: %d routes, want 3 (one per node)", f, len(o.Routes))
		}
		for j, r := range o.Routes {
			if r.Scheme != "nats-route" {
				t.Errorf("%s: route %s: scheme %q", f, r.Redacted(), r.Scheme)
			}
			if want := fmt.Sprintf(routeHost, j+1); r.Hostname() != want || r.Port() != "6222" {
				t.Errorf("%s: route %d is %s, want %s:6222", f, j+1, r.Redacted(), want)
			}
			pw, _ := r.User.Password()
			if r.User.Username() != o.Cluster.Username || pw != o.Cluster.Password {
				t.Errorf("%s: route %s does not carry the cluster's own user and password", f, r.Redacted())
			}
		}
		bodies = append(bodies, body(t, f))
	}
	if tokens[0] != tokens[1] || tokens[1] != tokens[2] {
		t.Errorf("the nodes have different client tokens")
	}
	if bodies[0] != bodies[1] || bodies[1] != bodies[2] {
		t.Errorf("the node files differ in more than comments and server_name")
	}
}

// TestNATSServerSyntax runs `nats-server -t` on the node files when a
// nats-server binary is on PATH (Debian's nats-server package has one).
func TestNATSServerSyntax(t *testing.T) {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		t.Skip("skipping: no nats-server on PATH; TestNATSConfigs parses the files with the same parser")
	}
	version, _ := exec.Command(bin, "--version").CombinedOutput()
	for _, f := range nodeFiles {
		out, err := exec.Command(bin, "-t", "-c", f).CombinedOutput()
		if err != nil {
			t.Errorf("%s -t -c %s: %v\n%s", bin, f, err, out)
		}
	}
	t.Logf("%s: the node files are valid", strings.TrimSpace(string(version)))
}

// body is a configuration without comments, blank lines and server_name.
func body(t *testing.T, file string) string {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "server_name") {
			continue
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}

// TestNATSClusterLoopback starts the three node configurations, moved to
// loopback ports, and uses them the way Ferry does: FERRY_NATS_URL with the
// token and all three nodes, Ferry's streams scaled to three replicas, then
// events published and consumed with one node stopped. A client without the
// token is refused.
func TestNATSClusterLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node JetStream cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	var clusterPorts []int
	for range nodeFiles {
		clusterPorts = append(clusterPorts, freePort(t))
	}
	servers := make([]*server.Server, len(nodeFiles))
	var token string
	for i, f := range nodeFiles {
		o := parseNode(t, f)
		token = o.Authorization
		// The deployment's addresses become loopback ones; everything else
		// is as configured.
		o.Host, o.Port = "127.0.0.1", -1
		o.HTTPPort = 0
		o.StoreDir = t.TempDir()
		o.Cluster.Host, o.Cluster.Port = "127.0.0.1", clusterPorts[i]
		for j, r := range o.Routes {
			if r.Hostname() != fmt.Sprintf(routeHost, j+1) {
				t.Fatalf("%s: unexpected route %s", f, r.Redacted())
			}
			r.Host = fmt.Sprintf("127.0.0.1:%d", clusterPorts[j])
		}
		o.NoLog, o.NoSigs = os.Getenv("DEPLOY_TEST_NATS_LOG") == "", true
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		s.ConfigureLogger()
		s.Start()
		t.Cleanup(s.Shutdown)
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("%s: not ready for connections", f)
		}
		servers[i] = s
	}
	var urls []string
	for _, s := range servers {
		u, _ := url.Parse(s.ClientURL())
		u.User = url.User(token)
		urls = append(urls, u.String())
	}
	// What deploy/README.md tells a build host to set, read as the
	// stages read it.
	t.Setenv("FERRY_NATS_URL", strings.Join(urls, ","))
	settings, err := config.Load(t.TempDir(), config.OSEnv())
	if err != nil {
		t.Fatal(err)
	}
	cfg := bus.Config{Parent: t.TempDir(), URL: settings.BusURL, Name: "deploy-test", AckTimeout: 5 * time.Second}

	conn, err := bus.DialWait(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := conn.Endpoint().Source; got != "config" {
		t.Fatalf("bus found through %q, want the settings' URL (FERRY_NATS_URL)", got)
	}
	retry(t, ctx, "create Ferry's streams", func(ctx context.Context) error { return conn.EnsureStreams(ctx) })

	// Streams are created R1; raise them to R3 as the README says
	// (nats stream edit --replicas 3 does this update), then check that
	// Ferry's own EnsureStreams keeps three replicas.
	for _, name := range []string{bus.StreamCommits, bus.StreamEvents} {
		retry(t, ctx, "scale "+name, func(ctx context.Context) error {
			s, err := conn.JS.Stream(ctx, name)
			if err != nil {
				return err
			}
			c := s.CachedInfo().Config
			c.Replicas = 3
			_, err = conn.JS.UpdateStream(ctx, c)
			return err
		})
	}
	retry(t, ctx, "ensure streams again", func(ctx context.Context) error { return conn.EnsureStreams(ctx) })
	for _, name := range []string{bus.StreamCommits, bus.StreamEvents} {
		retry(t, ctx, name+" with three current replicas", func(ctx context.Context) error {
			s, err := conn.JS.Stream(ctx, name)
			if err != nil {
				return err
			}
			in, err := s.Info(ctx)
			if err != nil {
				return err
			}
			if in.Config.Replicas != 3 {
				return fmt.Errorf("replicas %d", in.Config.Replicas)
			}
			if in.Cluster == nil || len(in.Cluster.Replicas) != 2 {
				return errors.New("followers not placed yet")
			}
			for _, r := range in.Cluster.Replicas {
				if !r.Current {
					return fmt.Errorf("follower %s not current", r.Name)
				}
			}
			return nil
		})
	}

	const repo = "deploy-0123456789ab"
	publish := func(name string) {
		ev := events.Stamp(&events.AgentRemoved{Name: name}, repo)
		retry(t, ctx, "publish "+name, func(ctx context.Context) error { _, err := conn.Publish(ctx, ev); return err })
	}
	publish("before")

	// Stop the node this client is connected to: the client moves to
	// another URL of FERRY_NATS_URL and the R3 stream keeps a quorum.
	connected := conn.NC.ConnectedServerName()
	stopped := false
	for _, s := range servers {
		if s.Name() == connected {
			s.Shutdown()
			s.WaitForShutdown()
			stopped = true
		}
	}
	if !stopped {
		t.Fatalf("connected to %q, which is none of the nodes", connected)
	}
	publish("after")

	// The stopped node may have led the meta group: creating a consumer waits
	// for a new election, so it is retried like every other cluster request.
	var cons *bus.Consumer
	retry(t, ctx, "create the consumer", func(ctx context.Context) error {
		c, err := conn.Consumer(ctx, bus.ConsumerOptions{
			Durable: "deploy-test", Kinds: []events.Kind{events.KindAgentRemoved}, RepoKey: repo, DeliverAll: true,
		})
		cons = c
		return err
	})
	var got []string
	for len(got) < 2 {
		// Next asks again while the consumer's new leader is elected.
		nctx, ncancel := context.WithTimeout(ctx, 60*time.Second)
		m, err := cons.Next(nctx)
		ncancel()
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		got = append(got, m.Event.(*events.AgentRemoved).Name)
		m.Ack(ctx)
	}
	if !slices.Equal(got, []string{"before", "after"}) {
		t.Errorf("consumed %v, want [before after]", got)
	}
	t.Logf("stopped %s; events still flow through %s", connected, conn.NC.ConnectedServerName())

	// Without the token, or with a wrong one, a client is refused.
	var live string
	for _, s := range servers {
		if s.Running() {
			live = s.ClientURL()
			break
		}
	}
	if nc, err := nats.Connect(live, nats.NoReconnect()); err == nil {
		nc.Close()
		t.Errorf("a client without the token was let in")
	}
	wrong, _ := url.Parse(live)
	wrong.User = url.User("not-the-token")
	if _, err := bus.Dial(ctx, bus.Config{URL: wrong.String(), Bound: 5 * time.Second}); failure.KindOf(err) != failure.Refused {
		t.Errorf("a wrong token: %v (kind %v), want refused", err, failure.KindOf(err))
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// retry runs f until it succeeds, for cluster operations that wait on an
// election.
// Each attempt has its own short deadline: a JetStream request made before
// the cluster has a leader gets no answer and waits for its whole context.
func retry(t *testing.T, ctx context.Context, what string, f func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(actx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

var services = []string{"ferry-watch@.service", "ferry-base@.service", "ferry-gc@.service"}

// unitLines returns the settings of a unit file, comments left out.
func unitLines(t *testing.T, name string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("systemd", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, ";") {
			out = append(out, l)
		}
	}
	return out
}

// TestUnitSettings checks the promises the units make, without systemd.
func TestUnitSettings(t *testing.T) {
	for _, u := range services {
		lines := unitLines(t, u)
		for _, want := range []string{
			"WorkingDirectory=%f", "AssertPathIsDirectory=%f", "PartOf=ferry@%i.target",
			"Restart=on-failure", "KillMode=mixed", "KillSignal=SIGTERM",
			"EnvironmentFile=-%h/.config/ferry/ferry.env", "EnvironmentFile=-%h/.config/ferry/repos%f.env",
			"NoNewPrivileges=yes",
		} {
			if !slices.Contains(lines, want) {
				t.Errorf("%s: no %s", u, want)
			}
		}
		for _, l := range lines {
			key, _, _ := strings.Cut(l, "=")
			switch key {
			case "RestrictNamespaces", "SystemCallFilter", "PrivateUsers", "ProtectSystem", "ProtectHome",
				"PrivateTmp", "MemoryDenyWriteExecute", "SystemCallArchitectures":
				t.Errorf("%s: %s breaks Ferry's sandbox or the builds in it (see ferry-base@.service)", u, l)
			case "Requires", "BindsTo", "Requisite":
				t.Errorf("%s: %s: the services must also run against an external bus, without a local watcher", u, l)
			}
		}
		if u != "ferry-watch@.service" && !slices.Contains(lines, "After=ferry-watch@%i.service") {
			t.Errorf("%s: not ordered after the watcher, which hosts the bus", u)
		}
	}
	stop := map[string]time.Duration{}
	for _, u := range services {
		for _, l := range unitLines(t, u) {
			if v, ok := strings.CutPrefix(l, "TimeoutStopSec="); ok {
				d, err := time.ParseDuration(strings.ReplaceAll(v, "min", "m"))
				if err != nil {
					t.Fatalf("%s: %s: %v", u, l, err)
				}
				stop[u] = d
			}
		}
	}
	if stop["ferry-base@.service"] < 2*time.Minute {
		t.Errorf("ferry-base@.service: TimeoutStopSec %v leaves too little time to discard a large build", stop["ferry-base@.service"])
	}
	target := unitLines(t, "ferry@.target")
	for _, u := range services {
		inst := strings.Replace(u, "@.", "@%i.", 1)
		for _, dep := range []string{"Wants", "Before"} {
			if !slices.ContainsFunc(target, func(l string) bool {
				return strings.HasPrefix(l, dep+"=") && slices.Contains(strings.Fields(l[len(dep)+1:]), inst)
			}) {
				t.Errorf("ferry@.target: %s= lacks %s", dep, inst)
			}
		}
	}
}

// TestEnvExample checks that ferry.env.example is an environment file whose
// every assignment is commented out or a documented default, and that it
// documents every variable Ferry and the units read.
func TestEnvExample(t *testing.T) {
	f, err := os.Open("ferry.env.example")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	assign := regexp.MustCompile(`^#?\s?([A-Z][A-Z0-9_]*)=`)
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if m := assign.FindStringSubmatch(l); m != nil {
			seen[m[1]] = true
			if !strings.HasPrefix(l, "#") && strings.ContainsAny(l, "$`") {
				t.Errorf("line %d: %q: systemd does not expand variables in an environment file", n, l)
			}
			continue
		}
		if l != "" && !strings.HasPrefix(l, "#") {
			t.Errorf("line %d: %q is neither a comment nor an assignment", n, l)
		}
	}
	for _, v := range []string{"FERRY_HOME", "FERRY_WORKTREES", "FERRY_SANDBOX", "FERRY_BACKEND", "FERRY_NATS_URL",
		"FERRY_TRUSTED_KEYS", "FERRY_WATCH_REV", "FERRY_WATCH_INTERVAL", "PATH"} {
		if !seen[v] {
			t.Errorf("ferry.env.example does not document %s", v)
		}
	}
}

// TestSystemdVerify runs systemd-analyze --user verify on instances of the
// units, for a repository in a temporary directory whose path needs
// escaping. systemd-analyze exits 0 even for unknown keys and bad values, so
// any message about the units fails the test; a deliberately broken copy
// checks that such messages are seen at all.
func TestSystemdVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("skipping: systemd-analyze is not installed (apt-get install systemd to run this check)")
	}
	escape, err := exec.LookPath("systemd-escape")
	if err != nil {
		t.Skip("skipping: systemd-escape is not installed")
	}
	tmp := t.TempDir()
	home := filepath.Join(tmp, "home")
	repo := filepath.Join(tmp, "src", "my-repo")
	units := filepath.Join(tmp, "units")
	runtime := filepath.Join(tmp, "run")
	for _, d := range []string{filepath.Join(home, ".local", "bin"), repo, units, runtime} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// verify checks that each ExecStart= binary exists and is executable.
	for _, b := range []string{"ferry-watch", "ferry-base", "ferry-gc"} {
		if err := os.WriteFile(filepath.Join(home, ".local", "bin", b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(escape, "--path", repo).Output()
	if err != nil {
		t.Fatalf("systemd-escape: %v", err)
	}
	inst := strings.TrimSpace(string(out))
	var files []string
	for _, u := range append(slices.Clone(services), "ferry@.target") {
		data, err := os.ReadFile(filepath.Join("systemd", u))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(units, strings.Replace(u, "@.", "@"+inst+".", 1))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	verify := func(files ...string) string {
		cmd := exec.Command(analyze, append([]string{"--user", "--no-pager", "verify"}, files...)...)
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_RUNTIME_DIR="+runtime, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
		out, err := cmd.CombinedOutput()
		if err != nil && len(out) == 0 {
			t.Fatalf("systemd-analyze verify: %v", err)
		}
		return string(out)
	}

	// The check must be able to fail.
	broken := filepath.Join(units, "ferry-broken@"+inst+".service")
	data, _ := os.ReadFile(files[0])
	os.WriteFile(broken, []byte(strings.Replace(string(data), "\nKillMode=mixed\n", "\nKillMode=sideways\n", 1)), 0o644)
	if out := verify(broken); !strings.Contains(out, "sideways") {
		t.Skipf("skipping: systemd-analyze verify does not report a bad KillMode= here, so it cannot check the units:\n%s", out)
	}
	os.Remove(broken)

	out2 := verify(files...)
	var problems []string
	for _, l := range strings.Split(out2, "\n") {
		if strings.Contains(l, "ferry") {
			problems = append(problems, l)
		} else if strings.TrimSpace(l) != "" {
			t.Logf("systemd-analyze (not about Ferry's units): %s", l)
		}
	}
	if len(problems) > 0 {
		t.Errorf("systemd-analyze --user verify:\n%s", strings.Join(problems, "\n"))
	}
	t.Logf("verified %s for instance %s", strings.Join(files, " "), inst)
}
