package cli

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"

	"github.com/ferrydev/ferry/pkg/failure"
)

// stages are the pipeline binaries that `ferry NAME` runs, git style.
var stages = map[string]string{
	"base":  "build and list immutable warm bases (ferry-base)",
	"spawn": "create an agent: a worktree with a fork of the base (ferry-spawn)",
	"watch": "poll a ref and announce new commits (ferry-watch)",
	"gc":    "delete what nothing references (ferry-gc)",
}

// own are the front's own commands.
var own = map[string]string{
	"run":    "run a command in an agent's sandbox: ferry run [NAME] -- CMD",
	"shell":  "open a shell in an agent's sandbox",
	"env":    "print the environment that builds as an agent",
	"list":   "list agents",
	"rm":     "remove an agent",
	"doctor": "diagnose this host and what spawn would do here [--json] [--apparmor-profile]",
	"setup":  "print what the host needs and the script that does it: ferry setup apparmor",
	"up":     "keep bases warm: start watcher (hosting the bus), builder and gc",
	"events": "print the event log [--follow] [--json]",
}

// Front is the ferry command: it dispatches to the stage binaries and runs
// its own commands.
func Front(args []string, io IO) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		frontHelp(io)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	name := args[0]
	if _, ok := stages[name]; ok {
		return Report(io, "ferry", execStage("ferry-"+name, args[1:]), false)
	}
	switch name {
	case "run":
		return runAgent(args[1:], io)
	case "shell":
		return shellAgent(args[1:], io)
	case "env":
		return envAgent(args[1:], io)
	case "list":
		return listAgents(args[1:], io)
	case "rm":
		return rmAgent(args[1:], io)
	case "up":
		return up(args[1:], io)
	case "events":
		return eventLog(args[1:], io)
	case "doctor":
		return runDoctor(args[1:], io)
	case "setup":
		return runSetup(args[1:], io)
	}
	if _, ok := own[name]; ok {
		return Report(io, "ferry", Unimplemented("ferry "+name), false)
	}
	return Report(io, "ferry", failure.New(failure.Usage, "run `ferry --help` for the commands", "unknown command %q", name), false)
}

// execStage replaces this process with the stage binary (see stagePath).
func execStage(bin string, args []string) error {
	path, err := stagePath(bin)
	if err != nil {
		return err
	}
	err = syscall.Exec(path, append([]string{bin}, args...), os.Environ())
	return fmt.Errorf("exec %s: %w", path, err)
}

// Unimplemented is the error of a command that does not exist yet.
func Unimplemented(what string) error {
	return failure.New(failure.Unimplemented, "see the README for what works today",
		"%s is not implemented yet", what)
}

func frontHelp(io IO) {
	fmt.Fprintln(io.Stdout, "Usage: ferry <command> [args]\n\nFerry gives every parallel coding agent its own git worktree with a warm Cargo build forked from an immutable base.\n\nPipeline stages:")
	list := func(m map[string]string) {
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(io.Stdout, "  %-8s %s\n", n, m[n])
		}
	}
	list(stages)
	fmt.Fprintln(io.Stdout, "\nCommands:")
	list(own)
	fmt.Fprintln(io.Stdout, "\nEvery command takes --json. Run `ferry <command> --help` for its flags.\n\n"+strings.TrimSpace(failure.ExitCodes))
}

// NotYet is the main of a stage binary that does not exist yet.
func NotYet(bin string, io IO) int {
	return Report(io, bin, Unimplemented(bin), false)
}
