package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/gc"
	"github.com/ferrydev/ferry/pkg/pipeline"
)

type spawnCmd struct {
	Name    string `arg:"" help:"Agent name (also the branch suffix and the worktree directory name)."`
	From    string `help:"Revision the worktree starts at." default:"HEAD" placeholder:"REF"`
	Path    string `help:"Worktree path (default <worktree parent>/<repo>/<name>)." placeholder:"DIR"`
	Branch  string `help:"Branch to create (default <branch-prefix><name>)." placeholder:"B"`
	Backend string `help:"Fork backend: auto, reflink, overlay or copy (default from ferry.toml)." default:""`
	JSON    bool   `name:"json" help:"Print the agent record as JSON."`
}

// Spawn is the ferry-spawn command.
func Spawn(args []string, io IO) int {
	var c spawnCmd
	_, code, done := parse("ferry-spawn", "Create an agent: a git worktree on a new branch whose target dir is a fork of the base, fresh to Cargo where its files are provably the base's.", &c, args, io)
	if done {
		return code
	}
	return Report(io, "ferry-spawn", c.run(io), c.JSON)
}

func (c *spawnCmd) run(io IO) error {
	// Bad input first, before anything is looked up or made.
	if err := agent.CheckName(c.Name); err != nil {
		return err
	}
	if c.Backend != "" && c.Backend != fork.NameAuto {
		if _, err := fork.ByName(c.Backend); err != nil {
			return err
		}
	}
	fc, err := Load(".")
	if err != nil {
		return err
	}
	if err := fc.Store.Init(); err != nil {
		return err
	}
	if err := agent.InstallShim(fc.Store, ""); err != nil {
		return err
	}
	r, err := agent.Spawn(agent.SpawnOptions{
		Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store,
		Name: c.Name, From: c.From, Path: c.Path, Branch: c.Branch, Backend: c.Backend,
		Progress: io.Stderr,
	})
	if err != nil {
		return err
	}
	pipeline.Emit(fc.env(io), "ferry-spawn", &events.AgentSpawned{Name: r.Name, Branch: r.Branch, Worktree: r.Worktree,
		BaseID: r.Base, Backend: r.Backend, StartCommit: r.StartCommit})
	if c.JSON {
		return writeJSON(io.Stdout, r)
	}
	fork := fmt.Sprintf("%s fork, %d files", r.Backend, r.Fork.Files)
	if r.Backend == "overlay" {
		fork = "overlay on the base's target"
	}
	fmt.Fprintf(io.Stderr, "ferry-spawn: agent %s on branch %s from base %s (%s; stamped %d files, %d dirs) in %.2fs\n",
		r.Name, r.Branch, short(r.Base), fork, r.Stamp.Files, r.Stamp.Dirs, r.Timings.Total)
	fmt.Fprintf(io.Stderr, "ferry-spawn: build in it with `ferry run %s -- cargo build`, or put %s first on PATH\n", r.Name, agent.ShimDir(fc.Store))
	fmt.Fprintln(io.Stdout, r.Worktree)
	return nil
}

// resolveAgent returns the named agent, or the one whose worktree holds the
// working directory when name is empty.
func resolveAgent(fc *Context, name string) (*agent.Record, error) {
	if name != "" {
		return agent.Get(fc.Store, name)
	}
	r, err := agent.FindByWorktree(fc.Store, fc.Repo.Top)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, failure.New(failure.Usage, "name the agent (see `ferry list`), or run this inside an agent's worktree",
			"%s is not an agent's worktree", fc.Repo.Top)
	}
	return agent.Get(fc.Store, r.Name)
}

