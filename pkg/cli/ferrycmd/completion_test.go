package ferrycmd

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/cli/basecmd"
	"github.com/ferrydev/ferry/pkg/cli/complete"
	"github.com/ferrydev/ferry/pkg/cli/gccmd"
	"github.com/ferrydev/ferry/pkg/cli/spawncmd"
	"github.com/ferrydev/ferry/pkg/cli/watchcmd"
)

// stageMains are the stage binaries' commands. The test binary serves as
// each of them when run under its name (stagesOnPath links it so), before
// the test framework starts: ferry completion asks the stages for their
// models by running them, as it runs the real binaries.
var stageMains = map[string]func(string, []string, cli.IO) int{
	"ferry-base":  basecmd.Main,
	"ferry-spawn": spawncmd.Main,
	"ferry-gc":    gccmd.Main,
	"ferry-watch": watchcmd.Main,
}

func init() {
	if m, ok := stageMains[filepath.Base(os.Args[0])]; ok {
		os.Exit(m(cli.Name(os.Args[0]), os.Args[1:], cli.StdIO()))
	}
}

// stagesOnPath puts the stages (this test binary under their names) first
// on PATH.
func stagesOnPath(t *testing.T) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name := range stageMains {
		if err := os.Symlink(self, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// script is ferry's completion script for shell, written to a file.
func script(t *testing.T, shell string) string {
	t.Helper()
	stagesOnPath(t)
	out, errOut, code := front(t, "completion", shell)
	if code != 0 || errOut != "" {
		t.Fatalf("ferry completion %s: exit %d\n%s", shell, code, errOut)
	}
	path := filepath.Join(t.TempDir(), "ferry."+shell)
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// needShell returns the path of shell; without it the test skips, or
// fails under make test (FERRY_TEST_REQUIRE=1), where script/bootstrap has
// installed it.
func needShell(t *testing.T, shell string) string {
	t.Helper()
	path, err := exec.LookPath(shell)
	if err == nil {
		return path
	}
	msg := shell + " is not installed (script/bootstrap installs it): its completion script is not tried"
	if os.Getenv(knobs.Require) == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// run runs a shell and returns its stdout, failing the test when it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %q: %v\nstdout:\n%s\nstderr:\n%s", name, args, err, out, stderr.String())
	}
	return string(out)
}

// A completion case: the command line up to the cursor, and candidates it
// must and must not offer.
type completionCase struct {
	line      string
	want, not []string
}

// completionCases hold in every shell.
var completionCases = []completionCase{
	{"ferry ", []string{"spawn", "base", "completion", "hook", "run", "gc", "watch"}, nil},
	{"ferry s", []string{"spawn", "setup", "shell", "stats"}, []string{"base"}},
	{"ferry completion ", []string{"bash", "zsh", "fish"}, nil},
	{"ferry spawn --", []string{"--json", "--from", "--backend", "--wait"}, []string{"--rev", "--version"}},
	{"ferry base ", []string{"build", "list", "verify"}, nil},
	{"ferry base --", []string{"--rev", "--pull", "--publish", "--json"}, nil},
	{"ferry base list --", []string{"--json", "--help"}, []string{"--rev"}},
	{"ferry base --rev main ver", []string{"verify"}, nil},
	{"ferry hook ", []string{"claude-code", "git", "codex", "cursor", "conductor", "codex-cloud", "cursor-cloud", "copilot"}, nil},
	{"ferry hook copilot ", []string{"install", "uninstall"}, nil},
	{"ferry hook claude-code ", []string{"WorktreeCreate", "install", "uninstall"}, nil},
	{"ferry hook claude-code install --scope ", []string{"local", "project", "user"}, nil},
	{"ferry hook codex install --scope p", []string{"project"}, []string{"local"}},
	{"ferry setup ", []string{"apparmor"}, nil},
	{"ferry -", []string{"--help", "--version"}, nil},
}

func checkCandidates(t *testing.T, shell string, c completionCase, got []string) {
	t.Helper()
	for _, w := range c.want {
		if !slices.Contains(got, w) {
			t.Errorf("%s: %q offers %q, not %q", shell, c.line, got, w)
		}
	}
	for _, w := range c.not {
		if slices.Contains(got, w) {
			t.Errorf("%s: %q offers %q, which it takes not there", shell, c.line, w)
		}
	}
}

// bashComplete sources script in bash and calls the function it registers
// for ferry with the words of line, as bash does at Tab, returning
// COMPREPLY. words ends with the word being completed.
func bashComplete(t *testing.T, bash, script string, words []string) []string {
	t.Helper()
	prog := `source "$1" || exit 1
shift
fn=$(complete -p ferry) || exit 1
fn=${fn##*-F } fn=${fn%% *}
COMP_WORDS=("$@")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMP_LINE="$*" COMP_POINT=${#COMP_LINE}
"$fn" ferry "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"`
	return strings.Fields(run(t, bash, append([]string{"--norc", "--noprofile", "-c", prog, "bash", script}, words...)...))
}

// lineWords splits a command line as the shell does: the last word is the
// one being completed, empty after a space.
func lineWords(line string) []string {
	words := strings.Fields(line)
	if strings.HasSuffix(line, " ") {
		words = append(words, "")
	}
	return words
}

func TestCompletionBash(t *testing.T) {
	bash := needShell(t, "bash")
	s := script(t, "bash")
	for _, c := range completionCases {
		checkCandidates(t, "bash", c, bashComplete(t, bash, s, lineWords(c.line)))
	}
	// bash splits --flag=VALUE at '=' (COMP_WORDBREAKS): the words are
	// --flag, = and VALUE.
	for _, c := range []struct {
		words     []string
		want, not []string
	}{
		{[]string{"ferry", "hook", "claude-code", "install", "--scope", "="}, []string{"local", "project", "user"}, nil},
		{[]string{"ferry", "hook", "claude-code", "install", "--scope", "=", "pro"}, []string{"project"}, []string{"local"}},
		{[]string{"ferry", "hook", "claude-code", "install", "--scope", "=", "local", "--"}, []string{"--worktrees", "--json"}, nil},
	} {
		checkCandidates(t, "bash", completionCase{strings.Join(c.words, " "), c.want, c.not}, bashComplete(t, bash, s, c.words))
	}
}

// fishComplete asks fish, with script sourced, what it completes line with.
func fishComplete(t *testing.T, fish, script, line string) []string {
	t.Helper()
	out := run(t, fish, "--no-config", "-c", `source $argv[1]; or exit 1; complete -C $argv[2]`, script, line)
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		cand, _, _ := strings.Cut(l, "\t")
		got = append(got, cand)
	}
	return got
}

func TestCompletionFish(t *testing.T) {
	fish := needShell(t, "fish")
	s := script(t, "fish")
	for _, c := range completionCases {
		checkCandidates(t, "fish", c, fishComplete(t, fish, s, c.line))
	}
	checkCandidates(t, "fish", completionCase{line: "ferry hook claude-code install --scope=", want: []string{"--scope=local", "--scope=user"}},
		fishComplete(t, fish, s, "ferry hook claude-code install --scope="))
	// Where a command takes no argument, no file names.
	if got := fishComplete(t, fish, s, "ferry base "); slices.Contains(got, "completion_test.go") {
		t.Errorf("fish: `ferry base ` offers file names: %q", got)
	}
}

// zshCapture runs an interactive zsh in a pseudo-terminal (zsh's zpty
// module), with compinit and ferry's script installed as _ferry on fpath,
// types line and Tab, and prints every match the completion system adds,
// after its own matching against the word at the cursor. Its compadd
// wraps the builtin to print them; comppostfuncs ends the shell after the
// one completion.
const zshCapture = `
zmodload zsh/zpty || exit 3
zpty z env ZDOTDIR=$1 HOME=$1 TERM=dumb zsh -i
zpty -r z out '*READY:*' || exit 4
zpty -w -n z "$2"$'\t'
local all=
while zpty -r z out; do
	all+=$out
	[[ $all == *DONE:* ]] && break
done
zpty -d z
print -r -- $all
`

const zshRC = `
PS1='> '
fpath=($ZDOTDIR/functions $fpath)
autoload -U compinit && compinit -u -D
bindkey '^I' complete-word
compadd() {
	if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then
		builtin compadd "$@"
		return
	fi
	local -a hits
	builtin compadd -O hits "$@"
	local h
	for h in $hits; do print -r -- "HIT:$h"; done
	builtin compadd "$@"
}
__done() { print -r -- 'DONE:'; exit }
comppostfuncs=(__done)
print -r -- 'READY:'
`

var zshHit = regexp.MustCompile(`HIT:([^\r\n]*)`)

// zshHome installs script as _ferry on the fpath of a zsh whose ZDOTDIR is
// the directory returned.
func zshHome(t *testing.T, script string) string {
	t.Helper()
	home := t.TempDir()
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(home, "functions"), 0o755)
	for name, content := range map[string]string{"functions/_ferry": string(b), ".zshrc": zshRC, "capture.zsh": zshCapture} {
		if err := os.WriteFile(filepath.Join(home, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

func zshComplete(t *testing.T, zsh, home, line string) []string {
	t.Helper()
	out := run(t, zsh, "-f", filepath.Join(home, "capture.zsh"), home, line)
	if !strings.Contains(out, "DONE:") {
		t.Fatalf("zsh: completing %q did not finish:\n%s", line, out)
	}
	var got []string
	for _, m := range zshHit.FindAllStringSubmatch(out, -1) {
		got = append(got, m[1])
	}
	return got
}

func TestCompletionZsh(t *testing.T) {
	zsh := needShell(t, "zsh")
	s := script(t, "zsh")
	run(t, zsh, "-n", s)
	// Sourced after compinit, the script registers itself; on fpath,
	// compinit finds it by its #compdef line.
	if got := run(t, zsh, "-f", "-c", `autoload -U compinit && compinit -u -D && source $1 && print -r -- $_comps[ferry]`, "zsh", s); strings.TrimSpace(got) != "_ferry" {
		t.Errorf("sourced after compinit: $_comps[ferry] = %q, want _ferry", got)
	}
	home := zshHome(t, s)
	if got := run(t, zsh, "-f", "-c", `fpath=($1/functions $fpath); autoload -U compinit && compinit -u -D && print -r -- $_comps[ferry]`, "zsh", home); strings.TrimSpace(got) != "_ferry" {
		t.Errorf("on fpath: $_comps[ferry] = %q, want _ferry", got)
	}
	for _, c := range completionCases {
		checkCandidates(t, "zsh", c, zshComplete(t, zsh, home, c.line))
	}
	checkCandidates(t, "zsh", completionCase{line: "ferry hook claude-code install --scope=", want: []string{"local", "project", "user"}},
		zshComplete(t, zsh, home, "ferry hook claude-code install --scope="))
}

// Every command the models hold is in every script: the front's own
// commands' straight from kong's model of their grammars, the stages'
// from what their binaries answer.
func TestCompletionScriptsHoldEveryCommand(t *testing.T) {
	stagesOnPath(t)
	var paths []string
	for _, c := range commands() {
		if c.stage {
			continue
		}
		paths = append(paths, "ferry "+c.name)
		if c.grammar != nil {
			parser, err := kong.New(c.grammar())
			if err != nil {
				t.Fatal(err)
			}
			paths = append(paths, kongPaths("ferry "+c.name, parser.Model.Node)...)
		}
	}
	for _, c := range commands() {
		if !c.stage {
			continue
		}
		name := c.name
		out, err := exec.Command("ferry-"+name, complete.ModelFlag).Output()
		if err != nil {
			t.Fatalf("ferry-%s %s: %v", name, complete.ModelFlag, err)
		}
		var m complete.Command
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, modelPaths("ferry "+name, m)...)
	}
	if len(paths) < 40 {
		t.Fatalf("only %d commands in the models: %q", len(paths), paths)
	}
	for _, shell := range complete.Shells {
		out, errOut, code := front(t, "completion", shell)
		if code != 0 || errOut != "" {
			t.Fatalf("ferry completion %s: exit %d\n%s", shell, code, errOut)
		}
		for _, p := range paths {
			if !strings.Contains(out, "'"+p+"'") {
				t.Errorf("the %s script lacks `%s`", shell, p)
			}
		}
	}
}

func kongPaths(path string, n *kong.Node) []string {
	var out []string
	for _, c := range n.Children {
		if !c.Hidden && c.Type == kong.CommandNode {
			out = append(out, path+" "+c.Name)
			out = append(out, kongPaths(path+" "+c.Name, c)...)
		}
	}
	return out
}

func modelPaths(path string, m complete.Command) []string {
	out := []string{path}
	for _, c := range m.Commands {
		out = append(out, modelPaths(path+" "+c.Name, c)...)
	}
	return out
}

// Every command in the table runs: a stage runs its binary and parses
// its own arguments; the front's own commands run a function and have a
// grammar (run, which reads its arguments itself, aside). Every command
// has a model; completion's shells are the ones there are scripts for.
func TestCompletionModelCoversTheFront(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range commands() {
		if seen[c.name] {
			t.Errorf("ferry %s is in the table twice", c.name)
		}
		seen[c.name] = true
		switch {
		case c.help == "":
			t.Errorf("ferry %s has no line in --help", c.name)
		case c.stage && (c.run != nil || c.grammar != nil):
			t.Errorf("stage %s runs its binary: no run function or grammar of its own", c.name)
		case !c.stage && c.run == nil:
			t.Errorf("ferry %s runs nothing", c.name)
		case !c.stage && c.grammar == nil && c.name != "run":
			t.Errorf("ferry %s has no grammar for completion", c.name)
		}
	}
	stagesOnPath(t)
	var errOut strings.Builder
	root := frontModel(cli.IO{Stdout: &errOut, Stderr: &errOut})
	if errOut.Len() > 0 {
		t.Fatalf("frontModel: %s", errOut.String())
	}
	for _, c := range root.Commands {
		if cmd, _ := lookup(c.Name); cmd.stage && !slices.ContainsFunc(c.Flags, func(f complete.Flag) bool { return f.Name == "json" }) {
			t.Errorf("ferry %s: no --json in the model its binary gave: %+v", c.Name, c.Flags)
		}
		if c.Name == "completion" && !slices.Equal(c.Args[0].Enum, complete.Shells) {
			t.Errorf("completion's <shell> enum %q is not complete.Shells %q", c.Args[0].Enum, complete.Shells)
		}
	}
	if len(root.Commands) != len(commands()) {
		t.Errorf("the model has %d commands, the front %d", len(root.Commands), len(commands()))
	}
}

// A stage that cannot tell its model (not found, or too old to know the
// flag) is completed by name, and stderr says why.
func TestCompletionWithoutStages(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	out, errOut, code := front(t, "completion", "bash")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	if !strings.Contains(errOut, "completing `ferry base` without its flags") || !strings.Contains(errOut, "ferry-base not found") {
		t.Errorf("stderr does not say why ferry base has no flags:\n%s", errOut)
	}
	if !strings.Contains(out, "'ferry base'") || !strings.Contains(out, "'ferry hook claude-code'") {
		t.Errorf("the script lacks commands:\n%s", out)
	}
}

func TestCompletionJSON(t *testing.T) {
	stagesOnPath(t)
	out, errOut, code := front(t, "completion", "fish", "--json")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var a struct{ Shell, Script string }
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if a.Shell != "fish" || !strings.Contains(a.Script, "complete -c ferry") {
		t.Errorf("got shell %q, script:\n%s", a.Shell, a.Script)
	}
}

func TestCompletionUnknownShell(t *testing.T) {
	for _, args := range [][]string{{"completion", "tcsh"}, {"completion", "--json", "powershell"}} {
		out, errOut, code := front(t, args...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage)", args, code)
		}
		if !strings.Contains(errOut, "hint: name one of bash, zsh, fish") {
			t.Errorf("%q: the hint does not list the shells:\n%s", args, errOut)
		}
		if json := slices.Contains(args, "--json"); json != strings.Contains(out, `"kind": "usage"`) {
			t.Errorf("%q: stdout:\n%s", args, out)
		}
	}
}
