package complete

import (
	"fmt"
	"strconv"
	"strings"
)

// fish is the fish script: complete commands whose conditions ask
// __ferry_at which command the words before the cursor name.
func (t tables) fish() string {
	var b strings.Builder
	b.WriteString(t.header("fish"))
	fmt.Fprintf(&b, "# Install it as ~/.config/fish/completions/%s.fish, or: %s completion fish | source\n", t.prog, t.prog)
	fishLookup(&b, t.fn+"_child", "the path WORD leads to from PATH, when it is a subcommand there", "path word", `"$path $word"`, t.children())
	fishTest(&b, t.fn+"_valued", "whether FLAG takes a value at PATH: the word after it is no command", "path flag", `"$path $flag"`, t.valued())
	r := strings.NewReplacer("__PROG__", t.prog, "__FN__", t.fn)
	b.WriteString(r.Replace(fishDriver))
	fmt.Fprintf(&b, "\ncomplete -c %s -e\n", t.prog)
	for _, e := range t.entries {
		t.fishCommand(&b, e)
	}
	return b.String()
}

// fishDriver: __FN___state reads the words before the cursor as ferry does
// and prints the command they name and how many arguments follow it; the
// conditions of the complete commands ask __FN___at.
const fishDriver = `
function __FN___state --description 'print the command the words before the cursor name, and the number of its arguments'
    set -l cmd __PROG__
    set -l nargs 0
    set -l words (commandline -opc)
    set -l i 2
    set -l next
    while test $i -le (count $words)
        set -l w $words[$i]
        switch $w
            case --
                # The words after it are another command's.
                return 1
            case '-*=*'
            case '-*'
                if __FN___valued "$cmd" $w
                    set i (math $i + 1)
                end
            case '*'
                if set next (__FN___child "$cmd" $w)
                    set cmd $next
                    set nargs 0
                else
                    set nargs (math $nargs + 1)
                end
        end
        set i (math $i + 1)
    end
    printf '%s\n' $cmd $nargs
end

function __FN___at --argument-names cmd nargs --description 'whether the words before the cursor name command CMD (and NARGS arguments)'
    set -l state (__FN___state); or return 1
    test "$state[1]" = "$cmd"; or return 1
    test -z "$nargs"; or test "$state[2]" = "$nargs"
end
`

// fishCommand writes e's complete commands: subcommands, flags, argument
// values, and no file names where the command takes no arguments.
func (t tables) fishCommand(b *strings.Builder, e entry) {
	at := func(n string) string {
		if n == "" {
			return fishQuote(t.fn + "_at " + fishQuote(e.path))
		}
		return fishQuote(t.fn + "_at " + fishQuote(e.path) + " " + n)
	}
	fmt.Fprintf(b, "\n# %s\n", e.path)
	if len(e.cmd.Args) == 0 {
		fmt.Fprintf(b, "complete -c %s -n %s -f\n", t.prog, at(""))
	}
	for _, c := range e.cmd.Commands {
		for _, w := range append([]string{c.Name}, c.Aliases...) {
			fmt.Fprintf(b, "complete -c %s -n %s -f -a %s -d %s\n", t.prog, at("0"), fishQuote(w), fishQuote(Summary(c.Help)))
		}
	}
	for i, a := range e.cmd.Args {
		if len(a.Enum) > 0 {
			fmt.Fprintf(b, "complete -c %s -n %s -f -a %s\n", t.prog, at(strconv.Itoa(i)), fishQuote(strings.Join(a.Enum, " ")))
		}
	}
	for _, f := range e.cmd.Flags {
		line := fmt.Sprintf("complete -c %s -n %s -l %s", t.prog, at(""), fishQuote(f.Name))
		if f.Short != "" {
			line += " -s " + fishQuote(f.Short)
		}
		switch {
		case len(f.Enum) > 0:
			line += " -x -a " + fishQuote(strings.Join(f.Enum, " "))
		case f.Value:
			line += " -r"
		}
		fmt.Fprintf(b, "%s -d %s\n", line, fishQuote(Summary(f.Help)))
	}
}

// fishLookup writes a function printing the lines of the arm subject
// matches (subject itself for an arm without lines), failing when none
// does.
func fishLookup(b *strings.Builder, name, doc, params, subject string, arms []arm) {
	fmt.Fprintf(b, "\nfunction %s --argument-names %s --description %s\n    switch %s\n", name, params, fishQuote(doc), subject)
	for _, a := range arms {
		fmt.Fprintf(b, "        case %s\n", fishPatterns(a.keys))
		if a.lines == nil {
			fmt.Fprintf(b, "            echo %s\n", subject)
		}
		for _, l := range a.lines {
			fmt.Fprintf(b, "            echo %s\n", fishQuote(l))
		}
	}
	b.WriteString("        case '*'\n            return 1\n    end\nend\n")
}

// fishTest writes a function that succeeds when subject is one of keys.
func fishTest(b *strings.Builder, name, doc, params, subject string, keys []string) {
	fmt.Fprintf(b, "\nfunction %s --argument-names %s --description %s\n    switch %s\n", name, params, fishQuote(doc), subject)
	if len(keys) > 0 {
		fmt.Fprintf(b, "        case %s\n            return 0\n", fishPatterns(sortedUnique(keys)))
	}
	b.WriteString("    end\n    return 1\nend\n")
}

// fishPatterns quotes keys as case patterns. Patterns are globs, but a
// command's path and a flag's name hold no * or ?.
func fishPatterns(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = fishQuote(k)
	}
	return strings.Join(q, " ")
}

// fishQuote quotes s for fish: inside single quotes only \ and ' are
// special.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
