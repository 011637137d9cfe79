package ferrycmd

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/pkg/record/demand"
	"github.com/ferrydev/ferry/pkg/warmset"
)

// The BY BASE column names each base (its commit and the start of its
// fingerprint, as two bases of one commit differ there) beside its rate.
func TestStatsByBaseNamesEachBase(t *testing.T) {
	old := "0123456789abcdef0123456789abcdef01234567-aaaaaaaaaaaaaaaa"
	rebuilt := "0123456789abcdef0123456789abcdef01234567-bbbbbbbbbbbbbbbb"
	now := time.Now()
	entries := []demand.Entry{
		{Time: now.Add(-time.Hour), Agent: "a1", Base: old, Command: "cargo build", First: true, Observed: true, Fresh: 1, Compiled: 3},
		{Time: now, Agent: "a2", Base: rebuilt, Command: "cargo build", First: true, Observed: true, Fresh: 4},
		{Time: now, Agent: "a3", Command: "cargo test", First: true, Observed: true, Compiled: 2},
	}
	s := statsJSON{Store: "/s", Summary: warmset.Summarize(entries, now.Add(-24*time.Hour))}
	var out bytes.Buffer
	if err := printStats(&out, s, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"0123456789ab-aaaaaa: 25% → 0123456789ab-bbbbbb: 100%", "no base: 0%"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
}
