package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/events"
)

// Human output rounds durations and shortens ids, and never cuts a path.
func TestEventLine(t *testing.T) {
	long := "/home/someone/.local/share/ferry/worktrees/a-repository-with-a-long-name-0123456789ab/agent-with-a-long-name"
	commit := strings.Repeat("ab", 20)
	ready := &events.BaseReady{BaseID: commit + "-0123456789abcdef", Commit: commit, Fingerprint: "0123456789abcdef", Current: true, Seconds: 18.229214334,
		Warm: []events.WarmCommand{{Command: "cargo build --workspace", Why: "default"}, {Command: "cargo build --release", Why: "demanded 3 times", Demanded: 3}}}
	ready.Time = time.Date(2026, 11, 30, 8, 1, 2, 0, time.Local)
	line := EventLine(ready)
	for _, want := range []string{"08:01:02.000", "base.ready", "seconds=18.2s", "commit=abababababab…", "base_id=abababababab…", "current=true", "warm=2_commands(1_demanded)"} {
		if !strings.Contains(line, want) {
			t.Errorf("line lacks %q:\n%s", want, line)
		}
	}
	spawned := &events.AgentSpawned{Name: "a", Branch: "ferry/a", Worktree: long, BaseID: commit + "-0123456789abcdef"}
	if line := EventLine(spawned); !strings.Contains(line, "worktree="+long+" ") && !strings.HasSuffix(line, "worktree="+long) {
		t.Errorf("the path is not whole:\n%s", line)
	}
	failed := &events.BaseFailed{Commit: commit, Error: "warm command failed", ExitKind: "build-failed", ExitCode: 5}
	if line := EventLine(failed); !strings.Contains(line, `error="warm command failed"`) {
		t.Errorf("an error with spaces is not quoted:\n%s", line)
	}
	for s, want := range map[float64]string{0.0004: "400µs", 0.0123: "12ms", 3.44: "3.4s", 125.4: "2m5s"} {
		if got := Seconds(s); got != want {
			t.Errorf("Seconds(%v) = %q, want %q", s, got, want)
		}
	}
}

// A short base id keeps part of the fingerprint: a commit's first base and
// its full one differ only there.
func TestShortBase(t *testing.T) {
	commit := strings.Repeat("ab", 20)
	first, full := ShortBase(commit+"-0123456789abcdef"), ShortBase(commit+"-fedcba9876543210")
	if first != "abababababab-012345" || full == first {
		t.Errorf("ShortBase = %q and %q", first, full)
	}
	if got := ShortBase("abc"); got != "abc" {
		t.Errorf("ShortBase(abc) = %q", got)
	}
}
