package ferrycmd

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/hook"
	"github.com/ferrydev/ferry/pkg/pipeline"
)

// postCheckout is git's post-checkout hook: args are the previous HEAD,
// the new HEAD and the checkout kind. Only the null previous HEAD (git
// worktree add, or a clone) is Ferry's business, and only in a linked
// worktree. It never fails the checkout: whatever goes wrong is said on
// stderr, and the worktree stays as git made it.
func postCheckout(io cli.IO, args []string) {
	if len(args) == 0 || args[0] == "" || strings.Trim(args[0], "0") != "" {
		return
	}
	say := func(format string, a ...any) { fmt.Fprintf(io.Stderr, "ferry hook git: "+format+"\n", a...) }
	wd, err := os.Getwd()
	if err != nil {
		return
	}
	repo, err := git.Open(wd)
	if err != nil {
		return
	}
	gitDir, err1 := repo.GitDir()
	common, err2 := repo.CommonDir()
	if err1 != nil || err2 != nil || git.SamePath(gitDir, common) {
		return // the main checkout: a clone
	}
	// A hook installed in a shared core.hooksPath runs in every repository
	// that uses it: only a Cargo workspace's worktrees are Ferry's business.
	if _, err := os.Stat(filepath.Join(repo.Top, "Cargo.toml")); err != nil {
		return
	}
	fc, err := cli.Load(repo.Top)
	if err != nil {
		say("%s builds cold: %v", repo.Top, err)
		return
	}
	ad, cold, err := adoptOrDefer(fc, io, agent.AdoptOptions{Path: repo.Top, Tool: "git", ShimOnPath: onPath(fc.Store.ShimDir())})
	switch {
	case err != nil:
		say("%s builds cold: %v", repo.Top, err)
	case cold != nil:
		say("%s", cold.Message())
	case ad.Already:
	default:
		say("%s is agent %s, forked from base %s in %s: its first build is warm", ad.Worktree, ad.Name, cli.Short(ad.Base), cli.Seconds(ad.Timings.Total))
		if !onPath(fc.Store.ShimDir()) {
			say("builds go through Ferry once its shim is first on PATH in the tool's shells: %s", hook.PathLine(fc.Store.ShimDir()))
		}
	}
}

