// Package ferrycmd is the command layer of ferry, the human front: `ferry
// base`, `ferry spawn`, `ferry gc` and `ferry watch` run the stage binaries
// (git style, telling them the command as typed so their usage lines say
// it), and the others in the same table (commands: run, shell, env, list,
// rm, adopt, doctor, up, events, hook for agent tools, completion, …) are
// its own. It links the NATS client (rm, events and hook), not the
// server: `ferry up` supervises the stage processes, and `ferry events`
// without a running bus runs `ferry-watch log`.
package ferrycmd

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/suggest"
)

// command is one command of ferry: its name, its line in --help, how it
// runs, the grammar it parses with (for its completion), and how --help
// names it among the commands that take --json. Adding a command is one
// entry in commands; dispatch, --help, the did-you-mean list and
// completion all read the table.
type command struct {
	name string
	help string
	// stage: `ferry NAME` runs the pipeline binary ferry-NAME, which
	// parses its own arguments, takes --json, and answers its own
	// completion model.
	stage bool
	run   func(args []string, io cli.IO) int
	// grammar makes the grammar the command parses with; nil for a stage,
	// and for run, which reads NAME -- CMD itself.
	grammar func() any
	// json is how --help lists the command among those that take --json;
	// "" when it takes none (the wrappers run and shell, and the
	// supervisor up, print their children's output instead).
	json string
}

// commands is the table of ferry's commands. It is made by a function,
// not a variable: completion reads the table, and the table names
// completion.
func commands() []command {
	own := func(name, help, json string, run func([]string, cli.IO) int, grammar func() any) command {
		return command{name: name, help: help, run: run, grammar: grammar, json: json}
	}
	stage := func(name, help string) command {
		return command{name: name, help: help, stage: true, json: name}
	}
	return []command{
		stage("base", "build, list and verify immutable warm bases (ferry-base)"),
		stage("spawn", "create an agent: a worktree with a fork of the base (ferry-spawn)"),
		stage("gc", "delete what nothing references (ferry-gc)"),
		stage("watch", "poll a ref and announce new commits (ferry-watch)"),
		own("run", "run a command in an agent's sandbox: ferry run [NAME] -- CMD", "", runAgent, nil),
		own("shell", "open a shell in an agent's sandbox", "", shellAgent, func() any { return new(shellCmd) }),
		own("env", "print the environment that builds as an agent", "env", envAgent, func() any { return new(envCmd) }),
		own("list", "list agents", "list", listAgents, func() any { return new(listCmd) }),
		own("stats", "show how warm agents' first builds were, per command (hit rates)", "stats", statsAgents, func() any { return new(statsCmd) }),
		own("why", "say why an agent's last build compiled what it did", "why", whyAgent, func() any { return new(whyCmd) }),
		own("rm", "remove an agent", "rm", rmAgent, func() any { return new(rmCmd) }),
		own("adopt", "make an existing worktree (made by any tool) an agent, in place", "adopt", adoptAgent, func() any { return new(adoptCmd) }),
		own("doctor", "diagnose this host and what spawn would do here", "doctor", runDoctor, func() any { return new(doctorCmd) }),
		own("setup", "print what the host needs and the script that does it: ferry setup apparmor", "setup", runSetup, func() any { return new(setupCmd) }),
		own("up", "keep bases warm: start watcher (hosting the bus), builder and gc", "", up, func() any { return new(upCmd) }),
		own("config", "print the settings Ferry runs with here: each key of ferry.toml, its value and where it came from", "config", showConfig, func() any { return new(configCmd) }),
		own("events", "print the event log", "events", eventLog, func() any { return new(eventsCmd) }),
		own("key", "print this host's signing key for published bases (made on first use)", "key", signingKey, func() any { return new(keyCmd) }),
		own("version", "print Ferry's version", "version", version, func() any { return new(versionCmd) }),
		own("hook", "agent-tool hooks: ferry hook claude-code|git|codex|cursor|conductor install, and the hooks they run",
			"hook (install, uninstall)", hookAgent, func() any { return new(hookCmd) }),
		own("completion", "print the shell completion script: ferry completion bash|zsh|fish", "completion", completion, func() any { return new(completionCmd) }),
	}
}

