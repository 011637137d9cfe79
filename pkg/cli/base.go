package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/alecthomas/kong"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/pipeline"
)

type baseCLI struct {
	Build  baseBuildCmd  `cmd:"" default:"withargs" help:"Build (or reuse) the immutable warm base of a commit and make it current."`
	List   baseListCmd   `cmd:"" help:"List the bases of this repository."`
	Verify baseVerifyCmd `cmd:"" help:"Check that ready bases still hold the target they were built with (exit 6 if one does not)."`
}

type baseBuildCmd struct {
	Rev     string `help:"Revision to build." default:"HEAD" placeholder:"R"`
	Cold    bool   `help:"Build from scratch, never seeded from another base."`
	Rebuild bool   `help:"Discard the base of R if it is ready and build it again (the fix for a base changed after it was built)."`
	Follow  bool   `help:"Keep building: consume commit.seen events from the bus (see ferry-watch) until stopped."`
	JSON    bool   `name:"json" help:"Print the base record as JSON."`
}

type baseListCmd struct {
	JSON bool `name:"json" help:"Print the bases as JSON."`
}

// Base is the ferry-base command.
func Base(args []string, io IO) int {
	var c baseCLI
	ctx, code, done := parse("ferry-base", "Build immutable warm bases: one Cargo build per commit, at canonical paths inside a namespace sandbox.", &c, args, io)
	if done {
		return code
	}
	switch ctx.Command() {
	case "list":
		return Report(io, "ferry-base", c.List.run(io), c.List.JSON)
	case "verify":
		err := c.Verify.run(io)
		// With --json the results are the answer on stdout, changed bases
		// included; the refusal then goes to stderr only.
		return Report(io, "ferry-base", err, c.Verify.JSON && !c.Verify.answered)
	default:
		return Report(io, "ferry-base", c.Build.run(io), c.Build.JSON)
	}
}

func (c *baseBuildCmd) run(io IO) error {
	if c.Follow {
		return followBuilder(io)
	}
	fc, err := Load(".")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := base.Options{
		Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store,
		Rev: c.Rev, Cold: c.Cold, Rebuild: c.Rebuild, Progress: io.Stderr, Shim: true,
	}
	env := fc.env(io)
	var building *base.Plan
	opts.OnBuilding = func(p *base.Plan) {
		building = p
		pipeline.Emit(env, "ferry-base", &events.BaseBuilding{BaseID: p.ID, Commit: p.Commit, Fingerprint: p.Fingerprint()})
	}
	start := time.Now()
	res, err := base.Build(ctx, opts)
	if err != nil {
		if building != nil {
			kind := failure.KindOf(err)
			pipeline.Emit(env, "ferry-base", &events.BaseFailed{BaseID: building.ID, Commit: building.Commit,
				Fingerprint: building.Fingerprint(), Error: err.Error(), ExitKind: kind.String(), ExitCode: kind.ExitCode()})
		}
		return err
	}
	pipeline.Emit(env, "ferry-base", &events.BaseReady{BaseID: res.Record.ID, Commit: res.Record.Commit,
		Fingerprint: res.Record.Fingerprint, Current: true, Reused: res.Reused,
		Seconds: time.Since(start).Seconds(), Warnings: res.Record.Warnings})
	if c.JSON {
		return writeJSON(io.Stdout, struct {
			*base.Record
			Reused bool `json:"reused"`
		}{res.Record, res.Reused})
	}
	r := res.Record
	verb := "built"
	if res.Reused {
		verb = "reused"
	}
	fmt.Fprintf(io.Stdout, "%s base %s\n  commit  %s\n  src     %s\n  target  %s\n  cargo   %s\n",
		verb, r.ID, r.Commit, r.Src, r.Target, r.Toolchain.Cargo)
	if !res.Reused {
		fmt.Fprintf(io.Stdout, "  time    %.1fs total: worktree %.2fs, stamp %.2fs, warm %.1fs\n",
			r.Timings.Total, r.Timings.Worktree, r.Timings.Stamp, r.Timings.Warm)
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(io.Stdout, "  warning %s\n", w)
	}
	return nil
}

