// Package gccmd is the command layer of ferry-gc (`ferry gc`): one
// collection pass (reaping abandoned hook-created agents, then deleting
// unreferenced bases), or, with --follow, one on start and one after every
// base.ready and agent.removed. It links the NATS client, not the server.
package gccmd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/gc"
	"github.com/ferrydev/ferry/pkg/metrics"
	"github.com/ferrydev/ferry/pkg/pipeline"
)

type grammar struct {
	DryRun    bool           `help:"Print what would be deleted and reaped, and why each hook-created agent would or would not be; change nothing."`
	ReapAfter *time.Duration `name:"reap-after" help:"Reap an abandoned hook-created agent only after this long without a sign of life (0s: as soon as it is clean, idle and unlocked); default: [gc] reap-after, FERRY_REAP_AFTER, else 24h."`
	Follow    bool           `help:"Keep collecting: after each base.ready and agent.removed event, until stopped."`
	JSON      bool           `name:"json" help:"Print the result as JSON."`
}

const desc = "Reap abandoned agents that an agent tool's hook created (clean, no new commits, no ignored files but build output, idle, unlocked, quiet for a day or [gc] reap-after), delete bases that are neither current nor referenced by an agent, roll back spawns that died, and remove lock files and agent directories left behind. Agents made by `ferry spawn` are never reaped."

var examples = []string{
	"ferry gc --dry-run",
	"ferry gc --json",
	"ferry gc --reap-after 2h",
}

// Main runs ferry-gc with args and returns its exit code; name is the
// command as typed (cli.Name).
func Main(name string, args []string, io cli.IO) int {
	var c grammar
	return cli.Run(name, desc, examples, &c, args, io, &c.JSON, func() error { return c.run(io) })
}

func (c *grammar) run(io cli.IO) error {
	if c.ReapAfter != nil && *c.ReapAfter < 0 {
		return failure.New(failure.Usage, "pass a duration of 0 or more, such as 24h or 30m", "--reap-after %s is negative", *c.ReapAfter)
	}
	fc, err := cli.Load(".")
	if err != nil {
		return err
	}
	settings := *fc.Settings
	if c.ReapAfter != nil {
		settings.ReapAfter = *c.ReapAfter
	}
	e := pipeline.Env{Repo: fc.Repo, Settings: &settings, Store: fc.Store, Log: io.Stderr, Prog: "ferry-gc"}
	if c.Follow {
		if err := fc.Store.Init(); err != nil {
			return err
		}
		stop := cli.StopOnSignals()
		defer stop.Release()
		srv, err := metrics.ServeStage(stop.Context(), "ferry-gc", &settings, fc.Store)
		if err != nil {
			return err
		}
		if srv != nil {
			defer srv.Close()
			e.Logf("metrics at http://%s/metrics", srv.Addr())
		}
		return stop.Err("ferry gc --follow", pipeline.RunGC(stop.Context(), e))
	}
	res, err := pipeline.Collect(e.OneShot("ferry-gc"), e, c.DryRun)
	if err != nil {
		return err
	}
	if !c.DryRun {
		pipeline.Unpublish(context.Background(), e, nil, res.Bases)
	}
	if c.JSON {
		return cli.WriteJSON(io.Stdout, res)
	}
	verb := "deleted"
	if c.DryRun {
		verb = "would delete"
	}
	for _, v := range res.HookAgents {
		fmt.Fprintln(io.Stdout, verdictLine(v, c.DryRun))
	}
	for _, id := range res.Bases {
		fmt.Fprintf(io.Stdout, "%s base %s\n", verb, id)
	}
	for _, n := range res.Agents {
		fmt.Fprintf(io.Stdout, "%s unfinished agent %s\n", verb, n)
	}
	for _, n := range res.Leftovers {
		fmt.Fprintf(io.Stdout, "%s the leftover dir of removed agent %s\n", verb, n)
	}
	for _, id := range res.SweptLocks {
		fmt.Fprintf(io.Stdout, "%s the lock file of removed base %s\n", verb, id)
	}
	for _, id := range res.Exposed {
		fmt.Fprintf(io.Stdout, "made base %s partial: it shares a file written outside Ferry's sandboxes with a deleted base (the next build of its commit builds it again)\n", id)
	}
	for _, id := range res.SkippedLocked {
		fmt.Fprintf(io.Stdout, "skipped base %s: being built\n", id)
	}
	for _, id := range res.SkippedInUse {
		fmt.Fprintf(io.Stdout, "skipped base %s: still mounted under a removed overlay agent's process\n", id)
	}
	for _, path := range res.Damaged {
		fmt.Fprintf(io.Stdout, "kept every base: %s is damaged, and may name any of them (`ferry doctor` says how to repair it)\n", path)
	}
	fmt.Fprintf(io.Stdout, "kept %d base(s) in use\n", len(res.Kept))
	return nil
}

// verdictLine says what gc did (dry: would do) with a hook-created agent,
// and why.
func verdictLine(v gc.Verdict, dry bool) string {
	who := fmt.Sprintf("agent %s (%s", v.Name, v.Tool)
	if v.Session != "" {
		who += " session " + v.Session
	}
	who += ")"
	if !v.Reaped {
		why := make([]string, len(v.Kept))
		for i, r := range v.Kept {
			why[i] = r.Detail
		}
		return fmt.Sprintf("kept %s: %s", who, strings.Join(why, "; "))
	}
	verb := "reaped"
	if dry {
		verb = "would reap"
	}
	line := fmt.Sprintf("%s %s: abandoned (clean, no new commits, no ignored files but build output, idle, unlocked", verb, who)
	if v.LastActive != nil {
		line += ", last sign of life " + v.LastActive.Local().Format("2006-01-02 15:04")
	}
	line += ")"
	if rm := v.Removal; rm != nil && rm.BranchKept != "" {
		line += fmt.Sprintf("; kept branch %s (checked out elsewhere)", rm.BranchKept)
	}
	return line
}
