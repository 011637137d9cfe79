package ferrycmd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/pipeline"
	"github.com/ferrydev/ferry/pkg/store"
)

// resolveAgent returns the named agent, or the one whose worktree holds the
// working directory when name is empty.
func resolveAgent(fc *cli.Context, name string) (*agent.Record, error) {
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

const runUsage = `Usage: ferry run [NAME] -- CMD [ARGS...]

Run CMD in agent NAME's sandbox (default: the agent whose worktree holds the
working directory), with its shim first on PATH and FERRY_AGENT set. The
exit status is CMD's (128+signal when it was killed).

Examples:
  ferry run fix-parser -- cargo test
  cd "$(ferry spawn a)" && ferry run -- cargo build

` + cli.SeeExitCodes

// runAgent is `ferry run [NAME] -- CMD`.
func runAgent(args []string, io cli.IO) int {
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
		fmt.Fprintln(io.Stdout, runUsage)
		return 0
	case len(args) > 1 || len(cmd) == 0:
		return cli.Report(io, "ferry run", failure.New(failure.Usage, "usage: ferry run [NAME] -- CMD [ARGS...]", "bad arguments"), false)
	case len(args) == 1:
		name = args[0]
	}
	return sessionIn(io, "ferry run", name, cmd)
}

type shellCmd struct {
	Name string `arg:"" optional:"" help:"Agent name (default: the agent of the working directory)."`
}

func shellAgent(args []string, io cli.IO) int {
	var c shellCmd
	_, code, done := cli.Parse("ferry shell", "Open a shell ($SHELL) in an agent's sandbox; its exit status is the shell's.",
		[]string{"ferry shell fix-parser"}, &c, args, io)
	if done {
		return code
	}
	sh := os.Getenv("SHELL")
	if sh == "" {
		sh = "/bin/sh"
	}
	return sessionIn(io, "ferry shell", c.Name, []string{sh})
}

func sessionIn(io cli.IO, prog, name string, argv []string) int {
	fc, err := cli.Load(".")
	if err != nil {
		return cli.Report(io, prog, err, false)
	}
	r, err := resolveAgent(fc, name)
	if err != nil {
		return cli.Report(io, prog, err, false)
	}
	if err := fc.Store.InstallShim(""); err != nil {
		return cli.Report(io, prog, err, false)
	}
	dir, _ := os.Getwd()
	if !strings.HasPrefix(dir+"/", r.Worktree+"/") {
		dir = r.Worktree
	}
	code, err := agent.Run(fc.Store, r, agent.RunOptions{Argv: argv, Dir: dir, Env: os.Environ()})
	if err != nil {
		return cli.Report(io, prog, err, false)
	}
	return code
}

type envCmd struct {
	Name string `arg:"" optional:"" help:"Agent name (default: the agent of the working directory)."`
	JSON bool   `name:"json" help:"Print the variables as JSON."`
}