func (c *baseListCmd) run(io IO) error {
	fc, err := Load(".")
	if err != nil {
		return err
	}
	list, err := base.List(fc.Store)
	if err != nil {
		return err
	}
	if c.JSON {
		if list == nil {
			list = []base.Entry{}
		}
		return writeJSON(io.Stdout, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(io.Stdout, "no bases yet: run `ferry base` to build one")
		return nil
	}
	tw := tabwriter.NewWriter(io.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CURRENT\tID\tSTATE\tCOMMIT\tCARGO\tCREATED")
	for _, e := range list {
		cur := ""
		if e.Current {
			cur = "*"
		}
		commit, cargo, created := "-", "-", "-"
		if e.Record != nil {
			commit = e.Record.Commit[:12]
			cargo = e.Record.Toolchain.CargoVersion
			created = e.Record.Created.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cur, e.ID, e.State, commit, cargo, created)
	}
	return tw.Flush()
}

// parse parses args into grammar. done is true when the command has finished
// (help, or a usage error already reported) with exit status code.
func parse(name, desc string, grammar any, args []string, io IO) (ctx *kong.Context, code int, done bool) {
	exited := false
	parser, err := kong.New(grammar,
		kong.Name(name),
		kong.Description(desc+"\n\n"+failure.ExitCodes),
		kong.Writers(io.Stdout, io.Stderr),
		kong.Exit(func(c int) { exited, code = true, c }),
	)
	if err != nil {
		return nil, Report(io, name, err, false), true
	}
	ctx, err = parser.Parse(args)
	if exited {
		return nil, code, true
	}
	if err != nil {
		return nil, Report(io, name, failure.Wrap(failure.Usage, err, "run `"+name+" --help` for usage", "bad arguments"), false), true
	}
	return ctx, 0, false
}

type baseVerifyCmd struct {
	Rev  string `help:"Verify the ready bases of this revision (default: the current base)." placeholder:"R"`
	All  bool   `help:"Verify every ready base."`
	JSON bool   `name:"json" help:"Print one result per base as JSON."`

	answered bool
}

type verifyResult struct {
	ID      string  `json:"id"`
	Commit  string  `json:"commit"`
	Current bool    `json:"current"`
	OK      bool    `json:"ok"`
	Problem string  `json:"problem,omitempty"`
	Hint    string  `json:"hint,omitempty"`
	Seconds float64 `json:"seconds"`
}

func (c *baseVerifyCmd) run(io IO) error {
	fc, err := Load(".")
	if err != nil {
		return err
	}
	list, err := base.List(fc.Store)
	if err != nil {
		return err
	}
	commit := ""
	if c.Rev != "" {
		if commit, err = fc.Repo.ResolveCommit(c.Rev); err != nil {
			return err
		}
	}
	results := []verifyResult{}
	bad := 0
	for _, e := range list {
		if e.Record == nil || (!c.All && commit == "" && !e.Current) || (commit != "" && e.Record.Commit != commit) {
			continue
		}
		t := time.Now()
		v := verifyResult{ID: e.ID, Commit: e.Record.Commit, Current: e.Current, OK: true}
		if err := base.Verify(e.Record); err != nil {
			v.OK, v.Problem, v.Hint = false, messages(err)[len(messages(err))-1], failure.HintOf(err)
			bad++
		}
		v.Seconds = time.Since(t).Seconds()
		results = append(results, v)
	}
	if len(results) == 0 {
		what := "no current base"
		if commit != "" {
			what = "no ready base at " + short(commit)
		}
		return failure.New(failure.Usage, "build one with `ferry base`, or list them with `ferry base list`", "%s to verify", what)
	}
	if c.JSON {
		if err := writeJSON(io.Stdout, results); err != nil {
			return err
		}
		c.answered = true
	} else {
		for _, v := range results {
			if v.OK {
				fmt.Fprintf(io.Stdout, "ok       %s (%s)\n", v.ID, humanSeconds(v.Seconds))
			} else {
				fmt.Fprintf(io.Stdout, "CHANGED  %s\n  %s\n  fix: %s\n", v.ID, v.Problem, v.Hint)
			}
		}
	}
	if bad > 0 {
		return failure.New(failure.Refused, "rebuild each changed base with `ferry base --rebuild --rev COMMIT`",
			"%d of %d base(s) changed after they were built", bad, len(results))
	}
	return nil
}
