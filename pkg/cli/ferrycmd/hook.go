package ferrycmd

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/alecthomas/kong"
	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/hook"
	"github.com/ferrydev/ferry/pkg/pipeline"
)

// hookCmd is `ferry hook TOOL EVENT`: what an agent tool runs when it
// creates or removes a worktree or starts a session, and the commands that
// install those hooks in the tool's settings.
type hookCmd struct {
	ClaudeCode struct {
		WorktreeCreate struct {
			Worktrees string `help:"Where the worktree goes: repo (<repository>/.claude/worktrees/NAME), or the configured place ([paths] worktrees) when not given." enum:",repo,parent" default:""`
		} `cmd:"" name:"WorktreeCreate" help:"Create a Ferry agent for the worktree Claude Code asks for (JSON payload on stdin); print only its absolute path on stdout."`
		WorktreeRemove struct{}    `cmd:"" name:"WorktreeRemove" help:"Remove the agent of the worktree Claude Code is done with, when that loses nothing; otherwise keep it and say why (exit 6)."`
		SessionStart   struct{}    `cmd:"" name:"SessionStart" help:"In an agent's worktree, put Ferry's cargo shim first on PATH for the session's shell commands (through CLAUDE_ENV_FILE); elsewhere do nothing."`
		CwdChanged     struct{}    `cmd:"" name:"CwdChanged" help:"As SessionStart, for a session that moves into an agent's worktree (EnterWorktree, cd)."`
		Install        settingsCmd `cmd:"" help:"Add Ferry's hooks (WorktreeCreate, WorktreeRemove, SessionStart, CwdChanged) to a Claude Code settings file, keeping everything else in it."`
		Uninstall      settingsCmd `cmd:"" help:"Remove Ferry's hooks from a Claude Code settings file, keeping everything else in it."`
	} `cmd:"" name:"claude-code" help:"Claude Code's hooks (https://code.claude.com/docs/en/hooks)."`
	Git struct {
		PostCheckout struct {
			Args []string `arg:"" optional:"" help:"What git passes: the previous HEAD, the new HEAD, and 1 for a branch checkout."`
		} `cmd:"" name:"post-checkout" help:"Adopt the worktree git worktree add just made (the previous HEAD is the null id); do nothing on any other checkout. Never fails the checkout."`
		Install   gitHookCmd `cmd:"" help:"Install Ferry's post-checkout hook where git runs this repository's hooks (core.hooksPath, else the common git dir's hooks/), keeping a hook that was there and running it first."`
		Uninstall gitHookCmd `cmd:"" help:"Remove Ferry's post-checkout hook and put back the hook it kept."`
	} `cmd:"" name:"git" help:"git's post-checkout hook: every git worktree add, by any tool, makes a warm agent."`
	CodexCloud struct {
		Print struct {
			JSON bool `name:"json" help:"Print the scripts as JSON."`
		} `cmd:"" help:"Print the setup and maintenance scripts to paste into the Codex cloud environment's settings: import or build the base, adopt the checkout in place, put the shim on the shells' PATH."`
	} `cmd:"" name:"codex-cloud" help:"Codex cloud environments: the setup and maintenance scripts, which live in the environment's settings."`

	// tools are the commands of the tools Ferry installs a file's lines
	// for (hook.Installers), added to the grammar by KongOptions.
	tools map[string]*setupTool
}

// KongOptions adds a command for each tool of hook.Installers: a tool is
// one file of package hook and its entry in that list.
func (c *hookCmd) KongOptions() []kong.Option {
	c.tools = map[string]*setupTool{}
	var opts []kong.Option
	for _, t := range hook.Installers() {
		sc := new(setupTool)
		c.tools[t.Name] = sc
		opts = append(opts, kong.DynamicCommand(t.Name, t.Help, "", sc))
	}
	// Each tool's install and uninstall say what they do for it.
	return append(opts, kong.PostBuild(func(k *kong.Kong) error {
		for _, n := range k.Model.Children {
			t, err := hook.LookupSetup(n.Name)
			if c.tools[n.Name] == nil || err != nil {
				continue
			}
			for _, v := range n.Children {
				v.Help = t.CommandHelp(v.Name == "install")
			}
		}
		return nil
	}))
}

