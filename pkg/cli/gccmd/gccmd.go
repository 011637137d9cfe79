// Package gccmd is the command layer of ferry-gc (`ferry gc`): one
// collection pass, or, with --follow, one on start and one after every
// base.ready and agent.removed. It links the NATS client, not the server.
package gccmd

import (
	"fmt"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/pipeline"
)

type grammar struct {
	DryRun bool `help:"Print what would be deleted, delete nothing."`
	Follow bool `help:"Keep collecting: after each base.ready and agent.removed event, until stopped."`
	JSON   bool `name:"json" help:"Print the result as JSON."`
}

const desc = "Delete bases that are neither current nor referenced by an agent, roll back spawns that died, and remove lock files and agent directories left behind."

var examples = []string{
	"ferry gc --dry-run",
	"ferry gc --json",
}

// Main runs ferry-gc with args and returns its exit code; name is the
// command as typed (cli.Name).
func Main(name string, args []string, io cli.IO) int {
	var c grammar
	return cli.Run(name, desc, examples, &c, args, io, &c.JSON, func() error { return c.run(io) })
}

func (c *grammar) run(io cli.IO) error {
	fc, err := cli.Load(".")
	if err != nil {
		return err
	}
	e := pipeline.Env{Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store, Log: io.Stderr}
	if c.Follow {
		if err := fc.Store.Init(); err != nil {
			return err
		}
		stop := cli.StopOnSignals()
		defer stop.Release()
		return stop.Err("ferry gc --follow", pipeline.RunGC(stop.Context(), e))
	}
	res, err := pipeline.Collect(e.OneShot("ferry-gc"), e, c.DryRun)
	if err != nil {
		return err
	}
	if c.JSON {
		return cli.WriteJSON(io.Stdout, res)
	}
	verb := "deleted"
	if c.DryRun {
		verb = "would delete"
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
	for _, id := range res.SkippedLocked {
		fmt.Fprintf(io.Stdout, "skipped base %s: being built\n", id)
	}
	for _, id := range res.SkippedInUse {
		fmt.Fprintf(io.Stdout, "skipped base %s: still mounted under a removed overlay agent's process\n", id)
	}
	fmt.Fprintf(io.Stdout, "kept %d base(s) in use\n", len(res.Kept))
	return nil
}