func envAgent(args []string, io cli.IO) int {
	var c envCmd
	return cli.Run("ferry env", "Print the environment that makes cargo build as an agent: eval it in a shell inside the agent's worktree.",
		[]string{`eval "$(ferry env fix-parser)"`, `cd "$(ferry spawn a)" && eval "$(ferry env)"`}, &c, args, io, &c.JSON, func() error {
			fc, err := cli.Load(".")
			if err != nil {
				return err
			}
			r, err := resolveAgent(fc, c.Name)
			if err != nil {
				return err
			}
			if err := fc.Store.InstallShim(""); err != nil {
				return err
			}
			vars := map[string]string{"FERRY_WORKTREE": r.Worktree}
			// Where a process outside the sandbox finds the agent's build
			// output now (an overlay agent's only while its namespace lives).
			vars["FERRY_HOST_TARGET"], _ = agent.HostTarget(fc.Store, r)
			for _, kv := range agent.Environ(fc.Store, r, []string{"PATH=" + os.Getenv("PATH")}) {
				k, v, _ := strings.Cut(kv, "=")
				vars[k] = v
			}
			if c.JSON {
				return cli.WriteJSON(io.Stdout, vars)
			}
			for _, k := range []string{"PATH", "FERRY_AGENT", "FERRY_WORKTREE"} {
				fmt.Fprintf(io.Stdout, "export %s=%s\n", k, shellQuote(vars[k]))
			}
			if t := vars["FERRY_HOST_TARGET"]; t != "" {
				fmt.Fprintf(io.Stdout, "export FERRY_HOST_TARGET=%s\n", shellQuote(t))
			} else {
				// An overlay agent's output is reachable from the host only
				// while its namespace lives; a value from an earlier eval
				// would lead elsewhere.
				fmt.Fprintln(io.Stdout, "unset FERRY_HOST_TARGET  # the agent's build output is not reachable from the host until its next build (overlay: no namespace lives)")
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
	// Always present (empty for an agent made by `ferry spawn`), unlike
	// the record's.
	Tool         string `json:"tool"`
	Session      string `json:"session"`
	Busy         bool   `json:"busy"`
	PrivateBytes int64  `json:"private_bytes"`
	// SandboxBytes is what its builds wrote to their private layers
	// ($HOME, $CARGO_HOME) and $TMPDIR; the PRIVATE column adds it.
	SandboxBytes int64 `json:"sandbox_bytes"`
	// HostTarget is where a process outside the sandbox reaches the
	// agent's build output now; empty while it cannot (an overlay agent
	// without a live namespace).
	HostTarget string `json:"host_target"`
	// BaseWarm are the commands the agent's base is warm for (one, for a
	// progressive build's first base).
	BaseWarm []string `json:"base_warm"`
	// Problem says why a damaged agent's record cannot be read, and the
	// fix.
	Problem string `json:"problem,omitempty"`
	// PlainBuilt: a cargo without Ferry's shim built in the worktree (an
	// overlay agent's plain directory holds a build): cold, and the shim
	// is not on that shell's PATH.
	PlainBuilt bool `json:"plain_built"`
}

func listAgents(args []string, io cli.IO) int {
	var c listCmd
	return cli.Run("ferry list", "List agents: state, base, backend, private disk use, whether processes run for them, and the agent tool and session whose hook created them (- for `ferry spawn`).",
		[]string{"ferry list", "ferry list --json"}, &c, args, io, &c.JSON, func() error {
			fc, err := cli.Load(".")
			if err != nil {
				return err
			}
			all, damaged, err := agent.Scan(fc.Store)
			if err != nil {
				return err
			}
			out := []listEntry{}
			for _, d := range damaged {
				// Named by its directory: its record cannot say more.
				name := filepath.Base(filepath.Dir(d.Path))
				out = append(out, listEntry{Record: &agent.Record{Name: name, State: agent.Damaged}, Problem: d.Error() + "; " + d.Hint()})
			}
			for _, r := range all {
				e := listEntry{Record: r, Tool: r.Tool, Session: r.Session}
				e.Busy, _ = agent.Busy(fc.Store, r.Name)
				e.HostTarget, _ = agent.HostTarget(fc.Store, r)
				e.BaseWarm = []string{}
				if b, err := base.Read(fc.Store, r.Base); err == nil {
					for _, w := range b.Warm {
						e.BaseWarm = append(e.BaseWarm, w.Command)
					}
				}
				if b, err := fork.ByName(r.Backend); err == nil {
					e.PrivateBytes, _ = b.PrivateBytes(fork.Paths{AgentDir: fc.Store.Agent(r.Name).Dir})
				}
				e.SandboxBytes, _ = fork.Allocated(fc.Store.Agent(r.Name).Private)
				if ents, err := os.ReadDir(fc.Store.Agent(r.Name).Plain); err == nil && len(ents) > 0 {
					e.PlainBuilt = true
				}
				out = append(out, e)
			}
			if c.JSON {
				return cli.WriteJSON(io.Stdout, out)
			}
			if len(out) == 0 {
				fmt.Fprintln(io.Stdout, "no agents: create one with `ferry spawn NAME`")
				return nil
			}
			tw := tabwriter.NewWriter(io.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATE\tBASE\tBACKEND\tPRIVATE\tBUSY\tTOOL\tSESSION\tWORKTREE")
			for _, e := range out {
				if e.Problem != "" {
					fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\n", e.Name, e.State)
					continue
				}
				busy := "-"
				if e.Busy {
					busy = "busy"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, e.State, cli.ShortBase(e.Base), e.Backend,
					cli.Bytes(e.PrivateBytes+e.SandboxBytes), busy, orDash(e.Tool), orDash(e.Session), e.Worktree)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			cur, _ := currentBase(fc.Store)
			for _, e := range out {
				switch {
				case e.Problem == "" && cur != nil && e.Base != cur.ID && len(e.BaseWarm) < len(cur.Warm) && strings.HasPrefix(e.Base, cur.Commit+"-"):
					fmt.Fprintf(io.Stderr, "ferry list: agent %s: its base is warm for %s only (spawned while the rest of its commit's base warmed); a new agent gets base %s, warm for %d commands\n",
						e.Name, strings.Join(e.BaseWarm, ", "), cur.ID, len(cur.Warm))
				}
				switch {
				case e.Problem != "":
					fmt.Fprintf(io.Stderr, "ferry list: agent %s: %s\n", e.Name, e.Problem)
				case e.PlainBuilt:
					fmt.Fprintf(io.Stderr, "ferry list: agent %s: cargo ran in its worktree without Ferry's shim, and built cold; put %s first on PATH in that shell (`eval \"$(ferry env %s)\"`, or the agent tool's hooks: `ferry doctor`)\n", e.Name, fc.Store.ShimDir(), e.Name)
				case e.TargetLinkSkipped != "":
					fmt.Fprintf(io.Stderr, "ferry list: agent %s: no ./%s link: %s\n", e.Name, agent.TargetLink, e.TargetLinkSkipped)
				}
			}
			return nil
		})
}

type rmCmd struct {
	Name     string `arg:"" optional:"" help:"Agent name (default: the agent whose worktree holds the working directory)."`
	IfAgent  bool   `name:"if-agent" help:"For teardown scripts: exit 0, removing nothing, when the working directory's worktree is no agent's."`
	Force    bool   `help:"Remove even with uncommitted changes, keeping commits no ref reaches under refs/ferry/orphaned/."`
	Worktree bool   `help:"For an adopted agent, remove its worktree too (its branch stays); without it only what adoption added goes."`
	JSON     bool   `name:"json" help:"Print what was removed as JSON."`
}

func rmAgent(args []string, io cli.IO) int {
	var c rmCmd
	return cli.Run("ferry rm", "Remove an agent: its worktree, its fork and (when unchanged) its branch.",
		[]string{"ferry rm fix-parser", "ferry rm fix-parser --force", "ferry rm codex-7f3a --worktree", "cd \"$CONDUCTOR_WORKSPACE_PATH\" && ferry rm --if-agent"}, &c, args, io, &c.JSON, func() error {
			fc, err := cli.Load(".")
			if err != nil {
				return err
			}
			name := c.Name
			if name == "" {
				r, err := agent.FindByWorktree(fc.Store, fc.Repo.Top)
				if err != nil {
					return err
				}
				if r == nil && c.IfAgent {
					fmt.Fprintf(io.Stderr, "ferry rm: %s is no agent's worktree; nothing to remove\n", fc.Repo.Top)
					if c.JSON {
						return cli.WriteJSON(io.Stdout, struct{}{})
					}
					return nil
				}
				if r == nil {
					return failure.New(failure.Usage, "name the agent (see `ferry list`), or run this inside an agent's worktree",
						"%s is not an agent's worktree", fc.Repo.Top)
				}
				name = r.Name
			}
			e := pipeline.Env{Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store, Log: io.Stderr, Prog: "ferry rm"}
			rm, err := pipeline.Remove(e.OneShot("ferry-rm"), e, name, agent.RemoveOptions{Force: c.Force, Worktree: c.Worktree})
			if err != nil {
				return err
			}
			if c.JSON {
				return cli.WriteJSON(io.Stdout, rm)
			}
			if rm.Damaged {
				where := "no worktree's ./target led to it"
				if rm.Worktree != "" {
					where = "its worktree " + rm.Worktree + " stays, building cold"
					if rm.Branch != "" {
						where += ", on branch " + rm.Branch
					}
				}
				fmt.Fprintf(io.Stdout, "removed what Ferry kept of agent %s, whose record was damaged; %s\n", rm.Name, where)
				return nil
			}
			if rm.WorktreeKept {
				fmt.Fprintf(io.Stdout, "removed agent %s; its worktree %s stays as it is, building cold (pass --worktree to remove it too)\n", rm.Name, rm.Worktree)
				return nil
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

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// currentBase is the store's current base's record, nil when there is none
// or it cannot be read.
func currentBase(s *store.Store) (*base.Record, error) {
	id, err := s.Current()
	if err != nil || id == "" {
		return nil, err
	}
	return base.Read(s, id)
}
