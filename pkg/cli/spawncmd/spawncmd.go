// Package spawncmd is the command layer of ferry-spawn (`ferry spawn`):
// create one agent, a git worktree on a new branch with a fork of the base,
// and announce it. It links the NATS client, not the server.
package spawncmd

import (
	"errors"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/pipeline"
)

type grammar struct {
	Name    string        `arg:"" help:"Agent name (also the branch suffix and the worktree directory name)."`
	From    string        `help:"Revision the worktree starts at." default:"HEAD" placeholder:"REF"`
	Path    string        `help:"Worktree path (default <worktree parent>/<repo>/<name>)." placeholder:"DIR"`
	Branch  string        `help:"Branch to create (default <branch-prefix><name>)." placeholder:"B"`
	Backend string        `help:"Fork backend: auto, reflink, overlay or copy (default from ferry.toml)." default:""`
	Wait    time.Duration `help:"When no base is ready yet but one is being built, wait up to this long for it instead of failing (--wait alone: 30m)." placeholder:"DURATION"`
	JSON    bool          `name:"json" help:"Print the agent record as JSON."`
}

// defaultWait is --wait without a duration.
const defaultWait = 30 * time.Minute

const desc = "Create an agent: a git worktree on a new branch whose target dir is a fork of the base, fresh to Cargo where its files are provably the base's. Prints the worktree's path."

var examples = []string{
	"cd \"$(ferry spawn fix-parser)\"",
	"ferry spawn x --from main~2 --branch wip/x --backend copy --json",
	"ferry spawn review --wait=10m",
}

// Main runs ferry-spawn with args and returns its exit code; name is the
// command as typed (cli.Name).
func Main(name string, args []string, io cli.IO) int {
	var c grammar
	// --wait takes an optional duration, which the parser cannot say.
	for i, a := range args {
		if a == "--" {
			break
		}
		if a == "--wait" {
			args = append(append(append([]string{}, args[:i]...), "--wait="+defaultWait.String()), args[i+1:]...)
		}
	}
	return cli.Run(name, desc, examples, &c, args, io, &c.JSON, func() error { return c.run(io) })
}

func (c *grammar) run(io cli.IO) error {
	// Bad input first, before anything is looked up or made.
	if err := agent.CheckName(c.Name); err != nil {
		return err
	}
	if c.Backend != "" && c.Backend != fork.NameAuto {
		if _, err := fork.ByName(c.Backend); err != nil {
			return err
		}
	}
	fc, err := cli.Load(".")
	if err != nil {
		return err
	}
	if err := fc.Store.Init(); err != nil {
		return err
	}
	if err := fc.Store.InstallShim(""); err != nil {
		return err
	}
	e := pipeline.Env{Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store, Log: io.Stderr, Prog: "ferry-spawn"}
	deadline := time.Now().Add(c.Wait)
	waited := false
	var r *agent.Record
	for {
		r, err = pipeline.Spawn(e.OneShot("ferry-spawn"), agent.SpawnOptions{
			Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store,
			Name: c.Name, From: c.From, Path: c.Path, Branch: c.Branch, Backend: c.Backend,
			Progress: io.Stderr,
		})
		if err == nil || c.Wait <= 0 || !errors.Is(err, agent.ErrNoBase) {
			break
		}
		building, berr := agent.BaseBuilding(fc.Store)
		if berr != nil || !building {
			if waited {
				err = failure.Wrap(failure.Refused, err, "build one with `ferry base` (or keep one warm with `ferry up`)", "the base being built did not become ready")
			}
			break
		}
		if time.Now().After(deadline) {
			err = failure.Wrap(failure.Refused, err, "wait longer (--wait=DURATION), or see the builder's output", "no base was ready within %s", c.Wait)
			break
		}
		if !waited {
			fmt.Fprintf(io.Stderr, "ferry spawn: no base is ready yet; waiting up to %s for the one being built\n", c.Wait)
			waited = true
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return err
	}
	if c.JSON {
		return cli.WriteJSON(io.Stdout, r)
	}
	fmt.Fprintf(io.Stderr, "ferry spawn: agent %s on branch %s from base %s (%s; stamped %d files, %d dirs) in %s\n",
		r.Name, r.Branch, cli.Short(r.Base), forkSummary(r), r.Stamp.Files, r.Stamp.Dirs, cli.Seconds(r.Timings.Total))
	fmt.Fprintf(io.Stderr, "ferry spawn: build in it with `ferry run %s -- cargo build`, or put %s first on PATH (`eval \"$(ferry env %s)\"`)\n",
		r.Name, fc.Store.ShimDir(), r.Name)
	fmt.Fprintln(io.Stdout, r.Worktree)
	return nil
}

// forkSummary says what the fork copied.
func forkSummary(r *agent.Record) string {
	if r.Fork.Files == 0 && r.Fork.Bytes == 0 {
		return r.Backend + " fork, nothing copied"
	}
	return fmt.Sprintf("%s fork, %d files", r.Backend, r.Fork.Files)
}