// adoptOrDefer adopts o.Path for a hook or a setup script: when that fails
// for a reason that is not the caller's, the worktree stays cold, and when
// only a base is missing it is left pending and the base asked for
// (hook.Defer).
func adoptOrDefer(fc *cli.Context, io cli.IO, o agent.AdoptOptions) (*agent.Adoption, *hook.Cold, error) {
	if err := fc.Store.Init(); err != nil {
		return nil, nil, err
	}
	if err := fc.Store.InstallShim(""); err != nil {
		return nil, nil, err
	}
	e := hookEnv(fc, io)
	o.Repo, o.Settings, o.Store, o.Progress = fc.Repo, fc.Settings, fc.Store, io.Stderr
	ad, err := pipeline.Adopt(e.Announcer, o)
	if err == nil || !hook.ColdWorthy(err) {
		return ad, nil, err
	}
	commit, _ := fc.Repo.Run(o.Path, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
	return nil, hook.Defer(e, o.Path, o.Tool, o.Session, strings.TrimSpace(commit), err), nil
}

// run installs or uninstalls the git hook.
func (c *gitHookCmd) run(io cli.IO, install bool) error {
	repo, err := git.Open(".")
	if err != nil {
		return err
	}
	dir, err := hook.GitHooksDir(repo)
	if err != nil {
		return err
	}
	var ed *hook.GitEdit
	if install {
		ferry, err := selfPath()
		if err != nil {
			return err
		}
		ed, err = hook.InstallGit(dir, ferry, c.DryRun)
		if err != nil {
			return err
		}
	} else if ed, err = hook.UninstallGit(dir, c.DryRun); err != nil {
		return err
	}
	if c.JSON {
		return cli.WriteJSON(io.Stdout, struct {
			*hook.GitEdit
			DryRun bool `json:"dry_run"`
		}{ed, c.DryRun})
	}
	would := ""
	if c.DryRun {
		would = "would be "
	}
	switch {
	case !ed.Changed:
		fmt.Fprintf(io.Stderr, "ferry hook: %s: nothing to do (%s)\n", ed.Path, ed.Reason)
	case ed.Action == "restored":
		fmt.Fprintf(io.Stderr, "ferry hook: %s %sremoved; the hook it kept %sput back\n", ed.Path, would, would)
	default:
		fmt.Fprintf(io.Stderr, "ferry hook: %s %s%s\n", ed.Path, would, ed.Action)
		if ed.Chained != "" && ed.Action == "installed" {
			fmt.Fprintf(io.Stderr, "ferry hook: the hook that was there %sruns from %s, after Ferry's, with the same arguments and exit status\n", would, ed.Chained)
		}
	}
	if install && ed.Changed && !c.DryRun {
		fmt.Fprintln(io.Stderr, "ferry hook: every `git worktree add` in this repository now makes a warm agent; cargo builds through Ferry where its shim is first on PATH:")
		fmt.Fprintf(io.Stderr, "  %s\n", hook.PathLine(shimDirOf(repo)))
	}
	return nil
}

// shimDirOf is the shim directory of repo's store, or the PATH line's
// placeholder when the store cannot be found.
func shimDirOf(repo *git.Repo) string {
	fc, err := cli.Load(repo.Top)
	if err != nil {
		return "<store parent>/bin"
	}
	return fc.Store.ShimDir()
}

// run installs or uninstalls tool's setup lines.
func (c *toolSetupCmd) run(io cli.IO, tool string, install bool) error {
	repo, err := git.Open(".")
	if err != nil {
		return err
	}
	home, _ := os.UserHomeDir()
	path, err := hook.SetupFile(tool, c.Scope, repo.Top, home)
	if err != nil {
		return err
	}
	t, err := hook.LookupSetup(tool)
	if err != nil {
		return err
	}
	var ed *hook.Edit
	ferry := ""
	if install {
		if t.Cloud {
			ferry = "ferry" // the container's, on its PATH: not this host's path
		} else if ferry, err = selfPath(); err != nil {
			return err
		}
		ed, err = hook.InstallSetup(tool, path, hook.SetupOptions{Ferry: ferry, Version: cli.ReadVersion().Version})
	} else {
		ed, err = hook.UninstallSetup(tool, path)
	}
	if err != nil {
		return err
	}
	if printed, err := writeEdit(io, ed, editOutput{Tool: tool, Scope: c.Scope, Ferry: ferry, DryRun: c.DryRun}, c.JSON); printed || err != nil {
		return err
	}
	reportSetup(io.Stderr, ed, tool, c.DryRun, install)
	return nil
}

func reportSetup(w io.Writer, ed *hook.Edit, tool string, dry, install bool) {
	verb := "changed"
	if dry {
		verb = "would change"
	}
	if !ed.Changed {
		state := "has no lines of Ferry's"
		if install {
			state = "already runs Ferry's lines"
		}
		fmt.Fprintf(w, "ferry hook: %s %s; nothing to do\n", ed.Path, state)
		return
	}
	var parts []string
	for _, x := range []struct {
		what string
		keys []string
	}{{"added", ed.Added}, {"extended", ed.Updated}, {"cleaned", ed.Removed}} {
		if len(x.keys) > 0 {
			parts = append(parts, x.what+" "+strings.Join(x.keys, ", "))
		}
	}
	fmt.Fprintf(w, "ferry hook: %s %s: %s\n", verb, ed.Path, strings.Join(parts, "; "))
	if t, err := hook.LookupSetup(tool); err == nil && install && !dry {
		fmt.Fprintln(w, "ferry hook: "+t.Installed)
	}
}
