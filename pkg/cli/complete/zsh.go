package complete

import (
	"fmt"
	"strings"
)

// zsh is the zsh script: a #compdef file for a directory on $fpath, which
// sourced after compinit registers itself instead.
func (t tables) zsh() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#compdef %s\n", t.prog)
	b.WriteString(t.header("zsh"))
	fmt.Fprintf(&b, "# Install it as _%s in a directory on $fpath, or source it after compinit.\n", t.prog)
	t.shLookups(&b)
	r := strings.NewReplacer("__PROG__", t.prog, "__FN__", t.fn, "__MAIN__", "_"+funcName(t.prog))
	b.WriteString(r.Replace(zshDriver))
	return b.String()
}

// zshDriver: autoloaded, the file is __MAIN__'s body, which defines the
// functions (__MAIN__ anew among them) and calls it; sourced, it registers
// __MAIN__ with compdef. (funcstack[1] is the function running, or the file
// being sourced.)
const zshDriver = `
# __MAIN__ completes the word at CURRENT: it reads the words before it to find
# the command they name, then offers its subcommands, its flags, the values
# of a flag or argument, or (nothing fitting) file names.
__MAIN__() {
	local cur=${words[CURRENT]} cmd=__PROG__ flag= next w
	local -a lines
	integer i nargs=0
	for ((i = 2; i < CURRENT; i++)); do
		w=${words[i]}
		case $w in
		--)
			# The words after it are a command of their own.
			shift $i words
			((CURRENT -= i))
			_normal
			return
			;;
		-*=*) ;;
		-*)
			if __FN___valued "$cmd" "$w"; then
				((i + 1 == CURRENT)) && flag=$w
				((i++))
			fi
			;;
		*)
			if next=$(__FN___child "$cmd" "$w"); then
				cmd=$next nargs=0
			else
				((nargs++))
			fi
			;;
		esac
	done
	if [[ -z $flag && $cur == -*=* ]]; then
		flag=${cur%%=*}
		compset -P '*='
	fi
	if [[ -n $flag ]]; then
		lines=(${(f)"$(__FN___values "$cmd" "$flag")"})
		if (($#lines)); then compadd -a lines; else _files; fi
		return
	fi
	if [[ $cur == -* ]]; then
		lines=(${(f)"$(__FN___flags "$cmd")"})
		_describe -t options option lines
		return
	fi
	((nargs == 0)) && lines=(${(f)"$(__FN___commands "$cmd")"})
	if (($#lines)); then
		_describe -t commands command lines
		return
	fi
	lines=(${(f)"$(__FN___arg "$cmd" $nargs)"})
	if (($#lines)); then
		compadd -a lines
	elif __FN___takes_args "$cmd"; then
		_files
	else
		lines=(${(M)${(f)"$(__FN___flags "$cmd")"}:#--*})
		_describe -t options option lines
	fi
}

if [[ ${funcstack[1]-} == __MAIN__ ]]; then
	__MAIN__ "$@"
elif (($+functions[compdef])); then
	compdef __MAIN__ __PROG__
else
	print -ru2 -- '__PROG__ completion: run "autoload -U compinit && compinit" before loading this script'
fi
`
