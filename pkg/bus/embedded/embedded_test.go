package embedded_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ferrydev/ferry/internal/bustest"
	"github.com/ferrydev/ferry/internal/unpriv"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/bus/embedded"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/store"
)

func TestHostFilesAndLoopback(t *testing.T) {
	h := bustest.Start(t)

	in, err := bus.ReadInfo(h.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if in.URL != h.URL() || in.PID != os.Getpid() || in.Started.IsZero() {
		t.Fatalf("bus.json = %+v, host URL %s", in, h.URL())
	}
	for name, want := range map[string]os.FileMode{"bus.json": 0o644, "token": 0o600} {
		fi, err := os.Stat(filepath.Join(h.Dir(), name))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, %v; want %04o", name, fi.Mode().Perm(), err, want)
		}
	}
	tok, _ := os.ReadFile(store.BusFiles(h.Dir()).Token)
	if strings.TrimSpace(string(tok)) != h.Token() || len(h.Token()) < 32 {
		t.Fatalf("token file %q, host token %q", tok, h.Token())
	}

	u, err := url.Parse(h.URL())
	if err != nil {
		t.Fatal(err)
	}
	if u.Hostname() != "127.0.0.1" {
		t.Fatalf("listens on %s, want 127.0.0.1", u.Hostname())
	}
	port := u.Port()
	if p, _ := strconv.Atoi(port); p == 0 || p == 4222 {
		t.Fatalf("port %s: want a random one", port)
	}
	// The kernel's socket table shows the listener bound to loopback only
	// (no wildcard or other address), without sending a packet anywhere.
	p, _ := strconv.Atoi(port)
	listeners := listenersOn(t, p)
	if len(listeners) == 0 {
		t.Fatalf("no listening socket found for port %d", p)
	}
	for _, l := range listeners {
		if l != "0100007F" {
			t.Fatalf("port %d is bound to %s, want only 127.0.0.1 (0100007F)", p, l)
		}
	}
}

// listenersOn returns the local addresses (hex, as /proc/net/tcp{,6} shows
// them) of sockets listening on port.
func listenersOn(t *testing.T, port int) []string {
	t.Helper()
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 4 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			addr, hexPort, ok := strings.Cut(fields[1], ":")
			if !ok {
				continue
			}
			if n, err := strconv.ParseUint(hexPort, 16, 32); err == nil && int(n) == port {
				out = append(out, addr)
			}
		}
	}
	return out
}

func TestClientWithoutTokenIsRefused(t *testing.T) {
	h := bustest.Start(t)
	for name, opts := range map[string][]nats.Option{
		"no token":    nil,
		"wrong token": {nats.Token("not-" + h.Token())},
	} {
		nc, err := nats.Connect(h.URL(), append(opts, nats.Timeout(5*time.Second), nats.NoReconnect())...)
		if err == nil {
			nc.Close()
			t.Fatalf("%s: connected", name)
		}
		if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Fatalf("%s: error %v, want an authorization violation", name, err)
		}
	}
	// Through pkg/bus the refusal is typed and hinted.
	_, err := bus.Dial(context.Background(), bus.Config{URL: h.URL(), Token: "wrong", Bound: 5 * time.Second})
	if failure.KindOf(err) != failure.Refused || failure.HintOf(err) == "" {
		t.Fatalf("Dial with a wrong token: %v (kind %v)", err, failure.KindOf(err))
	}
	// And the right token works.
	bustest.Dial(t, h, "ok")
}

func TestSecondHostIsRefusedNamingThePid(t *testing.T) {
	h := bustest.Start(t)
	_, err := embedded.Start(embedded.Options{Dir: h.Dir()})
	if err == nil {
		t.Fatal("a second host started on the same directory")
	}
	if failure.KindOf(err) != failure.Refused || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("error %q (kind %v): want refused, naming pid %d", err, failure.KindOf(err), os.Getpid())
	}
	// The first host is unharmed: bus.json still names it.
	if in, err := bus.ReadInfo(h.Dir()); err != nil || in.URL != h.URL() {
		t.Fatalf("bus.json after the refusal: %+v, %v", in, err)
	}
}

func TestShutdownRemovesInfoAndFreesTheDirectory(t *testing.T) {
	parent := t.TempDir()
	h, err := embedded.Start(embedded.Options{Dir: bus.Dir(parent)})
	if err != nil {
		t.Fatal(err)
	}
	url1 := h.URL()
	if err := h.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(store.BusFiles(h.Dir()).Info); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("bus.json after shutdown: %v", err)
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(url1, "nats://"), time.Second); err == nil {
		c.Close()
		t.Fatal("the server still listens after Shutdown returned")
	}
	h.Shutdown() // twice is fine

	// A new host takes the directory, keeps the token and the streams.
	h2 := bustest.StartIn(t, parent)
	if h2.Token() != h.Token() {
		t.Fatal("the token changed across restarts")
	}
	c := bustest.Dial(t, h2, "check")
	for _, s := range []string{bus.StreamCommits, bus.StreamEvents} {
		if _, err := c.JS.Stream(context.Background(), s); err != nil {
			t.Fatalf("stream %s after restart: %v", s, err)
		}
	}
}

