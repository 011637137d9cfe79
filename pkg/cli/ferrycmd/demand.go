package ferrycmd

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/record/demand"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
	"github.com/ferrydev/ferry/pkg/warmset"
)

type statsCmd struct {
	Window string `help:"How far back to count: a duration such as 36h, or days such as 7d (default: [base] demand-window)."`
	Disk   bool   `help:"Show what the store takes on disk instead: physical bytes (each block once) beside apparent bytes, for the store, each base and each agent, and what the agents would take as plain worktrees."`
	JSON   bool   `name:"json" help:"Print the statistics as JSON."`
}

// statsJSON is ferry stats --json.
type statsJSON struct {
	Repository string `json:"repository"`
	Store      string `json:"store"`
	Window     string `json:"window"`
	warmset.Summary
	// Damaged is how many lines of the demand log could not be read; the
	// log was rewritten without them.
	Damaged int `json:"damaged"`
}

func statsAgents(args []string, io cli.IO) int {
	var c statsCmd
	return cli.Run("ferry stats", "Show how warm agents' first builds were: per command agents ran, how many of the units their first build of it built were fresh from the base (the hit rate), by base, and the worst recent misses. `ferry why` tells why an agent's build compiled what it did.",
		[]string{"ferry stats", "ferry stats --window 1d --json", "ferry stats --disk"}, &c, args, io, &c.JSON, func() error {
			fc, err := cli.Load(".")
			if err != nil {
				return err
			}
			if c.Disk {
				d, err := diskUse(fc.Store)
				if err != nil {
					return err
				}
				if c.JSON {
					return cli.WriteJSON(io.Stdout, d)
				}
				return printDisk(io.Stdout, d)
			}
			window := fc.Settings.DemandWindow
			if c.Window != "" {
				d, msg, hint := config.ParseDemandWindow(c.Window)
				if msg != "" {
					return failure.New(failure.Usage, hint, "--window %q: %s", c.Window, msg)
				}
				window = d
			}
			log, err := demand.Read(fc.Store.DemandLog())
			if err != nil {
				return fmt.Errorf("read the demand log: %w", err)
			}
			if log.Damaged > 0 {
				fmt.Fprintf(io.Stderr, "ferry stats: the demand log had %d line(s) that could not be read: rebuilt without them\n", log.Damaged)
			}
			out := statsJSON{Repository: fc.Repo.Top, Store: fc.Store.Dir, Window: window.String(),
				Summary: warmset.Summarize(log.Entries, time.Now().Add(-window)), Damaged: log.Damaged}
			if c.JSON {
				return cli.WriteJSON(io.Stdout, out)
			}
			return printStats(io.Stdout, out, window)
		})
}

