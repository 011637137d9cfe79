package warmset

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/record/demand"
)

// Policy is how a base learns from demand ([base] demand-min,
// demand-window, demand-budget).
type Policy struct {
	Min    int           // calls within Window that make a command demanded
	Window time.Duration // how far back calls count
	// Budget bounds the extra warm time: the demanded commands' estimated
	// cost may add up to Budget times Reference.
	Budget float64
	// Reference is the warm cost of the base's own commands, in CPU
	// seconds: what they cost cold (see package base).
	Reference float64
}

// Pick is a command Select considered; base.json records the picks of a
// base that learned (record.Learned).
type Pick = record.Pick

// Selection is what Select decided.
type Selection struct {
	Picked  []Pick `json:"picked"`
	Skipped []Pick `json:"skipped,omitempty"` // demanded, but not warmed: Why says why
}

// Select picks the commands a base warms beyond warmed (the commands it
// warms anyway, as KeyOf keys them) from entries, the log's calls in the
// policy's window: each learnable command agents ran at least p.Min times
// whose units the base's own commands do not hold, as the evidence shows:
//
//   - a first build of it on a base that did not warm it compiled units
//     that base did not hold: demanded (and missed);
//   - every such first build compiled nothing new: the base's own
//     commands hold its units, it is not picked;
//   - none was observed on such a base (the bases warmed it already, or
//     its output was left alone): demanded, as long as agents run it.
//
// Candidates are taken by calls, most first, while their estimated cost
// (the median CPU time of their missed first builds, else of their calls,
// or lastWarm's record of what warming them took) fits in p.Budget times
// p.Reference; the rest are skipped, each with the reason.
func Select(entries []demand.Entry, warmed map[string]bool, p Policy, lastWarm map[string]float64) Selection {
	type group struct {
		es     []demand.Entry
		agents map[string]bool
	}
	groups := map[string]*group{}
	for _, e := range entries {
		if e.Cmd.Warm() == "" || warmed[e.Command] {
			continue
		}
		g := groups[e.Command]
		if g == nil {
			g = &group{agents: map[string]bool{}}
			groups[e.Command] = g
		}
		g.es = append(g.es, e)
		g.agents[e.Agent] = true
	}
	var cands []Pick
	var sel Selection
	for cmdKey, g := range groups {
		if len(g.es) < p.Min {
			continue
		}
		var missed, held []demand.Entry
		warmedBefore := false
		for _, e := range g.es {
			warmedBefore = warmedBefore || e.InBase
			if !e.First || !e.Observed || e.InBase {
				continue
			}
			if e.New > 0 {
				missed = append(missed, e)
			} else if e.Exit == 0 {
				held = append(held, e)
			}
		}
		last := g.es[len(g.es)-1]
		pk := Pick{Command: cmdKey, Warm: last.Cmd.Warm(), Calls: len(g.es), Agents: len(g.agents), Missed: len(missed)}
		switch {
		case len(missed) > 0:
			pk.Seconds = medianSeconds(missed)
			pk.Why = fmt.Sprintf("demanded %d times in %s; %d first build(s) on bases without it compiled units they did not hold", pk.Calls, days(p.Window), len(missed))
		case len(held) > 0 && !warmedBefore:
			pk.Why = fmt.Sprintf("demanded %d times in %s, but the base's own commands hold its units: %d first build(s) compiled nothing new", pk.Calls, days(p.Window), len(held))
			sel.Skipped = append(sel.Skipped, pk)
			continue
		default:
			pk.Seconds = medianSeconds(g.es)
			if s, ok := lastWarm[cmdKey]; ok {
				pk.Seconds = s
			}
			pk.Why = fmt.Sprintf("demanded %d times in %s", pk.Calls, days(p.Window))
			if warmedBefore {
				pk.Why += " (warmed by an earlier base)"
			}
		}
		cands = append(cands, pk)
	}
	slices.SortFunc(cands, func(a, b Pick) int {
		return cmp.Or(cmp.Compare(b.Calls, a.Calls), cmp.Compare(b.Missed, a.Missed), cmp.Compare(a.Command, b.Command))
	})
	budget := p.Budget * p.Reference
	spent := 0.0
	for _, c := range cands {
		if p.Reference > 0 && spent+c.Seconds > budget {
			c.Why = fmt.Sprintf("%s; not warmed: its estimated %.1f CPU seconds would take the extra warm cost past the budget (%.1f: demand-budget %.2g × the base's own %.1f)",
				c.Why, c.Seconds, budget, p.Budget, p.Reference)
			sel.Skipped = append(sel.Skipped, c)
			continue
		}
		spent += c.Seconds
		sel.Picked = append(sel.Picked, c)
	}
	slices.SortFunc(sel.Skipped, func(a, b Pick) int { return cmp.Compare(a.Command, b.Command) })
	return sel
}

// medianSeconds is the median CPU time of es (the wall time of an entry
// that has none).
func medianSeconds(es []demand.Entry) float64 {
	if len(es) == 0 {
		return 0
	}
	s := make([]float64, len(es))
	for i, e := range es {
		s[i] = e.CPU
		if s[i] == 0 {
			s[i] = e.Seconds
		}
	}
	slices.Sort(s)
	return s[len(s)/2]
}

// days words a window: "7 days", "36h0m0s".
func days(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		n := int(d / (24 * time.Hour))
		if n == 1 {
			return "1 day"
		}
		return fmt.Sprintf("%d days", n)
	}
	return d.String()
}
