package bus_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/internal/bustest"
	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/store"
)

// BenchmarkEmit is the event cost of a one-shot command, connection
// included: discover (bus.json, token), connect, flush an empty outbox,
// publish, wait for the fsynced acknowledgement, close; or, without a bus,
// the outbox write (temp file, fsync, rename, fsync of the directory).
func BenchmarkEmit(b *testing.B) {
	ctx := context.Background()
	emit := func(b *testing.B, parent string, want bus.Delivery) {
		for i := 0; i < b.N; i++ {
			ev := events.Stamp(&events.AgentRemoved{Name: "a"}, repoA)
			d, err := bus.Emit(ctx, bus.Config{Parent: parent, Name: "bench"}, ev)
			if err != nil || d != want {
				b.Fatalf("Emit: %v, %v; want %v", d, err, want)
			}
			if want == bus.Queued {
				b.StopTimer()
				os.Remove(filepath.Join(bus.OutboxDir(parent, repoA), ev.ID+".json"))
				b.StartTimer()
			}
		}
	}
	b.Run("bus", func(b *testing.B) {
		parent := b.TempDir()
		bustest.StartIn(b, parent)
		b.ResetTimer()
		emit(b, parent, bus.Published)
	})
	b.Run("no-bus-outbox", func(b *testing.B) {
		emit(b, b.TempDir(), bus.Queued)
	})
	b.Run("dead-bus-outbox", func(b *testing.B) {
		parent := b.TempDir()
		os.MkdirAll(bus.Dir(parent), 0o755)
		os.WriteFile(store.BusFiles(bus.Dir(parent)).Token, []byte("t\n"), 0o600)
		atomicfile.WriteJSON(store.BusFiles(bus.Dir(parent)).Info, bus.Info{URL: deadURL(b), PID: 1}, 0o644)
		emit(b, parent, bus.Queued)
	})
}
