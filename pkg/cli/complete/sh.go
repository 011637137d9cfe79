package complete

import (
	"fmt"
	"strings"
)

// bash and zsh share the lookups: case statements both parse alike.

// shLookups writes the functions the bash and zsh drivers call.
func (t tables) shLookups(b *strings.Builder) {
	shPrinter(b, t.fn+"_child", "PATH WORD prints the path WORD leads to from PATH, when it is a subcommand there (or an alias of one).", `"$1 $2"`, t.children(), "return 1")
	shPrinter(b, t.fn+"_commands", "PATH prints the subcommands of PATH, NAME:SUMMARY a line.", `"$1"`, t.commands(), "")
	shPrinter(b, t.fn+"_flags", "PATH prints the flags PATH takes, FLAG:SUMMARY a line.", `"$1"`, t.flags(), "")
	shPrinter(b, t.fn+"_values", "PATH FLAG prints the values FLAG takes at PATH, when its model lists them.", `"$1 $2"`, t.values(), "")
	shPrinter(b, t.fn+"_arg", "PATH N prints the values of PATH's Nth argument (from 0), when its model lists them.", `"$1 $2"`, t.args(), "")
	shTest(b, t.fn+"_valued", "PATH FLAG succeeds when FLAG takes a value at PATH: the word after it is no command.", `"$1 $2"`, t.valued())
	shTest(b, t.fn+"_takes_args", "PATH succeeds when PATH takes arguments: once nothing else fits, file names.", `"$1"`, t.takingArgs())
}

// shPrinter writes a function that prints the lines of the arm subject
// matches (subject itself for an arm without lines), else runs fallback.
func shPrinter(b *strings.Builder, name, doc, subject string, arms []arm, fallback string) {
	fmt.Fprintf(b, "\n# %s %s\n%s() {\n\tcase %s in\n", name, doc, name, subject)
	for _, a := range arms {
		fmt.Fprintf(b, "\t%s)\n", shPatterns(a.keys))
		if a.lines == nil {
			fmt.Fprintf(b, "\t\tprintf '%%s\\n' %s\n", subject)
		}
		for _, l := range a.lines {
			fmt.Fprintf(b, "\t\tprintf '%%s\\n' %s\n", shQuote(l))
		}
		b.WriteString("\t\t;;\n")
	}
	if fallback != "" {
		fmt.Fprintf(b, "\t*) %s ;;\n", fallback)
	}
	b.WriteString("\tesac\n}\n")
}

// shTest writes a function that succeeds when subject is one of keys.
func shTest(b *strings.Builder, name, doc, subject string, keys []string) {
	fmt.Fprintf(b, "\n# %s %s\n%s() {\n\tcase %s in\n", name, doc, name, subject)
	if len(keys) > 0 {
		fmt.Fprintf(b, "\t%s) return 0 ;;\n", shPatterns(sortedUnique(keys)))
	}
	b.WriteString("\tesac\n\treturn 1\n}\n")
}

// shPatterns joins keys into one case pattern, each quoted: a literal.
func shPatterns(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = shQuote(k)
	}
	return strings.Join(q, " | ")
}

// shQuote quotes s for bash and zsh alike.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// bash is the bash script. It needs no bash-completion package, and uses
// nothing bash 3.2 (macOS's) lacks, such as mapfile or compopt.
func (t tables) bash() string {
	var b strings.Builder
	b.WriteString(t.header("bash"))
	fmt.Fprintf(&b, "# Load it with: source <(%s completion bash)\n", t.prog)
	t.shLookups(&b)
	r := strings.NewReplacer("__PROG__", t.prog, "__FN__", t.fn, "__MAIN__", "_"+funcName(t.prog))
	b.WriteString(r.Replace(bashDriver))
	return b.String()
}

const bashDriver = `
# __MAIN__ completes the word at COMP_CWORD: it reads the words before it to
# find the command they name, then offers its subcommands, its flags, the
# values of a flag or argument, or (nothing fitting) file names.
__MAIN__() {
	local cur=${COMP_WORDS[COMP_CWORD]} end=$COMP_CWORD flag=
	# COMP_WORDBREAKS makes '=' a word of its own: --flag=VALUE is three.
	if [[ $cur == = ]]; then
		flag=${COMP_WORDS[COMP_CWORD-1]} cur= end=$((COMP_CWORD - 1))
	elif ((COMP_CWORD > 2)) && [[ ${COMP_WORDS[COMP_CWORD-1]} == = ]]; then
		flag=${COMP_WORDS[COMP_CWORD-2]} end=$((COMP_CWORD - 2))
	fi
	local cmd=__PROG__ nargs=0 i w next
	for ((i = 1; i < end; i++)); do
		w=${COMP_WORDS[i]}
		case $w in
		--) return 0 ;; # the words after it are another command's
		-*)
			if [[ ${COMP_WORDS[i+1]} == = ]]; then
				i=$((i + 2))
			elif __FN___valued "$cmd" "$w"; then
				if ((i + 1 == end)); then flag=$w; fi
				i=$((i + 1))
			fi
			;;
		*)
			if next=$(__FN___child "$cmd" "$w"); then
				cmd=$next nargs=0
			else
				nargs=$((nargs + 1))
			fi
			;;
		esac
	done
	local words= long=
	if [[ -n $flag ]]; then
		words=$(__FN___values "$cmd" "$flag")
	elif [[ $cur == -* ]]; then
		words=$(__FN___flags "$cmd")
	else
		if ((nargs == 0)); then words=$(__FN___commands "$cmd"); fi
		if [[ -z $words ]]; then words=$(__FN___arg "$cmd" "$nargs"); fi
		if [[ -z $words ]] && ! __FN___takes_args "$cmd"; then
			words=$(__FN___flags "$cmd") long=1
		fi
	fi
	local line names=
	while IFS= read -r line; do
		if [[ -n $line && ( -z $long || $line == --* ) ]]; then names="$names ${line%%:*}"; fi
	done <<<"$words"
	COMPREPLY=($(compgen -W "$names" -- "$cur"))
}

complete -o default -F __MAIN__ __PROG__
`