// toolSetupCmd installs or uninstalls Ferry's lines in a tool's setup file.
type toolSetupCmd struct {
	Scope  string `help:"Which file: project (the repository's own file; Codex and Cursor have only this one), local (Conductor: .conductor/settings.local.toml), user (Conductor: ~/.conductor/settings.toml)." default:"project" enum:"project,local,user"`
	DryRun bool   `name:"dry-run" help:"Print the file as it would be, and write nothing."`
	JSON   bool   `name:"json" help:"Print what changed as JSON."`
}

// setupTool is a tool's commands; KongOptions sets their help.
type setupTool struct {
	Install   toolSetupCmd `cmd:""`
	Uninstall toolSetupCmd `cmd:""`
}

type gitHookCmd struct {
	DryRun bool `name:"dry-run" help:"Say what would change, and write nothing."`
	JSON   bool `name:"json" help:"Print what changed as JSON."`
}

type settingsCmd struct {
	Worktrees string `help:"Where WorktreeCreate puts worktrees: auto (repo on macOS, where Claude Code refuses a hook's worktree outside the repository: anthropics/claude-code#89076; else as configured), repo (<repository>/.claude/worktrees/NAME), parent (as configured: [paths] worktrees)." enum:"auto,repo,parent" default:"auto"`
	Scope     string `help:"Which settings file: local (.claude/settings.local.json, this checkout only), project (.claude/settings.json, committed: note the hook names this machine's ferry by its absolute path), user (~/.claude/settings.json, or $CLAUDE_CONFIG_DIR/settings.json)." default:"local" enum:"local,project,user"`
	DryRun    bool   `name:"dry-run" help:"Print the file as it would be, and write nothing."`
	JSON      bool   `name:"json" help:"Print what changed as JSON."`
}

const hookDesc = `Hooks for agent tools that create worktrees themselves. Claude Code runs
ferry hook claude-code WorktreeCreate / WorktreeRemove / SessionStart /
CwdChanged with the event's JSON on stdin, once "ferry hook claude-code install" has added
them to its settings.

WorktreeCreate creates an agent named after the worktree (made unique),
from the repository in the payload's cwd, at its base revision when the
payload has one (else HEAD), and prints only the worktree's absolute path
on stdout; progress and errors go to stderr, and a failure exits non-zero
with Ferry's exit code, so Claude Code makes no worktree.

WorktreeRemove exits 0 when it removed the agent (as ferry rm would,
without --force) or when nothing is left at the path, and 6 when it kept
the agent: uncommitted changes, commits that no branch, tag or remote
reaches, processes still running for it, or an agent not made by this
hook. Claude Code reads a failing WorktreeRemove hook as a removal that
did not happen and keeps its record of the worktree, so the session
still points at the work; once the agent is removed (ferry rm), asking
again succeeds.

SessionStart and CwdChanged (a session moving into an agent's worktree)
exit 0 and write nothing outside agents' worktrees.

When WorktreeCreate cannot make a warm agent for a reason that is not the
user's (no base yet, the first one still building, a blocked host), it makes
the worktree as Claude Code would (.claude/worktrees/NAME on branch
worktree-NAME), prints its path, exits 0, says on stderr why it is cold, and
asks for the missing base: the worktree is adopted once the base is ready.

ferry hook git install puts a post-checkout hook where git runs the
repository's hooks: every git worktree add (by Codex, Cursor, Conductor, a
script, a person) then runs ferry adopt on the new worktree. Other checkouts
cost one sh start; a hook that was there runs after Ferry's with the same
arguments, and its exit status is the hook's.

ferry hook codex|cursor|conductor install merges a line into the tool's
setup file that runs ferry adopt --cold-ok in each new worktree (and, for
Codex's cleanup and Conductor's archive, ferry rm --if-agent), keeping
every other byte; the lines run ferry only where it is installed and never
fail the tool's script. uninstall takes them out again.

Cloud agents run in a container on the checkout their tool made there:
ferry hook cursor-cloud install puts a line in .cursor/environment.json's
install command, and ferry hook codex-cloud print prints the setup and
maintenance scripts for a Codex cloud environment's settings. Each imports
the base ($FERRY_BASE_FILE, exported by a build host) or builds it, adopts
the checkout in place and puts the shim first on the shells' PATH. ferry
hook copilot install writes .github/workflows/copilot-setup-steps.yml, which
keeps the base in the Actions cache under its key (ferry base key), signed
with the key in the secret FERRY_SIGNING_KEY.`

