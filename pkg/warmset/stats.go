package warmset

import (
	"cmp"
	"slices"
	"time"

	"github.com/ferrydev/ferry/pkg/record/demand"
)

// Rate is a hit rate: of the units first builds built, how many were
// fresh (from the base).
type Rate struct {
	FirstBuilds int `json:"first_builds"` // observed first builds counted
	Fresh       int `json:"fresh"`
	Units       int `json:"units"` // fresh + compiled
	New         int `json:"new"`   // compiled units their base did not hold
	// HitRate is Fresh / Units, or nil when no unit was counted.
	HitRate *float64 `json:"hit_rate"`
}

func (r *Rate) add(e demand.Entry) {
	r.FirstBuilds++
	r.Fresh += e.Fresh
	r.Units += e.Units()
	r.New += e.New
	if r.Units > 0 {
		h := float64(r.Fresh) / float64(r.Units)
		r.HitRate = &h
	}
}

// BaseRate is a command's first-build hit rate on one base.
type BaseRate struct {
	Base  string    `json:"base"`
	First time.Time `json:"first"` // the first such build
	Rate
}

// CommandStats is what agents did with one command within the window.
type CommandStats struct {
	Command string `json:"command"`
	Calls   int    `json:"calls"`
	Agents  int    `json:"agents"`
	// Rate is over the command's observed first builds in the window;
	// ByBase splits it by the base the agents were forked from, oldest
	// base first: a demanded command's rate rises once a base warms it.
	Rate
	ByBase []BaseRate `json:"by_base"`
	// Learnable is "" when a base can warm the command, else why not.
	Unlearnable string `json:"unlearnable,omitempty"`
}

// Summary is the hit rates of a repository's agents within a window.
type Summary struct {
	Since    time.Time      `json:"since"`
	Calls    int            `json:"calls"`
	Agents   int            `json:"agents"`
	Rate                    // every observed first build
	Commands []CommandStats `json:"commands"` // most called first
	// Worst are the first builds that compiled the most units, newest
	// first among equals (at most WorstN).
	Worst []demand.Entry `json:"worst"`
}

// WorstN bounds Summary.Worst.
const WorstN = 5

// Summarize sums entries (the log's calls since since) up.
func Summarize(entries []demand.Entry, since time.Time) Summary {
	s := Summary{Since: since, Commands: []CommandStats{}, Worst: []demand.Entry{}}
	agents := map[string]bool{}
	byCmd := map[string]*CommandStats{}
	cmdAgents := map[string]map[string]bool{}
	var worst []demand.Entry
	for _, e := range demand.Since(entries, since) {
		s.Calls++
		agents[e.Agent] = true
		c := byCmd[e.Command]
		if c == nil {
			c = &CommandStats{Command: e.Command, Unlearnable: e.Cmd.Unlearnable}
			byCmd[e.Command] = c
			cmdAgents[e.Command] = map[string]bool{}
		}
		c.Calls++
		cmdAgents[e.Command][e.Agent] = true
		if !e.First || !e.Observed {
			continue
		}
		s.Rate.add(e)
		c.Rate.add(e)
		i := slices.IndexFunc(c.ByBase, func(b BaseRate) bool { return b.Base == e.Base })
		if i < 0 {
			c.ByBase = append(c.ByBase, BaseRate{Base: e.Base, First: e.Time})
			i = len(c.ByBase) - 1
		}
		c.ByBase[i].Rate.add(e)
		if e.Compiled > 0 {
			worst = append(worst, e)
		}
	}
	s.Agents = len(agents)
	for k, c := range byCmd {
		c.Agents = len(cmdAgents[k])
		slices.SortStableFunc(c.ByBase, func(a, b BaseRate) int { return a.First.Compare(b.First) })
		s.Commands = append(s.Commands, *c)
	}
	slices.SortFunc(s.Commands, func(a, b CommandStats) int {
		return cmp.Or(cmp.Compare(b.Calls, a.Calls), cmp.Compare(a.Command, b.Command))
	})
	slices.SortStableFunc(worst, func(a, b demand.Entry) int {
		return cmp.Or(cmp.Compare(b.Compiled, a.Compiled), b.Time.Compare(a.Time))
	})
	if len(worst) > WorstN {
		worst = worst[:WorstN]
	}
	s.Worst = append(s.Worst, worst...)
	return s
}