// runAgent is `ferry run [NAME] -- CMD`.
func runAgent(args []string, io IO) int {
	var name string
	var cmd []string
	for i, a := range args {
		if a == "--" {
			cmd = args[i+1:]
			args = args[:i]
			break
		}
	}
	switch {
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help"):
		fmt.Fprintln(io.Stdout, "Usage: ferry run [NAME] -- CMD [ARGS...]\n\nRun CMD in agent NAME's sandbox (default: the agent whose worktree holds the working directory), with its shim first on PATH and FERRY_AGENT set. The exit status is CMD's.")
		return 0
	case len(args) > 1 || len(cmd) == 0:
		return Report(io, "ferry", failure.New(failure.Usage, "usage: ferry run [NAME] -- CMD [ARGS...]", "bad arguments"), false)
	case len(args) == 1:
		name = args[0]
	}
	return sessionIn(io, name, cmd)
}

type shellCmd struct {
	Name string `arg:"" optional:"" help:"Agent name (default: the agent of the working directory)."`
}

func shellAgent(args []string, io IO) int {
	var c shellCmd
	_, code, done := parse("ferry shell", "Open a shell in an agent's sandbox.", &c, args, io)
	if done {
		return code
	}
	sh := os.Getenv("SHELL")
	if sh == "" {
		sh = "/bin/sh"
	}
	return sessionIn(io, c.Name, []string{sh})
}

func sessionIn(io IO, name string, argv []string) int {
	fc, err := Load(".")
	if err != nil {
		return Report(io, "ferry", err, false)
	}
	r, err := resolveAgent(fc, name)
	if err != nil {
		return Report(io, "ferry", err, false)
	}
	if err := agent.InstallShim(fc.Store, ""); err != nil {
		return Report(io, "ferry", err, false)
	}
	dir, _ := os.Getwd()
	if !strings.HasPrefix(dir+"/", r.Worktree+"/") {
		dir = r.Worktree
	}
	code, err := agent.Run(fc.Store, r, agent.RunOptions{Argv: argv, Dir: dir, Env: os.Environ()})
	if err != nil {
		return Report(io, "ferry", err, false)
	}
	return code
}

type envCmd struct {
	Name string `arg:"" help:"Agent name."`
	JSON bool   `name:"json" help:"Print the variables as JSON."`
}

