package pipeline_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/internal/eventstest"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/pipeline"
)

// A hook-created agent becomes abandoned by time passing, which no event
// announces: ferry up's gc reaps it on its own, with no base built and no
// agent removed after it went quiet.
func TestUpReapsAbandonedHookAgents(t *testing.T) {
	w := newWorld(t)
	w.open()
	up := w.start([]string{"FERRY_REAP_AFTER=1s", "FERRY_BACKEND=copy"}, "ferry", "up", "--interval", "0.1")
	t.Cleanup(func() {
		up.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-up.done:
		case <-time.After(wait):
		}
	})
	conn := dialHosted(t, w.home)
	ev := eventstest.Watch(t, conn.JS, events.SubjectRepo(w.store.Key))
	eventstest.For(ev, wait, readyFor(w.repo.Head))

	// Claude Code's WorktreeCreate, once gc has made its first pass.
	payload := `{"session_id":"s-reap","cwd":"` + w.repo.Dir + `","hook_event_name":"WorktreeCreate","name":"left-behind"}`
	c := exec.Command(filepath.Join(testenv.Binaries(t), "ferry"), "hook", "claude-code", "WorktreeCreate")
	c.Dir, c.Env, c.Stdin = w.repo.Dir, childEnv(append(w.baseVars(), "FERRY_BACKEND=copy")...), strings.NewReader(payload)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("WorktreeCreate: %v\n%s", err, out)
	}
	removed := eventstest.For(ev, wait, func(e *events.AgentRemoved) bool { return e.Name == "left-behind" })
	if !removed.Reaped {
		t.Fatalf("agent.removed for left-behind is not a reaping: %+v", removed)
	}
}

// gc looks without being told to at a quarter of reap-after, within a
// second and an hour.
func TestReapInterval(t *testing.T) {
	for after, want := range map[time.Duration]time.Duration{
		0: time.Second, time.Second: time.Second, 8 * time.Second: 2 * time.Second,
		24 * time.Hour: time.Hour, 2 * time.Hour: 30 * time.Minute,
	} {
		if got := pipeline.ReapInterval(after); got != want {
			t.Errorf("ReapInterval(%v) = %v, want %v", after, got, want)
		}
	}
}
