package warmset

import (
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/pkg/record/demand"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func call(agent, base, cmd string, first, inBase bool, fresh, compiled, newUnits int, secs float64) demand.Entry {
	c, _ := demand.Normalize(strings.Fields(cmd), ".")
	return demand.Entry{Time: t0, Agent: agent, Base: base, Command: c.String(), Cmd: c,
		First: first, InBase: inBase, Observed: true, Fresh: fresh, Compiled: compiled, New: newUnits, Seconds: secs}
}

var policy = Policy{Min: 3, Window: 7 * 24 * time.Hour, Budget: 1, Reference: 100}

func TestSelect(t *testing.T) {
	warmed := map[string]bool{"cargo build --workspace": true}
	entries := []demand.Entry{
		// Three agents built --release on a base without it: all missed.
		call("a", "b1", "build --release", true, false, 0, 54, 54, 40),
		call("b", "b1", "build --release", true, false, 0, 54, 54, 44),
		call("c", "b1", "build --release", true, false, 0, 54, 54, 42),
		// Plain cargo build: the base's own build holds its units.
		call("a", "b1", "build", true, false, 40, 0, 0, 0.2),
		call("b", "b1", "build", true, false, 40, 0, 0, 0.2),
		call("c", "b1", "build", true, false, 38, 2, 0, 0.9), // an edit: rebuilt, nothing new
		// A feature set two agents asked for: under demand-min.
		call("a", "b1", "build -F x", true, false, 30, 3, 3, 5),
		call("b", "b1", "build -F x", true, false, 30, 3, 3, 5),
		// What the base warms anyway, and what it cannot.
		call("a", "b1", "build --workspace", true, true, 40, 0, 0, 0.2),
		call("a", "b1", "build --workspace", false, true, 40, 0, 0, 0.2),
		call("b", "b1", "build --workspace", true, true, 40, 0, 0, 0.2),
		call("a", "b1", "+nightly build", true, false, 0, 40, 40, 30),
		call("b", "b1", "+nightly build", true, false, 0, 40, 40, 30),
		call("c", "b1", "+nightly build", true, false, 0, 40, 40, 30),
	}
	sel := Select(entries, warmed, policy, nil)
	if len(sel.Picked) != 1 || sel.Picked[0].Command != "cargo build --release" || sel.Picked[0].Warm != "cargo build --release --keep-going" {
		t.Fatalf("picked %+v, want cargo build --release", sel.Picked)
	}
	p := sel.Picked[0]
	if p.Calls != 3 || p.Agents != 3 || p.Missed != 3 || p.Seconds != 42 || !strings.Contains(p.Why, "demanded 3 times in 7 days") {
		t.Errorf("pick %+v", p)
	}
	if len(sel.Skipped) != 1 || sel.Skipped[0].Command != "cargo build" || !strings.Contains(sel.Skipped[0].Why, "hold its units") {
		t.Errorf("skipped %+v, want plain cargo build as held", sel.Skipped)
	}

	// Once a base warms it, its first builds hit: it stays picked while
	// agents run it.
	later := []demand.Entry{
		call("d", "b2", "build --release", true, true, 54, 0, 0, 0.3),
		call("e", "b2", "build --release", true, true, 54, 0, 0, 0.3),
		call("f", "b2", "build --release", true, true, 54, 0, 0, 0.3),
	}
	sel = Select(later, warmed, policy, map[string]float64{"cargo build --release": 6})
	if len(sel.Picked) != 1 || sel.Picked[0].Seconds != 6 || !strings.Contains(sel.Picked[0].Why, "warmed by an earlier base") {
		t.Errorf("after warming: %+v", sel)
	}
}

// The budget bounds the extra warm time: the most demanded command first.
func TestSelectBudget(t *testing.T) {
	var entries []demand.Entry
	for _, a := range []string{"a", "b", "c", "d"} {
		entries = append(entries, call(a, "b1", "build --release", true, false, 0, 54, 54, 80))
	}
	for _, a := range []string{"a", "b", "c"} {
		entries = append(entries, call(a, "b1", "check --release", true, false, 0, 50, 50, 30))
	}
	sel := Select(entries, nil, policy, nil)
	if len(sel.Picked) != 1 || sel.Picked[0].Command != "cargo build --release" {
		t.Fatalf("picked %+v", sel.Picked)
	}
	if len(sel.Skipped) != 1 || !strings.Contains(sel.Skipped[0].Why, "past the budget") {
		t.Errorf("skipped %+v", sel.Skipped)
	}
	big := policy
	big.Budget = 2
	if sel := Select(entries, nil, big, nil); len(sel.Picked) != 2 {
		t.Errorf("budget 2: picked %+v", sel.Picked)
	}
	none := policy
	none.Budget = 0
	if sel := Select(entries, nil, none, nil); len(sel.Picked) != 0 {
		t.Errorf("budget 0: picked %+v", sel.Picked)
	}
}

// Summarize: the first-build hit rate per command and per base, rising
// once a base warms the command.
func TestSummarize(t *testing.T) {
	e := []demand.Entry{
		call("a", "b1", "build --release", true, false, 0, 54, 54, 40),
		call("a", "b1", "build --release", false, false, 54, 0, 0, 0.3),
		call("b", "b1", "build --release", true, false, 0, 54, 54, 40),
		call("c", "b2", "build --release", true, true, 54, 0, 0, 0.3),
		call("c", "b2", "build", true, true, 40, 2, 0, 1),
	}
	for i := range e {
		e[i].Time = t0.Add(time.Duration(i) * time.Minute)
	}
	old := e[0]
	old.Time = t0.Add(-10 * 24 * time.Hour)
	s := Summarize(append([]demand.Entry{old}, e...), t0.Add(-7*24*time.Hour))
	if s.Calls != 5 || s.Agents != 3 || s.FirstBuilds != 4 {
		t.Fatalf("summary %+v", s)
	}
	rel := s.Commands[0]
	if rel.Command != "cargo build --release" || rel.Calls != 4 || rel.FirstBuilds != 3 || len(rel.ByBase) != 2 {
		t.Fatalf("release %+v", rel)
	}
	if *rel.ByBase[0].HitRate != 0 || *rel.ByBase[1].HitRate != 1 {
		t.Errorf("release by base: %v then %v, want 0 then 1", *rel.ByBase[0].HitRate, *rel.ByBase[1].HitRate)
	}
	if len(s.Worst) != 3 || s.Worst[0].Compiled != 54 {
		t.Errorf("worst %+v", s.Worst)
	}
}