var hookExamples = []string{
	"ferry hook claude-code install",
	"ferry hook git install",
	"ferry hook cursor install --dry-run",
	"ferry hook codex-cloud print",
	"ferry hook copilot install --dry-run",
	"ferry hook conductor install --scope local --json",
	"ferry hook claude-code install --scope user --dry-run",
	"ferry hook claude-code uninstall --scope local --json",
	`echo '{"hook_event_name":"WorktreeCreate","name":"fix-parser","cwd":"'"$PWD"'"}' | ferry hook claude-code WorktreeCreate`,
}

// hookAgent is `ferry hook ...`.
func hookAgent(args []string, io cli.IO) int {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") && args[0] != "help" {
		known := append([]string{hook.Tool, "git"}, hook.SetupTools()...)
		if !slices.Contains(known, args[0]) {
			return cli.Report(io, "ferry hook", failure.New(failure.Usage,
				"ferry hook knows "+strings.Join(known, ", ")+"; any other tool that runs `git worktree add` gets its worktrees adopted through `ferry hook git install`",
				"unknown agent tool %q", args[0]), false)
		}
	}
	var c hookCmd
	ctx, code, done := cli.Parse("ferry hook", hookDesc, hookExamples, &c, args, io, c.KongOptions()...)
	if done {
		return code
	}
	prog := "ferry hook " + ctx.Command()
	switch ctx.Command() {
	case "claude-code WorktreeCreate":
		return cli.Report(io, prog, worktreeCreate(io, c.ClaudeCode.WorktreeCreate.Worktrees), false)
	case "claude-code WorktreeRemove":
		return cli.Report(io, prog, worktreeRemove(io), false)
	case "claude-code SessionStart":
		return cli.Report(io, prog, sessionStart(io, hook.EventSessionStart), false)
	case "claude-code CwdChanged":
		return cli.Report(io, prog, sessionStart(io, hook.EventCwdChanged), false)
	case "git post-checkout", "git post-checkout <args>":
		postCheckout(io, c.Git.PostCheckout.Args)
		return 0
	case "git install":
		g := &c.Git.Install
		return cli.Report(io, prog, g.run(io, true), g.JSON)
	case "git uninstall":
		g := &c.Git.Uninstall
		return cli.Report(io, prog, g.run(io, false), g.JSON)
	case "codex-cloud print":
		return cli.Report(io, prog, codexCloudPrint(io, c.CodexCloud.Print.JSON), c.CodexCloud.Print.JSON)
	case "claude-code install":
		s := &c.ClaudeCode.Install
		return cli.Report(io, prog, s.run(io, true), s.JSON)
	case "claude-code uninstall":
		s := &c.ClaudeCode.Uninstall
		return cli.Report(io, prog, s.run(io, false), s.JSON)
	}
	tool, verb, _ := strings.Cut(ctx.Command(), " ")
	if sc := c.tools[tool]; sc != nil && (verb == "install" || verb == "uninstall") {
		cmd := &sc.Install
		if verb == "uninstall" {
			cmd = &sc.Uninstall
		}
		return cli.Report(io, prog, cmd.run(io, tool, verb == "install"), cmd.JSON)
	}
	return cli.Report(io, "ferry hook", failure.New(failure.Usage, "run `ferry hook --help`", "unknown hook command %q", ctx.Command()), false)
}

// readPayload reads the hook's JSON payload for event from stdin,
// refusing a terminal (a person who typed the command would wait forever)
// and a payload for another event, before anything else is looked at.
func readPayload(event string) (*hook.Payload, error) {
	if _, err := unix.IoctlGetTermios(int(os.Stdin.Fd()), ioctlGetTermios); err == nil {
		return nil, failure.New(failure.Usage, "Claude Code runs this command with the event's JSON on stdin; install it with `ferry hook claude-code install`",
			"standard input is a terminal, not a hook payload")
	}
	p, err := hook.ParsePayload(os.Stdin)
	if err != nil {
		return nil, err
	}
	return p, p.CheckEvent(event)
}

// loadFirst loads the repository of the first of dirs that is in one.
func loadFirst(dirs []string) (*cli.Context, error) {
	var first error
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			continue
		}
		fc, err := cli.Load(d)
		if err == nil {
			return fc, nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = failure.New(failure.Prereq, "run Claude Code in a git repository that Ferry builds bases for",
			"none of the payload's directories exists: %s", strings.Join(dirs, ", "))
	}
	return nil, first
}