func TestTokenReadableByOthersIsRefused(t *testing.T) {
	dir := bus.Dir(t.TempDir())
	os.MkdirAll(dir, 0o755)
	os.WriteFile(store.BusFiles(dir).Token, []byte("secret\n"), 0o644)
	_, err := embedded.Start(embedded.Options{Dir: dir})
	if failure.KindOf(err) != failure.Refused || !strings.Contains(failure.HintOf(err), "chmod 600") {
		t.Fatalf("start with a 0644 token: %v", err)
	}
	// The refused start released the lock: after fixing the mode it starts.
	os.Chmod(store.BusFiles(dir).Token, 0o600)
	h, err := embedded.Start(embedded.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown()
	if h.Token() != "secret" {
		t.Fatalf("token %q, want the file's", h.Token())
	}
}

func TestLogGoesOnlyWhereAsked(t *testing.T) {
	var log strings.Builder
	h, err := embedded.Start(embedded.Options{Dir: bus.Dir(t.TempDir()), Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	h.Shutdown()
	if !strings.Contains(log.String(), "nats-server: [INF]") {
		t.Fatalf("asked-for log is empty or odd: %q", log.String())
	}
}

func TestInProcessClient(t *testing.T) {
	h := bustest.Start(t)
	c, err := bus.Dial(context.Background(), h.ClientConfig("ferry-watch"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Endpoint().Source != "in-process" {
		t.Fatalf("endpoint %+v", c.Endpoint())
	}
	if _, err := c.JS.AccountInfo(context.Background()); err != nil {
		t.Fatalf("JetStream through the in-process connection: %v", err)
	}
}

func TestBusDirectoryIsPrivateWhateverTheUmask(t *testing.T) {
	parent := t.TempDir()
	old := syscall.Umask(0o002)
	h, err := embedded.Start(embedded.Options{Dir: bus.Dir(filepath.Join(parent, "home"))})
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown()
	for dir, want := range map[string]os.FileMode{filepath.Join(parent, "home"): 0o755, h.Dir(): 0o700} {
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: %v, %v; want %04o", dir, fi.Mode(), err, want)
		}
	}
}

func TestStartRefusesABusDirectoryOthersCanChange(t *testing.T) {
	parent := t.TempDir()
	dir := bus.Dir(parent)
	os.Mkdir(dir, 0o755)
	os.Chmod(dir, 0o777)
	_, err := embedded.Start(embedded.Options{Dir: dir})
	if failure.KindOf(err) != failure.Refused || !strings.Contains(err.Error(), dir+" is writable by group and others") ||
		!strings.Contains(failure.HintOf(err), "chmod go-w") {
		t.Fatalf("start in a 0777 bus directory: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a refused start wrote %v", ents)
	}
	// Under a store parent that is group-writable: refused the same way.
	os.Chmod(dir, 0o700)
	os.Chmod(parent, 0o775)
	if _, err := embedded.Start(embedded.Options{Dir: dir}); failure.KindOf(err) != failure.Refused {
		t.Fatalf("start under a 0775 parent: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a refused start wrote %v", ents)
	}
}

func TestStartRefusesATokenOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	u, err := user.Lookup("ferrytest")
	if err != nil {
		t.Skipf("no user ferrytest: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	dir := bus.Dir(t.TempDir())
	os.Mkdir(dir, 0o700)
	tok := store.BusFiles(dir).Token
	os.WriteFile(tok, []byte("theirs\n"), 0o600)
	os.Chown(tok, uid, uid)
	_, err = embedded.Start(embedded.Options{Dir: dir})
	if failure.KindOf(err) != failure.Refused || !strings.Contains(err.Error(), "owned by ferrytest") {
		t.Fatalf("start with their token: %v", err)
	}
	if _, err := os.Stat(store.BusFiles(dir).Info); err == nil {
		t.Fatal("a refused start wrote bus.json")
	}
}

func TestBusDirectoryUnprivileged(t *testing.T) {
	unpriv.Rerun(t, "^Test(BusDirectoryIsPrivateWhateverTheUmask|StartRefusesABusDirectoryOthersCanChange|TokenReadableByOthersIsRefused|HostFilesAndLoopback)$")
}

// TestMonitoringOnLoopback: with a monitor port the host serves NATS
// monitoring on 127.0.0.1 there (what the nats CLI, nats-surveyor and the
// NATS Prometheus exporter read): /varz names the server, /jsz counts
// Ferry's streams. Without one it serves none.
func TestMonitoringOnLoopback(t *testing.T) {
	if h := bustest.Start(t); h.MonitorURL() != "" {
		t.Errorf("monitoring at %s without a monitor port", h.MonitorURL())
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	h, err := embedded.Start(embedded.Options{Dir: bus.Dir(t.TempDir()), MonitorPort: port})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown()
	if want := "http://127.0.0.1:" + strconv.Itoa(port); h.MonitorURL() != want {
		t.Fatalf("monitoring at %q, want %s", h.MonitorURL(), want)
	}
	get := func(path string, v any) {
		t.Helper()
		resp, err := http.Get(h.MonitorURL() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var varz struct {
		ServerName string `json:"server_name"`
		Host       string `json:"host"`
		HTTPHost   string `json:"http_host"`
	}
	get("/varz", &varz)
	if varz.ServerName != "ferry-bus" || varz.Host != "127.0.0.1" || varz.HTTPHost != "127.0.0.1" {
		t.Errorf("/varz: %+v", varz)
	}
	var jsz struct {
		Streams int `json:"streams"`
	}
	get("/jsz", &jsz)
	if jsz.Streams < 2 {
		t.Errorf("/jsz: %d streams, want Ferry's (%s, %s)", jsz.Streams, bus.StreamCommits, bus.StreamEvents)
	}
}
