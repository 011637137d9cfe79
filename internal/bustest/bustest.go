// Package bustest starts a real embedded JetStream bus for a test: a fresh
// store parent under t.TempDir(), a random loopback port, the test's own
// token, stopped when the test ends. Tests of Ferry's stages use it instead
// of a fake bus (a real server costs about 20 ms). It is test-only code, so it
// lives under internal/ rather than in the library under pkg/.
package bustest

import (
	"context"
	"testing"
	"time"

	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/bus/embedded"
)

// Start hosts a bus in the bus directory of a new temporary store parent and
// returns it; bus.Dir(filepath.Dir(h.Dir())) == h.Dir().
func Start(t testing.TB) *embedded.Host {
	t.Helper()
	return StartIn(t, t.TempDir())
}

// StartIn hosts a bus for the store parent parent (for a test that restarts
// the bus on the same store, or shares the parent with other processes).
func StartIn(t testing.TB, parent string) *embedded.Host {
	t.Helper()
	h, err := embedded.Start(embedded.Options{Dir: bus.Dir(parent)})
	if err != nil {
		t.Fatalf("start the bus: %v", err)
	}
	t.Cleanup(func() { h.Shutdown() })
	return h
}

// Dial connects a client of h over TCP with h's URL and token, closed when
// the test ends.
func Dial(t testing.TB, h *embedded.Host, name string) *bus.Conn {
	t.Helper()
	cfg := h.ClientConfig(name)
	cfg.InProcess, cfg.URL = nil, h.URL()
	cfg.Bound = 5 * time.Second // a loaded CI machine is not a down bus
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := bus.Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("connect to the bus: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}