// hookDirs are the directories a payload's repository is looked for in.
func hookDirs(p *hook.Payload) []string {
	wd, _ := os.Getwd()
	return p.Dirs(os.Getenv("CLAUDE_PROJECT_DIR"), wd)
}

func hookEnv(fc *cli.Context, io cli.IO) hook.Env {
	e := pipeline.Env{Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store, Log: io.Stderr, Prog: "ferry hook"}
	ferry, _ := selfPath()
	return hook.Env{Env: e, Announcer: e.OneShot("ferry-hook"), Progress: io.Stderr, Ferry: ferry}
}

func worktreeCreate(io cli.IO, worktrees string) error {
	p, err := readPayload(hook.EventWorktreeCreate)
	if err != nil {
		return err
	}
	fc, err := loadFirst(hookDirs(p))
	if err != nil {
		return err
	}
	if err := fc.Store.Init(); err != nil {
		return err
	}
	if err := fc.Store.InstallShim(""); err != nil {
		return err
	}
	if worktrees != "" {
		fc.Settings.WorktreesInRepo = worktrees == config.WorktreesRepo
	}
	e := hookEnv(fc, io)
	// A release that reads a worktree session's settings from the
	// worktree gets the main checkout's local settings copied in, or its
	// SessionStart (the shim on PATH) never runs there.
	v, known := hook.HookClaude(os.Getenv)
	if e.Place, err = hook.SettingsCopy(agent.MainTop(fc.Repo), v, known); err != nil {
		fmt.Fprintf(io.Stderr, "ferry hook: warning: Claude Code %s reads the worktree's .claude/settings.local.json, and the main checkout's could not be read for a copy (%v): the session's shells may not get Ferry's shim\n", v, err)
	}
	r, cold, err := hook.Create(e, p)
	if err != nil {
		return err
	}
	if cold != nil {
		fmt.Fprintf(io.Stderr, "ferry hook: %s\n", cold.Message())
		fmt.Fprintln(io.Stdout, cold.Path)
		return nil
	}
	for rel := range r.Placed {
		fmt.Fprintf(io.Stderr, "ferry hook: copied %s into the worktree: Claude Code %s reads a worktree session's settings there (until %s), and Ferry's SessionStart hook puts the shim on the session's PATH\n", rel, v, hook.ClaudeMainSettings)
	}
	asked, field := p.NameAsked()
	how := "asked for " + fmt.Sprintf("%q (%s)", asked, field)
	if field == "" {
		how = "no name in the payload"
	}
	fmt.Fprintf(io.Stderr, "ferry hook: agent %s (%s) on branch %s from base %s, %s fork, in %s\n",
		r.Name, how, r.Branch, cli.Short(r.Base), r.Backend, cli.Seconds(r.Timings.Total))
	// Claude Code's contract: the worktree's absolute path, alone, on stdout.
	fmt.Fprintln(io.Stdout, r.Worktree)
	return nil
}

func worktreeRemove(io cli.IO) error {
	p, err := readPayload(hook.EventWorktreeRemove)
	if err != nil {
		return err
	}
	// The worktree itself finds its repository best; the payload's cwd may
	// be elsewhere by now, or the worktree may be gone.
	dirs := hookDirs(p)
	if path := p.RemovePath(); path != "" {
		dirs = append([]string{path}, dirs...)
	}
	fc, err := loadFirst(dirs)
	if err != nil {
		return err
	}
	// Opened from inside the worktree (Claude Code may run the hook there),
	// the removal goes on from another worktree of the repository once this
	// one is gone (agent.Remove, git.Repo.Outside).
	rm, err := hook.Remove(hookEnv(fc, io), p)
	if err != nil {
		return err
	}
	if rm == nil {
		fmt.Fprintf(io.Stderr, "ferry hook: nothing to remove at %s\n", p.RemovePath())
		return nil
	}
	fmt.Fprintf(io.Stderr, "ferry hook: removed agent %s (%s)\n", rm.Name, rm.Worktree)
	if rm.BranchKept != "" {
		fmt.Fprintf(io.Stderr, "ferry hook: kept branch %s: it carries %d commit(s)\n", rm.BranchKept, rm.BranchCommits)
	}
	return nil
}

