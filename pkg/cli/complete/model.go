// Package complete writes shell completion scripts (bash, zsh, fish) for
// a tree of commands read from kong's model: the subcommands, their
// aliases, their flags with short names and values, and the values of
// arguments and flags that have an enum. The scripts are static: the shell
// completes from them without running ferry at each Tab.
//
// A binary's model travels as JSON: each command parser answers ModelFlag
// with its Command (package cli's Parse), which is how the ferry front
// completes the stage binaries it runs but does not link.
package complete

import (
	"strings"

	"github.com/alecthomas/kong"
)

// ModelFlag, as a command's only argument, makes it print its Command as
// JSON instead of running. A flag, not an environment variable: a binary
// too old to know it refuses it as an unknown flag instead of running.
const ModelFlag = "--completion-model"

// Command is a command as completion sees it.
type Command struct {
	Name    string   `json:"name"`
	Aliases []string `json:"aliases,omitempty"`
	Help    string   `json:"help,omitempty"`
	// Flags are all the flags the command takes: its own, its ancestors'
	// (kong takes them after a subcommand too) and, where it has one, its
	// default subcommand's.
	Flags    []Flag    `json:"flags,omitempty"`
	Args     []Arg     `json:"args,omitempty"`
	Commands []Command `json:"commands,omitempty"`
}

// Flag is one flag.
type Flag struct {
	Name  string   `json:"name"`            // without the dashes
	Short string   `json:"short,omitempty"` // one letter, without the dash
	Help  string   `json:"help,omitempty"`
	Value bool     `json:"value,omitempty"` // takes a value: not a switch
	Enum  []string `json:"enum,omitempty"`  // the values it takes, when the model lists them
}

// Arg is one positional argument.
type Arg struct {
	Name string   `json:"name"`
	Enum []string `json:"enum,omitempty"`
}

// Of reads the model of grammar, a kong grammar, as a Command; a grammar
// with a KongOptions method adds the commands it returns.
func Of(grammar any) (Command, error) {
	var opts []kong.Option
	if g, ok := grammar.(interface{ KongOptions() []kong.Option }); ok {
		opts = g.KongOptions() // commands the grammar adds as it is built
	}
	parser, err := kong.New(grammar, opts...)
	if err != nil {
		return Command{}, err
	}
	return FromKong(parser.Model), nil
}

// FromKong reads kong's model of an application, hidden commands and flags
// left out.
func FromKong(app *kong.Application) Command {
	return fromNode(app.Node, nil)
}

// fromNode reads node, under ancestors taking inherited flags.
func fromNode(node *kong.Node, inherited []Flag) Command {
	own := append(append([]Flag{}, inherited...), flags(node)...)
	c := Command{Name: node.Name, Aliases: node.Aliases, Help: node.Help, Flags: own, Args: args(node.Positional)}
	if d := node.DefaultCmd; d != nil && d.Tag.Default == "withargs" {
		// `ferry base --rev R` is `ferry base build --rev R`.
		c.Flags = append(c.Flags, flags(d)...)
		c.Args = append(c.Args, args(d.Positional)...)
	}
	for _, child := range node.Children {
		switch {
		case child.Hidden:
		case child.Type == kong.ArgumentNode:
			// A branching positional argument: a value, not a word to
			// complete.
			c.Args = append(c.Args, Arg{Name: child.Name})
		default:
			c.Commands = append(c.Commands, fromNode(child, own))
		}
	}
	return c
}

func flags(node *kong.Node) []Flag {
	var out []Flag
	for _, f := range node.Flags {
		if f.Hidden {
			continue
		}
		flag := Flag{Name: f.Name, Help: f.Help, Value: !f.IsBool() && !f.IsCounter(), Enum: enum(f.Value)}
		if f.Short != 0 {
			flag.Short = string(f.Short)
		}
		out = append(out, flag)
		for _, alias := range f.Aliases {
			out = append(out, Flag{Name: alias, Help: flag.Help, Value: flag.Value, Enum: flag.Enum})
		}
		if neg := negation(f); neg != "" {
			out = append(out, Flag{Name: neg, Help: "Negates --" + f.Name + "."})
		}
	}
	return out
}

// negation is the name of a negatable switch's negative (kong's rule).
func negation(f *kong.Flag) string {
	switch f.Tag.Negatable {
	case "":
		return ""
	case "_":
		return "no-" + f.Name
	default:
		return f.Tag.Negatable
	}
}

func args(positional []*kong.Positional) []Arg {
	var out []Arg
	for _, p := range positional {
		out = append(out, Arg{Name: p.Name, Enum: enum(p)})
	}
	return out
}

// enum is the values v takes when its model lists them; the empty value
// (an enum such as ",repo,parent") is nothing to complete.
func enum(v *kong.Value) []string {
	if v.Enum == "" {
		return nil
	}
	var out []string
	for _, e := range v.EnumSlice() {
		if e != "" {
			out = append(out, e)
		}
	}
	return out
}

// Summary is the first sentence of help on one line, shortened to fit
// beside a candidate in zsh's and fish's menus.
func Summary(help string) string {
	s := strings.Join(strings.Fields(help), " ")
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimSuffix(s, ".")
	const width = 80
	if r := []rune(s); len(r) > width {
		cut := string(r[:width])
		if i := strings.LastIndex(cut, " "); i > width/2 {
			cut = cut[:i]
		}
		s = strings.TrimRight(cut, " ,;:") + "…"
	}
	return s
}