// lookup finds the command name, or false.
func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// Main runs ferry with args and returns its exit code.
func Main(args []string, io cli.IO) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		help(io)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	name := args[0]
	if name == "--version" {
		name = "version"
	}
	c, ok := lookup(name)
	switch {
	case !ok:
		return cli.Report(io, "ferry", unknownCommand(name), cli.WantsJSON(args[1:]))
	case c.stage:
		return cli.Report(io, "ferry "+name, execStage(name, args[1:]), false)
	}
	return c.run(args[1:], io)
}

// unknownCommand is the usage error for a command ferry does not have,
// naming the one within a typo or two when there is one (ferry lsit).
func unknownCommand(name string) error {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	if meant := suggest.Closest(name, names); meant != "" {
		return failure.New(failure.Usage, fmt.Sprintf("did you mean `ferry %s`? run `ferry --help` for the commands", meant), "unknown command %q", name)
	}
	return failure.New(failure.Usage, "run `ferry --help` for the commands", "unknown command %q", name)
}

// execStage replaces this process with the stage binary, telling it the
// command as typed (cli.InvokedAs).
func execStage(stage string, args []string) error {
	path, err := stagePath("ferry-" + stage)
	if err != nil {
		return err
	}
	env := append(os.Environ(), cli.InvokedAs+"=ferry "+stage)
	err = syscall.Exec(path, append([]string{"ferry-" + stage}, args...), env)
	return fmt.Errorf("exec %s: %w", path, err)
}

// stagePath finds a stage binary beside this executable, else on PATH.
func stagePath(bin string) (string, error) {
	if self, err := os.Executable(); err == nil {
		cand := filepath.Join(filepath.Dir(self), bin)
		if fi, err := os.Stat(cand); err == nil && fi.Mode().IsRegular() {
			return cand, nil
		}
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		return "", failure.Wrap(failure.Prereq, err, "install Ferry's binaries together (make build puts them all in ./bin)", "%s not found beside ferry or on PATH", bin)
	}
	return p, nil
}

func help(io cli.IO) {
	fmt.Fprintln(io.Stdout, "Usage: ferry <command> [args]\n\nFerry gives every parallel coding agent its own git worktree with a warm Cargo build forked from an immutable base.\n\nPipeline stages:")
	cs := commands()
	slices.SortFunc(cs, func(a, b command) int { return strings.Compare(a.name, b.name) })
	list := func(stages bool) {
		for _, c := range cs {
			if c.stage == stages {
				fmt.Fprintf(io.Stdout, "  %-10s %s\n", c.name, c.help)
			}
		}
	}
	list(true)
	fmt.Fprintln(io.Stdout, "\nCommands:")
	list(false)
	var json []string
	for _, c := range commands() {
		if c.json != "" {
			json = append(json, c.json)
		}
	}
	fmt.Fprintf(io.Stdout, "\n--json prints the answer as JSON for: %s.\nRun `ferry <command> --help` for its flags and examples; `ferry --version` for the version.\n\n%s\n",
		strings.Join(json, ", "), strings.TrimSpace(failure.ExitCodes))
}

type versionCmd struct {
	JSON bool `name:"json" help:"Print the version as JSON."`
}

func version(args []string, io cli.IO) int {
	var c versionCmd
	return cli.Run("ferry version", "Print the module version and the commit Ferry was built from.", nil, &c, args, io, &c.JSON, func() error {
		v := cli.ReadVersion()
		if c.JSON {
			return cli.WriteJSON(io.Stdout, v)
		}
		fmt.Fprintln(io.Stdout, v)
		return nil
	})
}