// sessionStart answers SessionStart, and CwdChanged, whose cwd is where the
// session moved: a session that starts in the main checkout and enters an
// agent's worktree later (EnterWorktree) gets the shim then.
func sessionStart(io cli.IO, event string) error {
	p, err := readPayload(event)
	if err != nil {
		return err
	}
	// Installed for the user, this runs at the start of every session in
	// every directory: only an agent's worktree is Ferry's business. A
	// repository Ferry cannot load (a ferry.toml with a mistake, a store
	// someone else owns) is said on stderr, which Claude Code shows only
	// in its verbose mode, and is no error of the session's.
	var fc *cli.Context
	for _, d := range hookDirs(p) {
		if _, err := git.Open(d); err != nil {
			continue // not in a repository: not an agent's worktree
		}
		if fc, err = cli.Load(d); err != nil {
			fmt.Fprintf(io.Stderr, "ferry hook: not looking for an agent in %s: %v\n", d, err)
			return nil
		}
		break
	}
	if fc == nil {
		return nil
	}
	sess, err := hook.SessionStart(fc.Store, fc.Repo, os.Getenv(envFileVar))
	if err != nil || sess == nil {
		return err
	}
	// The link the line points at must exist before the first cargo call.
	if err := fc.Store.InstallShim(""); err != nil {
		return err
	}
	switch {
	case sess.Written && sess.Agent != "":
		fmt.Fprintf(io.Stderr, "ferry hook: agent %s: cargo in this session builds through Ferry (%s first on PATH, in %s)\n", sess.Agent, fc.Store.ShimDir(), sess.EnvFile)
	case sess.Written:
		fmt.Fprintf(io.Stderr, "ferry hook: cargo in this session goes through Ferry's shim (%s first on PATH, in %s): warm in agents' worktrees (subagents' too), plain cargo elsewhere\n", fc.Store.ShimDir(), sess.EnvFile)
	}
	return nil
}

// envFileVar names the file Claude Code gives SessionStart hooks to
// persist environment variables in: it sources the file before each of
// the session's shell commands (the hooks reference, "Persist environment
// variables").
const envFileVar = "CLAUDE_ENV_FILE"

// run installs (or uninstalls) Ferry's hooks in the settings file of the
// scope asked for.
func (c *settingsCmd) run(io cli.IO, install bool) error {
	var project, configDir string
	if c.Scope == hook.ScopeUser {
		configDir = os.Getenv("CLAUDE_CONFIG_DIR")
		if configDir == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return failure.Wrap(failure.Prereq, err, "set HOME", "cannot find the home directory")
			}
			configDir = filepath.Join(home, ".claude")
		}
	} else {
		repo, err := git.Open(".")
		if err != nil {
			return err
		}
		project = repo.Top
	}
	path, err := hook.SettingsPath(c.Scope, project, configDir)
	if err != nil {
		return err
	}
	var ed *hook.Edit
	ferry := ""
	out := editOutput{Scope: c.Scope, DryRun: c.DryRun}
	if install {
		if ferry, err = selfPath(); err != nil {
			return err
		}
		inRepo := c.Worktrees == config.WorktreesRepo || (c.Worktrees == "auto" && runtime.GOOS == "darwin")
		// The hooks the installed Claude Code can take (a release that
		// knows no CwdChanged drops a file naming it), and what it lacks.
		v, bin, known := hook.InstalledClaude()
		if known {
			out.Claude, out.ClaudeGaps = v.String(), hook.ClaudeGaps(v)
		}
		if bin == "" {
			out.ClaudeGaps = []string{"no claude on PATH to ask its release: every hook is installed, for Claude Code " + hook.ClaudeCwdChanged.String() + " or later (`ferry doctor` checks once claude is on PATH)"}
		}
		ed, err = hook.InstallEvents(path, ferry, inRepo, hook.ClaudeEvents(v, known))
	} else {
		ed, err = hook.Uninstall(path)
	}
	if err != nil {
		return err
	}
	out.Ferry = ferry
	if printed, err := writeEdit(io, ed, out, c.JSON); printed || err != nil {
		return err
	}
	reportEdit(io.Stderr, ed, c.Scope, c.DryRun, install)
	for _, g := range out.ClaudeGaps {
		fmt.Fprintf(io.Stderr, "ferry hook: note: %s\n", g)
	}
	return nil
}