func envAgent(args []string, io IO) int {
	var c envCmd
	return command("ferry env", "Print the environment that makes cargo build as agent NAME (eval it in a shell inside the agent's worktree).", &c, args, io, &c.JSON, func() error {
		fc, err := Load(".")
		if err != nil {
			return err
		}
		r, err := agent.Get(fc.Store, c.Name)
		if err != nil {
			return err
		}
		if err := agent.InstallShim(fc.Store, ""); err != nil {
			return err
		}
		vars := map[string]string{"FERRY_WORKTREE": r.Worktree}
		for _, kv := range agent.Environ(fc.Store, r, []string{"PATH=" + os.Getenv("PATH")}) {
			k, v, _ := strings.Cut(kv, "=")
			vars[k] = v
		}
		if c.JSON {
			return writeJSON(io.Stdout, vars)
		}
		for _, k := range []string{"PATH", "FERRY_AGENT", "FERRY_WORKTREE"} {
			fmt.Fprintf(io.Stdout, "export %s=%s\n", k, shellQuote(vars[k]))
		}
		return nil
	})
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

type listCmd struct {
	JSON bool `name:"json" help:"Print the agents as JSON."`
}

type listEntry struct {
	*agent.Record
	Busy         bool  `json:"busy"`
	PrivateBytes int64 `json:"private_bytes"`
}

func listAgents(args []string, io IO) int {
	var c listCmd
	return command("ferry list", "List agents: base, backend, state, private disk use, and whether processes run for them.", &c, args, io, &c.JSON, func() error {
		fc, err := Load(".")
		if err != nil {
			return err
		}
		all, err := agent.All(fc.Store)
		if err != nil {
			return err
		}
		out := []listEntry{}
		for _, r := range all {
			e := listEntry{Record: r}
			e.Busy, _ = agent.Busy(fc.Store, r.Name)
			if b, err := fork.ByName(r.Backend); err == nil {
				e.PrivateBytes, _ = b.PrivateBytes(fork.Paths{AgentDir: fc.Store.Agent(r.Name).Dir})
			}
			out = append(out, e)
		}
		if c.JSON {
			return writeJSON(io.Stdout, out)
		}
		if len(out) == 0 {
			fmt.Fprintln(io.Stdout, "no agents: create one with `ferry spawn NAME`")
			return nil
		}
		tw := tabwriter.NewWriter(io.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSTATE\tBASE\tBACKEND\tPRIVATE\tBUSY\tWORKTREE")
		for _, e := range out {
			busy := "-"
			if e.Busy {
				busy = "busy"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, e.State, short(e.Base), e.Backend, humanBytes(e.PrivateBytes), busy, e.Worktree)
		}
		return tw.Flush()
	})
}

type rmCmd struct {
	Name  string `arg:"" help:"Agent name."`
	Force bool   `help:"Remove even with uncommitted changes, keeping commits no ref reaches under refs/ferry/orphaned/."`
	JSON  bool   `name:"json" help:"Print what was removed as JSON."`
}

func rmAgent(args []string, io IO) int {
	var c rmCmd
	return command("ferry rm", "Remove an agent: its worktree, its fork and (when unchanged) its branch.", &c, args, io, &c.JSON, func() error {
		fc, err := Load(".")
		if err != nil {
			return err
		}
		rm, err := agent.Remove(fc.Repo, fc.Store, c.Name, c.Force)
		if err != nil {
			return err
		}
		pipeline.Emit(fc.env(io), "ferry-rm", &events.AgentRemoved{Name: rm.Name, Branch: rm.Branch, Worktree: rm.Worktree,
			BaseID: rm.Base, Forced: c.Force, OrphanRef: rm.OrphanRef})
		if c.JSON {
			return writeJSON(io.Stdout, rm)
		}
		fmt.Fprintf(io.Stdout, "removed agent %s (%s)\n", rm.Name, rm.Worktree)
		if rm.BranchKept != "" {
			fmt.Fprintf(io.Stdout, "kept branch %s: it carries %d commit(s)\n", rm.BranchKept, rm.BranchCommits)
		}
		if rm.OrphanRef != "" {
			fmt.Fprintf(io.Stdout, "kept unreachable commits under %s\n", rm.OrphanRef)
		}
		return nil
	})
}

type gcCmd struct {
	DryRun bool `help:"Print what would be deleted, delete nothing."`
	Follow bool `help:"Keep collecting: after each base.ready and agent.removed event, until stopped."`
	JSON   bool `name:"json" help:"Print the result as JSON."`
}

// GC is the ferry-gc command.
func GC(args []string, io IO) int {
	var c gcCmd
	return command("ferry-gc", "Delete bases that are neither current nor referenced by an agent, and roll back spawns that died.", &c, args, io, &c.JSON, func() error {
		if c.Follow {
			return followGC(io)
		}
		fc, err := Load(".")
		if err != nil {
			return err
		}
		res, err := gc.Run(fc.Repo, fc.Store, c.DryRun)
		if err != nil {
			return err
		}
		if !c.DryRun && len(res.Bases)+len(res.Agents) > 0 {
			pipeline.Emit(fc.env(io), "ferry-gc", &events.GCCollected{DeletedBases: res.Bases, KeptBases: res.Kept, RolledBackAgents: res.Agents})
		}
		if c.JSON {
			return writeJSON(io.Stdout, res)
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
		for _, id := range res.SkippedLocked {
			fmt.Fprintf(io.Stdout, "skipped base %s: being built\n", id)
		}
		for _, id := range res.SkippedInUse {
			fmt.Fprintf(io.Stdout, "skipped base %s: still mounted under a removed overlay agent's process\n", id)
		}
		fmt.Fprintf(io.Stdout, "kept %d base(s) in use\n", len(res.Kept))
		return nil
	})
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// humanSeconds rounds a duration for people: "850 µs", "12 ms", "3.4 s".
func humanSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fG", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fM", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fK", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

var _ = filepath.Join
