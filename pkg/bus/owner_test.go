package bus_test

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/ferrydev/ferry/internal/bustest"
	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/internal/unpriv"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/store"
)

// connections is how many clients ever connected to h's server.
func connections(t *testing.T, srv *server.Server) uint64 {
	t.Helper()
	v, err := srv.Varz(nil)
	if err != nil {
		t.Fatal(err)
	}
	return v.TotalConnections
}

// plant writes a bus directory at bus.Dir(parent), mode dirMode, holding a
// copy of the bus.json and token of h (token mode tokMode): what another
// user who hosts their own bus leaves for a victim to find. owner, when not
// -1, gets the directory and files, as a user who made them would own them.
func plant(t *testing.T, parent string, srvDir string, dirMode, tokMode os.FileMode, owner int) string {
	t.Helper()
	dir := bus.Dir(parent)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"bus.json": 0o644, "token": tokMode} {
		b, err := os.ReadFile(filepath.Join(srvDir, name))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		if owner != -1 {
			os.Chown(p, owner, owner)
		}
	}
	if err := os.Chmod(dir, dirMode); err != nil {
		t.Fatal(err)
	}
	if owner != -1 {
		os.Chown(dir, owner, owner)
	}
	return dir
}

// testUser is the unprivileged test user's uid; it skips unless root.
func testUser(t *testing.T) (string, int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another user")
	}
	name := knobs.User()
	u, err := user.Lookup(name)
	if err != nil {
		t.Skipf("no user %q: %v", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	return name, uid
}

// refusedNoContact checks that a client with store parent parent is
// refused (exit 6, the message containing want), through Discover, Dial,
// DialWait and Emit, that Emit queued nothing, and that the server never
// saw a connection.
func refusedNoContact(t *testing.T, srv *server.Server, parent, want string) {
	t.Helper()
	before := connections(t, srv)
	cfg := bus.Config{Parent: parent, Name: "victim", Bound: 2 * time.Second}
	check := func(what string, err error) {
		t.Helper()
		if failure.KindOf(err) != failure.Refused || !strings.Contains(err.Error(), want) || failure.HintOf(err) == "" {
			t.Fatalf("%s: %v (kind %v, hint %q); want a refusal naming %q", what, err, failure.KindOf(err), failure.HintOf(err), want)
		}
	}
	_, err := bus.Discover(cfg)
	check("Discover", err)
	_, err = bus.Dial(ctxT(t), cfg)
	check("Dial", err)
	// A long-running client gives up at once: this does not fix itself.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err = bus.DialWait(ctx, cfg, nil)
	check("DialWait", err)
	if time.Since(start) > 2*time.Second {
		t.Fatalf("DialWait retried a refusal for %v", time.Since(start))
	}
	_, err = bus.Emit(ctxT(t), cfg, ready(repoA, 1))
	check("Emit", err)
	if _, err := os.Stat(bus.OutboxDir(parent, repoA)); err == nil {
		t.Fatal("Emit queued the event under a store parent it refused")
	}
	if n := connections(t, srv); n != before {
		t.Fatalf("the planted bus saw %d new connection(s)", n-before)
	}
}

func TestDiscoverRefusesAnOpenBusDirectory(t *testing.T) {
	h := bustest.Start(t) // the other user's bus, in a directory of its own
	victim := t.TempDir()
	dir := plant(t, victim, h.Dir(), 0o777, 0o600, -1)
	refusedNoContact(t, h.Server(), victim, dir+" is writable by group and others")

	// Once the directory is the caller's alone, the same files are used.
	os.Chmod(dir, 0o700)
	ep, err := bus.Discover(bus.Config{Parent: victim})
	if err != nil || ep.URL != h.URL() {
		t.Fatalf("after chmod: %+v, %v", ep, err)
	}
}

func TestDiscoverRefusesAnotherUsersBus(t *testing.T) {
	name, uid := testUser(t)
	h := bustest.Start(t)
	victim := t.TempDir()
	plant(t, victim, h.Dir(), 0o755, 0o600, uid)
	// Root is not exempt: it can read their token, and must not use it.
	refusedNoContact(t, h.Server(), victim, "owned by "+name+" (uid "+strconv.Itoa(uid)+")")

	// A store parent of theirs, with a bus directory that looks right.
	victim2 := filepath.Join(t.TempDir(), "home")
	os.Mkdir(victim2, 0o755)
	plant(t, victim2, h.Dir(), 0o700, 0o600, -1)
	os.Chown(victim2, uid, uid)
	refusedNoContact(t, h.Server(), victim2, "owned by "+name)
}

func TestDiscoverRefusesATokenOthersCouldKnow(t *testing.T) {
	h := bustest.Start(t)
	victim := t.TempDir()
	dir := plant(t, victim, h.Dir(), 0o700, 0o644, -1)
	tok := store.BusFiles(dir).Token
	_, err := bus.Discover(bus.Config{Parent: victim})
	if failure.KindOf(err) != failure.Refused || !strings.Contains(err.Error(), "readable by others") ||
		!strings.Contains(failure.HintOf(err), "chmod 600") {
		t.Fatalf("a 0644 token: %v", err)
	}
	// A symlink to a token: refused, whatever it points at.
	os.Rename(tok, tok+".real")
	os.Chmod(tok+".real", 0o600)
	os.Symlink(tok+".real", tok)
	if _, err := bus.Discover(bus.Config{Parent: victim}); failure.KindOf(err) != failure.Refused || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("a symlinked token: %v", err)
	}
	os.Remove(tok)
	os.Rename(tok+".real", tok)
	if _, err := bus.Discover(bus.Config{Parent: victim}); err != nil {
		t.Fatalf("an own 0600 token: %v", err)
	}
}

func TestDiscoverRefusesATokenOfAnotherUser(t *testing.T) {
	name, uid := testUser(t)
	h := bustest.Start(t)
	victim := t.TempDir()
	dir := plant(t, victim, h.Dir(), 0o700, 0o600, -1)
	os.Chown(store.BusFiles(dir).Token, uid, uid)
	_, err := bus.Discover(bus.Config{Parent: victim})
	if failure.KindOf(err) != failure.Refused || !strings.Contains(err.Error(), "owned by "+name) {
		t.Fatalf("their token: %v", err)
	}
}

func TestOwnerRefusalsUnprivileged(t *testing.T) {
	unpriv.Rerun(t, "^Test(DiscoverRefusesAnOpenBusDirectory|DiscoverRefusesATokenOthersCouldKnow|Discover)$")
}
