package base

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/record/demand"
	"github.com/ferrydev/ferry/pkg/store"
)

// A progressive build warms first the command agents ran most within the
// demand window, whatever its selection flags; the generated order's first
// (cargo build) when the log names none of the plan's commands, when the
// calls are older than the window, or when the settings do not learn.
func TestFirstCommandFollowsDemand(t *testing.T) {
	s := &store.Store{Dir: filepath.Join(t.TempDir(), "store")}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	settings := &config.Settings{WarmIsDefault: true, Demand: true, DemandWindow: 7 * 24 * time.Hour}
	p := &Plan{}
	for _, c := range config.DefaultWarm(true, true, false) {
		p.Warm = append(p.Warm, WarmCommand{Command: c})
	}
	p.Warm = append(p.Warm, WarmCommand{Command: "cargo doc", Demanded: 9})
	o := Options{Settings: settings, Store: s}
	if got := firstCommand(o, p); got != 0 {
		t.Fatalf("no log: first = %d (%s), want 0", got, p.Warm[got].Command)
	}
	call := func(args string, at time.Time) {
		cmd, ok := demand.Normalize(strings.Fields(args), ".")
		if !ok {
			t.Fatalf("cargo %s: not a command demand counts", args)
		}
		if err := demand.Append(s.DemandLog(), demand.Entry{Time: at, Agent: "a", Command: cmd.String(), Cmd: cmd}); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-30 * 24 * time.Hour)
	for range 5 {
		call("check", old) // outside the window
		call("doc", time.Now())
	}
	if got := firstCommand(o, p); got != 0 {
		t.Fatalf("calls outside the window or of demand's own commands: first = %d (%s), want 0", got, p.Warm[got].Command)
	}
	call("test --no-run", time.Now())
	call("test", time.Now())
	call("build", time.Now())
	if got := p.Warm[firstCommand(o, p)].Command; got != "cargo test --workspace --no-run" {
		t.Fatalf("agents ran cargo test most: first = %q", got)
	}
	settings.Demand = false
	if got := firstCommand(o, p); got != 0 {
		t.Fatalf("demand off: first = %d, want 0", got)
	}
}
