package ferrycmd

import (
	"fmt"
	"os/exec"
	"path/filepath"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/hook"
	"github.com/ferrydev/ferry/pkg/pipeline"
)

type adoptCmd struct {
	Path    string `arg:"" optional:"" help:"The worktree to adopt (default: the worktree holding the working directory)."`
	Name    string `help:"The agent's name (default: the worktree's directory name, made unique)."`
	Backend string `help:"Fork backend: auto, overlay, reflink or copy (default: the configured one)."`
	Tool    string `help:"The agent tool that made the worktree, as the agent records it (default: adopt)."`
	Session string `help:"The tool's session or workspace id, as the agent records it."`
	InPlace bool   `name:"in-place" help:"Adopt the repository's main checkout: in a container whose checkout is its agent's (a cloud agent), plain cargo there then builds warm from the imported base. Its git dir stays read-only to builds."`
	ColdOK  bool   `name:"cold-ok" help:"For setup scripts: when no warm agent can be made for a reason that is not the caller's (no base yet, a blocked host), exit 0 with the worktree cold, say why, ask for the missing base and adopt the worktree once it is ready."`
	JSON    bool   `name:"json" help:"Print the agent as JSON."`
}

const adoptDesc = `Make an existing worktree of the repository an agent, in place.

Agent tools that run git worktree add themselves (Codex, Cursor, Conductor,
and anything else) get a worktree Ferry did not make. ferry adopt gives it
what spawn gives a new one: the base chosen as spawn chooses it (the
current base, or a ready one at the worktree's commit), stamping of the
files whose bytes are the base's (the worktree's own edits stay newer and
rebuild), a fork of the base's target and the target link. Its branch,
HEAD and files stay as they are.

It refuses, changing nothing, the main checkout (unless --in-place: a cloud
agent's container runs the agent in the checkout it was given, so that
checkout is made the agent, its git dir read-only to builds), a path that
is not a worktree of this repository, and a worktree whose target holds build output
Ferry did not make. Adopting an agent's worktree again changes nothing and
exits 0. ferry rm NAME later removes only what adoption added; ferry rm
--worktree NAME removes the worktree too (never the main checkout).`

func adoptAgent(args []string, io cli.IO) int {
	var c adoptCmd
	return cli.Run("ferry adopt", adoptDesc,
		[]string{"ferry adopt ../repo-codex-1", "cd ~/.cursor/worktrees/repo/abc && ferry adopt --tool cursor", "ferry adopt /tmp/wt --name review-2 --json",
			"ferry base import base.ferrybase && ferry adopt --in-place --tool codex-cloud"},
		&c, args, io, &c.JSON, func() error {
			path := c.Path
			if path == "" {
				path = "."
			}
			// The repository is the working directory's (a worktree of
			// another is refused), or the worktree's own when the
			// working directory is in none.
			fc, err := cli.Load(".")
			if _, gerr := git.Open("."); gerr != nil && c.Path != "" {
				fc, err = cli.Load(path)
			}
			if err != nil {
				return err
			}
			if err := fc.Store.Init(); err != nil {
				return err
			}
			if err := fc.Store.InstallShim(""); err != nil {
				return err
			}
			if c.Path == "" {
				path = fc.Repo.Top
			}
			o := agent.AdoptOptions{
				Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store, Path: path,
				Name: c.Name, Backend: c.Backend, Tool: c.Tool, Session: c.Session, InPlace: c.InPlace, Progress: io.Stderr,
				ShimOnPath: onPath(fc.Store.ShimDir()),
			}
			var ad *agent.Adoption
			if c.ColdOK {
				var cold *hook.Cold
				if ad, cold, err = adoptOrDefer(fc, io, o); err == nil && cold != nil {
					if c.JSON {
						return cli.WriteJSON(io.Stdout, struct {
							Cold *hook.Cold `json:"cold"`
						}{cold})
					}
					fmt.Fprintf(io.Stderr, "ferry adopt: %s\n", cold.Message())
					fmt.Fprintln(io.Stdout, cold.Path)
					return nil
				}
			} else {
				e := pipeline.Env{Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store, Log: io.Stderr, Prog: "ferry adopt"}
				ad, err = pipeline.Adopt(e.OneShot("ferry-adopt"), o)
			}
			if err != nil {
				return err
			}
			if c.JSON {
				return cli.WriteJSON(io.Stdout, ad)
			}
			r := ad.Record
			if ad.Already {
				fmt.Fprintf(io.Stderr, "ferry adopt: %s is agent %s already; nothing to do\n", r.Worktree, r.Name)
			} else {
				fmt.Fprintf(io.Stderr, "ferry adopt: agent %s from base %s, %s fork, %d files stamped, %d left to rebuild, in %s\n",
					r.Name, cli.Short(r.Base), r.Backend, r.Stamp.Files, r.Stamp.Skipped, cli.Seconds(r.Timings.Total))
				if r.TargetLinkSkipped != "" {
					fmt.Fprintf(io.Stderr, "ferry adopt: no ./target link: %s\n", r.TargetLinkSkipped)
				} else if !onPath(fc.Store.ShimDir()) {
					fmt.Fprintf(io.Stderr, "ferry adopt: cargo builds warm through Ferry's shim: put it first on PATH in the tool's shells (%s)\n", hook.PathLine(fc.Store.ShimDir()))
				}
			}
			fmt.Fprintln(io.Stdout, r.Worktree)
			return nil
		})
}

// onPath reports whether cargo on PATH is the shim in dir: dir comes
// before any other directory holding a cargo.
func onPath(dir string) bool {
	p, err := exec.LookPath("cargo")
	return err == nil && filepath.Clean(filepath.Dir(p)) == filepath.Clean(dir)
}
