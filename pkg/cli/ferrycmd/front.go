// Package ferrycmd is the command layer of ferry, the human front: `ferry
// base`, `ferry spawn`, `ferry gc` and `ferry watch` run the stage binaries
// (git style, telling them the command as typed so their usage lines say
// it), and the commands in own (run, shell, env, list, rm, adopt, doctor,
// up, events, hook for agent tools, completion, …) are its own. It links the NATS client
// (rm, events and hook), not the server: `ferry up` supervises the stage
// processes, and `ferry events` without a running bus runs `ferry-watch
// log`.
package ferrycmd

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/suggest"
)

// stages are the pipeline binaries that `ferry NAME` runs.
var stages = map[string]string{
	"base":  "build, list and verify immutable warm bases (ferry-base)",
	"spawn": "create an agent: a worktree with a fork of the base (ferry-spawn)",
	"watch": "poll a ref and announce new commits (ferry-watch)",
	"gc":    "delete what nothing references (ferry-gc)",
}

// own are the front's own commands.
var own = map[string]string{
	"run":        "run a command in an agent's sandbox: ferry run [NAME] -- CMD",
	"shell":      "open a shell in an agent's sandbox",
	"env":        "print the environment that builds as an agent",
	"list":       "list agents",
	"stats":      "show how warm agents' first builds were, per command (hit rates)",
	"why":        "say why an agent's last build compiled what it did",
	"rm":         "remove an agent",
	"adopt":      "make an existing worktree (made by any tool) an agent, in place",
	"doctor":     "diagnose this host and what spawn would do here",
	"setup":      "print what the host needs and the script that does it: ferry setup apparmor",
	"up":         "keep bases warm: start watcher (hosting the bus), builder and gc",
	"events":     "print the event log",
	"key":        "print this host's signing key for published bases (made on first use)",
	"version":    "print Ferry's version",
	"hook":       "agent-tool hooks: ferry hook claude-code|git|codex|cursor|conductor install, and the hooks they run",
	"completion": "print the shell completion script: ferry completion bash|zsh|fish",
}

// jsonCommands are the commands that take --json; the wrappers (run,
// shell) and the supervisor (up) print their children's output instead.
var jsonCommands = []string{"base", "spawn", "gc", "watch", "env", "list", "stats", "why", "rm", "adopt", "doctor", "setup", "events", "key", "version", "hook (install, uninstall)", "completion"}

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
	if _, ok := stages[name]; ok {
		return cli.Report(io, "ferry "+name, execStage(name, args[1:]), false)
	}
	switch name {
	case "--version", "version":
		return version(args[1:], io)
	case "run":
		return runAgent(args[1:], io)
	case "shell":
		return shellAgent(args[1:], io)
	case "env":
		return envAgent(args[1:], io)
	case "list":
		return listAgents(args[1:], io)
	case "stats":
		return statsAgents(args[1:], io)
	case "why":
		return whyAgent(args[1:], io)
	case "rm":
		return rmAgent(args[1:], io)
	case "adopt":
		return adoptAgent(args[1:], io)
	case "up":
		return up(args[1:], io)
	case "events":
		return eventLog(args[1:], io)
	case "doctor":
		return runDoctor(args[1:], io)
	case "setup":
		return runSetup(args[1:], io)
	case "hook":
		return hookAgent(args[1:], io)
	case "key":
		return signingKey(args[1:], io)
	case "completion":
		return completion(args[1:], io)
	}
	return cli.Report(io, "ferry", unknownCommand(name), cli.WantsJSON(args[1:]))
}

// unknownCommand is the usage error for a command ferry does not have,
// naming the one within a typo or two when there is one (ferry lsit).
func unknownCommand(name string) error {
	names := slices.Concat(slices.Sorted(maps.Keys(stages)), slices.Sorted(maps.Keys(own)))
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
	list := func(m map[string]string) {
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(io.Stdout, "  %-10s %s\n", n, m[n])
		}
	}
	list(stages)
	fmt.Fprintln(io.Stdout, "\nCommands:")
	list(own)
	fmt.Fprintf(io.Stdout, "\n--json prints the answer as JSON for: %s.\nRun `ferry <command> --help` for its flags and examples; `ferry --version` for the version.\n\n%s\n",
		strings.Join(jsonCommands, ", "), strings.TrimSpace(failure.ExitCodes))
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
