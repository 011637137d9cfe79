package ferrycmd

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/git"
)

type configCmd struct {
	JSON bool `name:"json" help:"Print the settings as JSON."`
}

// configAnswer is what `ferry config --json` prints.
type configAnswer struct {
	File string             `json:"file"` // the ferry.toml read, "" when there is none
	Keys []config.Effective `json:"keys"`
}

// configHelp is ferry config's description: what it prints, then every
// key of ferry.toml with the variable that overrides it.
func configHelp() string {
	var b strings.Builder
	b.WriteString("Print the settings Ferry runs with in this repository: every key of ferry.toml, its value, and where the value came from " +
		"(its default, a computed default, a FERRY_* variable, or the file and line that set it). In an agent's worktree that is ferry.toml " +
		"as HEAD commits it, which no build can change. docs/configuration.md says what each key does.\n\nKeys:")
	for _, k := range config.Keys() {
		b.WriteString(" " + k.Name)
		if k.Variable != "" {
			b.WriteString(" (" + k.Variable + ")")
		}
		b.WriteString(",")
	}
	return strings.TrimSuffix(b.String(), ",") + "."
}

// showConfig prints the effective settings (config.Explain).
func showConfig(args []string, io cli.IO) int {
	var c configCmd
	return cli.Run("ferry config", configHelp(),
		[]string{"ferry config", "ferry config --json | jq -r '.keys[] | select(.from != \"default\") | .key'   # what is not a default"},
		&c, args, io, &c.JSON, func() error {
			repo, err := git.Open(".")
			if err != nil {
				return err
			}
			settings, note, err := cli.Settings(repo)
			if err != nil {
				return err
			}
			if note != "" {
				fmt.Fprintf(io.Stderr, "ferry config: warning: %s\n", note)
			}
			data, err := cli.SettingsFile(repo, settings)
			if err != nil {
				return err
			}
			keys, err := config.Explain(settings, config.OSEnv(), data)
			if err != nil {
				return err
			}
			if c.JSON {
				return cli.WriteJSON(io.Stdout, configAnswer{File: settings.File, Keys: keys})
			}
			if settings.File == "" {
				fmt.Fprintf(io.Stdout, "no %s here: every key is its default or its variable's\n\n", config.FileName)
			} else {
				fmt.Fprintf(io.Stdout, "read %s\n\n", settings.File)
			}
			w := tabwriter.NewWriter(io.Stdout, 0, 4, 2, ' ', 0)
			for _, k := range keys {
				value, from := k.Value, k.From
				if value == "" {
					value = "(unset)"
				}
				if from == "computed" {
					from += ": " + k.Computed
				}
				fmt.Fprintf(w, "%s\t%s\t# %s\n", k.Key, value, from)
			}
			return w.Flush()
		})
}
