package ferrycmd

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/cli/complete"
	"github.com/ferrydev/ferry/pkg/failure"
)

type completionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"The shell: bash, zsh or fish."`
	JSON  bool   `name:"json" help:"Print the shell and the script as JSON."`
}

// completionAnswer is what `ferry completion --json` prints.
type completionAnswer struct {
	Shell  string `json:"shell"`
	Script string `json:"script"`
}

const completionDesc = `Print a completion script for bash, zsh or fish: Tab then completes
ferry's commands, their subcommands and flags, and the values of a flag or
argument that takes one of a few (--scope, say). The script is written
from the commands' own models (each stage's from its binary, found as ferry
runs it), so it completes what this ferry takes: write it again after an
upgrade, or load it at each shell's start.

Install it:
  bash: in ~/.bashrc, source <(ferry completion bash)
  zsh:  ferry completion zsh > ~/.zfunc/_ferry, with fpath=(~/.zfunc $fpath)
        before compinit in ~/.zshrc (any directory on $fpath will do); or,
        after compinit, source <(ferry completion zsh)
  fish: ferry completion fish > ~/.config/fish/completions/ferry.fish`

var completionExamples = []string{
	"source <(ferry completion bash)",
	"ferry completion zsh > ~/.zfunc/_ferry",
	"ferry completion fish > ~/.config/fish/completions/ferry.fish",
	"ferry completion bash --json",
}

// runModel is run's: an agent name, then -- and the command.
var runModel = complete.Command{
	Flags: []complete.Flag{{Name: "help", Short: "h", Help: "Show usage."}},
	Args:  []complete.Arg{{Name: "name"}},
}

// completion is `ferry completion SHELL`.
func completion(args []string, io cli.IO) int {
	// Said before parsing, with the shells there are: kong's refusal of an
	// enum value hints only at --help.
	if shell, ok := shellArg(args); ok && !slices.Contains(complete.Shells, shell) {
		return cli.Report(io, "ferry completion", failure.New(failure.Usage,
			"name one of "+strings.Join(complete.Shells, ", ")+": ferry completion "+strings.Join(complete.Shells, "|"),
			"unknown shell %q", shell), slices.Contains(args, "--json"))
	}
	var c completionCmd
	return cli.Run("ferry completion", completionDesc, completionExamples, &c, args, io, &c.JSON, func() error {
		script, ok := complete.Script(c.Shell, frontModel(io))
		if !ok {
			return failure.New(failure.Internal, "", "no script for shell %q", c.Shell)
		}
		if c.JSON {
			return cli.WriteJSON(io.Stdout, completionAnswer{Shell: c.Shell, Script: script})
		}
		_, err := fmt.Fprint(io.Stdout, script)
		return err
	})
}

// shellArg is the first argument that is no flag.
func shellArg(args []string) (string, bool) {
	for i, a := range args {
		if a == "--" {
			if i+1 < len(args) {
				return args[i+1], true
			}
			return "", false
		}
		if !strings.HasPrefix(a, "-") {
			return a, true
		}
	}
	return "", false
}

// frontModel is ferry's command tree: the front's own commands from the
// grammars they parse with, the stages' from their binaries. A command
// whose model cannot be had is completed by name, and stderr says why.
func frontModel(io cli.IO) complete.Command {
	root := complete.Command{Name: "ferry", Flags: []complete.Flag{
		{Name: "help", Short: "h", Help: "Show help."},
		{Name: "version", Help: "Print Ferry's version."},
	}}
	models := stageModels()
	for _, c := range commands() {
		if !c.stage {
			models[c.name] = ownModel(c)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(models)) {
		m := models[name]
		if m.err != nil {
			fmt.Fprintf(io.Stderr, "ferry completion: completing `ferry %s` without its flags: %s\n", name, strings.Join(cli.Messages(m.err), ": "))
		}
		c, _ := lookup(name)
		m.cmd.Name, m.cmd.Help = name, c.help
		root.Commands = append(root.Commands, m.cmd)
	}
	return root
}

// model is a command's model, or why there is none.
type model struct {
	cmd complete.Command
	err error
}

func ownModel(c command) model {
	if c.grammar == nil {
		return model{cmd: runModel}
	}
	cmd, err := complete.Of(c.grammar())
	return model{cmd, err}
}

// stageModels asks every stage binary for its model at once: a shell that
// loads the script at its start waits for the slowest only.
func stageModels() map[string]model {
	models := map[string]model{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range commands() {
		if !c.stage {
			continue
		}
		name := c.name
		wg.Go(func() {
			cmd, err := stageModel(name)
			mu.Lock()
			models[name] = model{cmd, err}
			mu.Unlock()
		})
	}
	wg.Wait()
	return models
}

// stageModel runs `ferry-STAGE --completion-model`, found as `ferry STAGE`
// finds it. A stage too old to know the flag refuses it and runs nothing.
func stageModel(stage string) (complete.Command, error) {
	path, err := stagePath("ferry-" + stage)
	if err != nil {
		return complete.Command{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, complete.ModelFlag)
	cmd.Env = append(os.Environ(), cli.InvokedAs+"=ferry "+stage)
	out, err := cmd.Output()
	var c complete.Command
	if err == nil {
		err = json.Unmarshal(out, &c)
	}
	if err != nil {
		return complete.Command{}, failure.Wrap(failure.Prereq, err, "install Ferry's binaries together, from one build (make install)",
			"%s gave no command model", path)
	}
	return c, nil
}