func printStats(w io.Writer, s statsJSON, window time.Duration) error {
	fmt.Fprintf(w, "%d agent cargo call(s) by %d agent(s) in the last %s (store %s)\n", s.Calls, s.Agents, windowWords(window), s.Store)
	if s.Calls == 0 {
		fmt.Fprintln(w, "nothing recorded yet: agents' cargo calls are recorded by the shim (ferry env, ferry run, or the agent tool's hooks put it on PATH)")
		return nil
	}
	fmt.Fprintf(w, "first builds: %d, %s of their units fresh from the base (%d of %d; %d not in the base at all)\n\n",
		s.FirstBuilds, rate(s.Rate), s.Fresh, s.Units, s.New)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMMAND\tCALLS\tAGENTS\tFIRST\tHIT RATE\tBY BASE, OLDEST FIRST")
	for _, c := range s.Commands {
		var by []string
		for _, b := range c.ByBase {
			by = append(by, fmt.Sprintf("%s: %s", baseWords(b.Base), rate(b.Rate)))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", c.Command, c.Calls, c.Agents, c.FirstBuilds, rate(c.Rate), orDash(strings.Join(by, " → ")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.Worst) > 0 {
		fmt.Fprintln(w, "\nworst first builds:")
		for _, e := range s.Worst {
			fmt.Fprintf(w, "  %s  %s  %s: compiled %d of %d unit(s), %d not in base %s, %s\n",
				e.Time.Local().Format("2006-01-02 15:04"), e.Agent, e.Command, e.Compiled, e.Units(), e.New, cli.Short(e.Base), cli.Seconds(e.Seconds))
		}
		fmt.Fprintln(w, "\n`ferry why NAME` tells why an agent's last build compiled what it did.")
	}
	return nil
}

// baseWords names a base in a table: its commit's short hash and the
// start of its fingerprint (the id's parts), "no base" for calls of an
// agent made cold.
func baseWords(id string) string {
	if id == "" {
		return "no base"
	}
	return cli.ShortBase(id)
}

// rate words a hit rate: 87%, or - when nothing was counted.
func rate(r warmset.Rate) string {
	if r.HitRate == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", *r.HitRate*100)
}

type whyCmd struct {
	Name string `arg:"" optional:"" help:"Agent name (default: the agent whose worktree holds the working directory)."`
	All  bool   `help:"Explain every unit, not only the first ones."`
	JSON bool   `name:"json" help:"Print the explanation as JSON."`
}

// whyJSON is ferry why --json.
type whyJSON struct {
	Agent string            `json:"agent"`
	Build *demand.LastBuild `json:"build"` // null: the agent has compiled nothing since it was spawned
	// Reasons say why each unit was compiled, in Cargo's order (a unit
	// after those it depends on).
	Reasons []warmset.Reason `json:"reasons"`
}

// whyShown is how many units ferry why explains one by one without --all.
const whyShown = 8

func whyAgent(args []string, io cli.IO) int {
	var c whyCmd
	return cli.Run("ferry why", "Say why an agent's last build that compiled units compiled them: for each unit, whether the base holds it at all, and what differs — a source file the agent edited, an environment variable, a feature set, a profile, flags, or a dependency the build compiled again. It tells a miss the base could have avoided (demand) from the agent's own edit.",
		[]string{"ferry why fix-parser", "ferry why --json"}, &c, args, io, &c.JSON, func() error {
			fc, err := cli.Load(".")
			if err != nil {
				return err
			}
			r, err := resolveAgent(fc, c.Name)
			if err != nil {
				return err
			}
			files := fc.Store.Agent(r.Name)
			b, err := demand.ReadLastBuild(files.LastBuild)
			if err != nil {
				return fmt.Errorf("read %s: %w", files.LastBuild, err)
			}
			out := whyJSON{Agent: r.Name, Build: b, Reasons: []warmset.Reason{}}
			if b != nil {
				t, err := whyTrees(fc.Store, r, b)
				if err != nil {
					return err
				}
				out.Reasons = warmset.Explain(b, t)
			}
			if c.JSON {
				return cli.WriteJSON(io.Stdout, out)
			}
			return printWhy(io.Stdout, out, c.All)
		})
}

// whyTrees are the directories warmset.Explain reads for agent r's build b.
func whyTrees(s *store.Store, r *agent.Record, b *demand.LastBuild) (warmset.Trees, error) {
	br, err := base.Read(s, b.Base)
	if err != nil {
		return warmset.Trees{}, failure.Wrap(failure.Refused, err, "the base is gone (collected, or the agent was respawned): only a base that is still there can be compared",
			"read the base %s of agent %s's last build", b.Base, r.Name)
	}
	written, err := agent.Written(s, r)
	if err != nil {
		return warmset.Trees{}, err
	}
	buildSrc := s.MntSrc()
	if r.Isolation == sandbox.IsolationOff {
		buildSrc = r.Worktree
	}
	return warmset.Trees{
		Fork: store.NestedTarget(written, b.Workspace), Base: store.NestedTarget(br.Target, b.Workspace),
		Worktree: r.Worktree, BaseSrc: br.Src, BuildSrc: buildSrc, Workspace: b.Workspace,
	}, nil
}

func printWhy(w io.Writer, out whyJSON, all bool) error {
	b := out.Build
	if b == nil {
		fmt.Fprintf(w, "agent %s has compiled nothing since it was spawned: every build it ran was fresh from its base\n", out.Agent)
		return nil
	}
	fmt.Fprintf(w, "agent %s, %s: %s compiled %d unit(s), %d fresh from base %s; %d of them the base does not hold at all\n",
		out.Agent, b.Time.Local().Format("2006-01-02 15:04:05"), b.Command, b.Compiled, b.Fresh, cli.Short(b.Base), b.New)
	kinds := map[string]int{}
	for _, r := range out.Reasons {
		kinds[r.Kind]++
	}
	shown := 0
	for _, r := range out.Reasons {
		// The units compiled only because a dependency was are counted,
		// not listed, unless asked: the first units are the causes.
		if !all && (r.Kind == warmset.ReasonDependency && !r.Unit.New || shown >= whyShown) {
			continue
		}
		shown++
		where := "rebuilt"
		if r.Unit.New {
			where = "not in the base"
		}
		fmt.Fprintf(w, "  %s: %s: %s\n", r.Unit, where, r.Detail)
	}
	if rest := len(out.Reasons) - shown; rest > 0 {
		fmt.Fprintf(w, "  … and %d more unit(s) (%d compiled because a dependency was); --all lists them\n", rest, kinds[warmset.ReasonDependency])
	}
	if b.Compiled > len(out.Reasons) {
		fmt.Fprintf(w, "  (%d more units were compiled than the record keeps)\n", b.Compiled-len(out.Reasons))
	}
	switch {
	case kinds[warmset.ReasonFeatures]+kinds[warmset.ReasonProfile]+kinds[warmset.ReasonAbsent]+kinds[warmset.ReasonTarget]+kinds[warmset.ReasonFlags] > 0:
		fmt.Fprintln(w, "\nUnits the base does not hold are demand misses: once agents run this command often enough (ferry stats), the next base warms it (see [base] demand-min in docs/configuration.md).")
	case kinds[warmset.ReasonEdit] > 0:
		fmt.Fprintln(w, "\nThe units were compiled because of this worktree's own edits: no base could have held them.")
	}
	return nil
}

// windowWords words a window: "7 days", "36h0m0s".
func windowWords(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d == day:
		return "day"
	case d%day == 0:
		return fmt.Sprintf("%d days", d/day)
	}
	return d.String()
}
