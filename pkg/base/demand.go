package base

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/record/demand"
	"github.com/ferrydev/ferry/pkg/warmset"
)

// Warm sets learned from demand. With the generated warm commands
// ([base] warm = "auto", the default) and [base] demand on, a base also
// warms the commands agents ran at least demand-min times within
// demand-window whose units the generated commands do not hold (package
// demand decides from the agents' first builds), while their estimated
// cost fits in demand-budget times the base's own warm cost, both in CPU
// time (which, unlike the wall time, does not grow with what else the
// host runs: a build host's load would otherwise decide). Configured
// commands always win: a ferry.toml that lists them learns nothing.
//
// A demanded command is not part of the base's fingerprint, so bases with
// other demanded sets still seed one another: the set joins the unit
// inputs instead. A refresh whose set differs from its seed's is then
// seeded across unit inputs, and its observed warm build prunes what no
// command of its own used, so a command that fell out of demand leaves
// no unit behind that its warm build did not check (invariant 2).

// Learned is what a base learned from demand, as base.json records it.
type Learned = record.Learned

// learn adds to p the commands agents demand, when the settings let a
// base learn. Nothing it meets fails the build: a log it cannot read
// learns nothing, and says so.
func learn(o Options, p *Plan) {
	st := o.Settings
	if !st.Learns() {
		return
	}
	l := &Learned{Window: st.DemandWindow.String(), Min: st.DemandMin, Budget: st.DemandBudget, Picked: []warmset.Pick{}}
	if st.DemandWindow%(24*time.Hour) == 0 {
		l.Window = fmt.Sprintf("%dd", st.DemandWindow/(24*time.Hour))
	}
	p.Learned = l
	log, err := demand.Read(o.Store.DemandLog())
	if err != nil {
		l.Error = err.Error()
		return
	}
	l.Damaged = log.Damaged
	entries := demand.Since(log.Entries, time.Now().Add(-st.DemandWindow))
	l.Calls = len(entries)
	warmed := map[string]bool{}
	for _, w := range p.Warm {
		if k, ok := demand.KeyOf(w.Command); ok {
			warmed[k] = true
		}
	}
	var lastWarm map[string]float64
	l.Reference, lastWarm = reference(o, p)
	sel := warmset.Select(entries, warmed, warmset.Policy{Min: st.DemandMin, Window: st.DemandWindow, Budget: st.DemandBudget, Reference: l.Reference}, lastWarm)
	l.Picked, l.Skipped = append(l.Picked, sel.Picked...), sel.Skipped
	if len(sel.Picked) == 0 {
		return
	}
	h := sha256.New()
	fmt.Fprintf(h, "unit inputs %s\n", p.UnitInputs)
	for _, pk := range sel.Picked {
		p.Warm = append(p.Warm, WarmCommand{Command: pk.Warm, Generated: true, KeepGoing: true, Why: pk.Why, Demanded: pk.Calls})
		fmt.Fprintf(h, "demanded %q\n", pk.Warm)
	}
	p.UnitInputs = hex.EncodeToString(h.Sum(nil))
}

// reference finds the base's own warm CPU time that demand's budget is a
// fraction of, from the newest ready base of p's fingerprint (the one a
// refresh would build on), and the CPU time warming each command it
// demanded took there. 0 when there is none.
func reference(o Options, p *Plan) (float64, map[string]float64) {
	list, err := List(o.Store)
	if err != nil {
		return 0, nil
	}
	for _, e := range list { // newest first
		r := e.Record
		if r == nil || r.Fingerprint != p.Fingerprint() {
			continue
		}
		last := map[string]float64{}
		for _, w := range r.Warm {
			if w.Demanded > 0 {
				if k, ok := demand.KeyOf(w.Command); ok {
					last[k] = w.CPU
				}
			}
		}
		return r.reference(), last
	}
	return 0, nil
}

// reference is r's WarmReference, or for a record without one, what its
// own commands took.
func (r *Record) reference() float64 {
	if r.WarmReference > 0 {
		return r.WarmReference
	}
	return r.ownWarmSeconds()
}

// ownWarmSeconds sums the CPU times of r's warm commands that were not
// demanded.
func (r *Record) ownWarmSeconds() float64 {
	total := 0.0
	for _, w := range r.Warm {
		if w.Demanded == 0 {
			total += w.CPU
		}
	}
	return total
}

// firstCommand is the index in p.Warm of the command a progressive build
// warms first: of the commands of the plan's own (not those demand added),
// the one agents ran most often within the demand window, as the demand
// log counts calls; the first of them (cargo build) when the log names
// none of them, or the settings do not learn.
func firstCommand(o Options, p *Plan) int {
	if !o.Settings.Learns() {
		return 0
	}
	log, err := demand.Read(o.Store.DemandLog())
	if err != nil {
		return 0
	}
	// Counted by command and flags whatever the selection: a call of
	// `cargo test` in a member counts for the generated `cargo test
	// --workspace`, which warms its units too. Which command goes first is
	// only a matter of when agents are warm, never of what they get.
	bare := func(key string) string { return strings.Replace(key, " --workspace", "", 1) }
	calls := map[string]int{}
	for _, e := range demand.Since(log.Entries, time.Now().Add(-o.Settings.DemandWindow)) {
		calls[bare(e.Command)]++
	}
	best, most := 0, 0
	for i, w := range p.Warm {
		if w.Demanded > 0 {
			break // demand's own commands end the list
		}
		if k, ok := demand.KeyOf(w.Command); ok && calls[bare(k)] > most {
			best, most = i, calls[bare(k)]
		}
	}
	return best
}