// editOutput is what an installer's --json adds to the edit.
type editOutput struct {
	*hook.Edit
	Tool   string `json:"tool,omitempty"`
	Scope  string `json:"scope"`
	Ferry  string `json:"ferry,omitempty"`
	DryRun bool   `json:"dry_run"`
	// Content is the file as it would be, with --dry-run.
	Content *string `json:"content,omitempty"`
	// Claude is the release of the claude on PATH, and ClaudeGaps what
	// it lacks that the hooks rely on (hook.ClaudeGaps).
	Claude     string   `json:"claude_version,omitempty"`
	ClaudeGaps []string `json:"claude_gaps,omitempty"`
}

// writeEdit writes ed unless this is a dry run, then prints it as JSON
// (out, with asJSON) or, for a dry run, the file as it would be. printed
// says the JSON was the whole answer.
func writeEdit(io cli.IO, ed *hook.Edit, out editOutput, asJSON bool) (printed bool, err error) {
	if !out.DryRun {
		if err := ed.Write(); err != nil {
			return false, err
		}
	}
	if asJSON {
		out.Edit = ed
		if out.DryRun {
			s := string(ed.Content())
			out.Content = &s
		}
		return true, cli.WriteJSON(io.Stdout, out)
	}
	if out.DryRun {
		io.Stdout.Write(ed.Content())
	}
	return false, nil
}

func reportEdit(w io.Writer, ed *hook.Edit, scope string, dry, install bool) {
	verb := "would change"
	if !dry {
		verb = "changed"
	}
	if !ed.Changed {
		state := "has no hooks of Ferry's"
		if install {
			state = "already runs Ferry's hooks"
		}
		fmt.Fprintf(w, "ferry hook: %s (%s) %s; nothing to do\n", ed.Path, scope, state)
		return
	}
	var parts []string
	for _, x := range []struct {
		what   string
		events []string
	}{{"added", ed.Added}, {"updated", ed.Updated}, {"removed", ed.Removed}} {
		if len(x.events) > 0 {
			parts = append(parts, x.what+" "+strings.Join(x.events, ", "))
		}
	}
	fmt.Fprintf(w, "ferry hook: %s %s (%s): %s\n", verb, ed.Path, scope, strings.Join(parts, "; "))
	if install && !dry {
		fmt.Fprintln(w, "ferry hook: Claude Code sessions started from now on create Ferry agents for their worktrees (claude --worktree NAME)")
	}
}

// selfPath is the absolute path of the running ferry as it was invoked:
// through a symbolic link (a package manager's bin/ferry) when it was, so
// the hooks keep working after an upgrade moves the real file.
func selfPath() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the running ferry: %w", err)
	}
	arg0 := os.Args[0]
	var cand string
	if strings.Contains(arg0, "/") {
		cand, err = filepath.Abs(arg0)
	} else {
		cand, err = exec.LookPath(arg0)
		if err == nil {
			cand, err = filepath.Abs(cand)
		}
	}
	if err == nil && filepath.Base(cand) == "ferry" {
		a, aerr := os.Stat(cand)
		b, berr := os.Stat(exe)
		if aerr == nil && berr == nil && os.SameFile(a, b) {
			return filepath.Clean(cand), nil
		}
	}
	if filepath.Base(exe) != "ferry" {
		return "", failure.New(failure.Prereq, "run the ferry binary itself (make build puts it in ./bin)",
			"the running program %s is not named ferry, so a hook could not run it as ferry", exe)
	}
	return exe, nil
}

// codexCloudPrint is `ferry hook codex-cloud print`.
func codexCloudPrint(io cli.IO, asJSON bool) error {
	// The cloud image's ferry, on its PATH: not this host's path.
	sc := hook.CodexCloudScripts("ferry")
	if asJSON {
		return cli.WriteJSON(io.Stdout, sc)
	}
	fmt.Fprintf(io.Stdout, "# Setup script (Codex cloud environment settings, \"Setup script\"):\n%s\n# Maintenance script (run when a cached container resumes):\n%s", sc.Setup, sc.Maintenance)
	fmt.Fprintln(io.Stderr, "ferry hook: the scripts run the ferry on the environment's PATH (install it in the setup script first); set FERRY_BASE_FILE to a base exported by a build host (ferry base export) to skip the cold build")
	return nil
}
