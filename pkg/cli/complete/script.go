package complete

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Shells are the shells Script writes for.
var Shells = []string{"bash", "zsh", "fish"}

// Script writes root's completion script for shell; ok is false for a
// shell not in Shells.
func Script(shell string, root Command) (script string, ok bool) {
	t := newTables(root)
	switch shell {
	case "bash":
		return t.bash(), true
	case "zsh":
		return t.zsh(), true
	case "fish":
		return t.fish(), true
	}
	return "", false
}

// tables are what every script holds, whatever its shell: for each command,
// named by its path ("ferry base list"), its subcommands, flags and
// arguments. The scripts' functions look them up by path as they read the
// words before the cursor.
type tables struct {
	prog    string // the root command's name
	fn      string // prefix of the script's function names: __ferry
	entries []entry
}

// entry is a command and the path of words that leads to it.
type entry struct {
	path string
	cmd  *Command
}

func newTables(root Command) tables {
	t := tables{prog: root.Name, fn: "__" + funcName(root.Name)}
	var walk func(path string, c *Command)
	walk = func(path string, c *Command) {
		t.entries = append(t.entries, entry{path, c})
		for i := range c.Commands {
			walk(path+" "+c.Commands[i].Name, &c.Commands[i])
		}
	}
	walk(root.Name, &root)
	return t
}

// funcName makes name fit in a function name in every shell.
func funcName(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '.' {
			return '_'
		}
		return r
	}, name)
}

// arm is one branch of a lookup: the keys that select it, and the lines
// it prints (none: the key itself).
type arm struct {
	keys  []string
	lines []string
}

// children maps "PATH WORD" to the path WORD leads to: itself for a
// subcommand's name, the subcommand's path for an alias.
func (t tables) children() []arm {
	var names []string
	var aliases []arm
	for _, e := range t.entries {
		for _, c := range e.cmd.Commands {
			names = append(names, e.path+" "+c.Name)
			for _, a := range c.Aliases {
				aliases = append(aliases, arm{[]string{e.path + " " + a}, []string{e.path + " " + c.Name}})
			}
		}
	}
	if len(names) == 0 {
		return aliases
	}
	return append([]arm{{keys: names}}, aliases...)
}

// commands maps PATH to its subcommands, NAME:SUMMARY a line.
func (t tables) commands() []arm {
	var arms []arm
	for _, e := range t.entries {
		var lines []string
		for _, c := range e.cmd.Commands {
			for _, w := range append([]string{c.Name}, c.Aliases...) {
				lines = append(lines, described(w, c.Help))
			}
		}
		if len(lines) > 0 {
			arms = append(arms, arm{[]string{e.path}, lines})
		}
	}
	return arms
}

// flags maps PATH to its flags, --NAME:SUMMARY a line (then -S:SUMMARY
// for those with a short name).
func (t tables) flags() []arm {
	var arms []arm
	for _, e := range t.entries {
		var long, short []string
		for _, f := range e.cmd.Flags {
			long = append(long, described("--"+f.Name, f.Help))
			if f.Short != "" {
				short = append(short, described("-"+f.Short, f.Help))
			}
		}
		if len(long) > 0 {
			arms = append(arms, arm{[]string{e.path}, append(long, short...)})
		}
	}
	return arms
}

// valued lists "PATH FLAG" for every spelling of every flag that takes a
// value: the word after it is that value, not a command.
func (t tables) valued() []string {
	var keys []string
	for _, e := range t.entries {
		for _, f := range e.cmd.Flags {
			if f.Value {
				for _, s := range spellings(f) {
					keys = append(keys, e.path+" "+s)
				}
			}
		}
	}
	return keys
}

// values maps "PATH FLAG" to the values the flag takes, when the model
// lists them.
func (t tables) values() []arm {
	var arms []arm
	for _, e := range t.entries {
		for _, f := range e.cmd.Flags {
			if f.Value && len(f.Enum) > 0 {
				var keys []string
				for _, s := range spellings(f) {
					keys = append(keys, e.path+" "+s)
				}
				arms = append(arms, arm{keys, f.Enum})
			}
		}
	}
	return arms
}

// args maps "PATH N" to the values of PATH's Nth argument (from 0), when
// the model lists them.
func (t tables) args() []arm {
	var arms []arm
	for _, e := range t.entries {
		for i, a := range e.cmd.Args {
			if len(a.Enum) > 0 {
				arms = append(arms, arm{[]string{e.path + " " + strconv.Itoa(i)}, a.Enum})
			}
		}
	}
	return arms
}

// takingArgs lists the paths of the commands that take arguments, where
// a shell offers file names once nothing else fits.
func (t tables) takingArgs() []string {
	var paths []string
	for _, e := range t.entries {
		if len(e.cmd.Args) > 0 {
			paths = append(paths, e.path)
		}
	}
	return paths
}

func spellings(f Flag) []string {
	s := []string{"--" + f.Name}
	if f.Short != "" {
		s = append(s, "-"+f.Short)
	}
	return s
}

// described is a candidate as zsh's _describe takes it, NAME:SUMMARY; bash
// cuts the summary off.
func described(name, help string) string {
	if s := Summary(help); s != "" {
		return name + ":" + s
	}
	return name
}

// sortedUnique sorts keys and drops repeats, for a case arm's patterns.
func sortedUnique(keys []string) []string {
	sort.Strings(keys)
	out := keys[:0]
	for i, k := range keys {
		if i == 0 || k != keys[i-1] {
			out = append(out, k)
		}
	}
	return out
}

// header is the script's first comment.
func (t tables) header(shell string) string {
	return fmt.Sprintf("# %s completion for %s, written by `%s completion %s` from its command model.\n",
		shell, t.prog, t.prog, shell)
}
