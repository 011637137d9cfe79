package complete

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

type testGrammar struct {
	Verbose bool `short:"v" help:"Say more."`
	Color   bool `negatable:"" help:"Colour the output."`
	Quiet   bool `hidden:"" help:"Not for people."`
	Build   struct {
		Rev  string `help:"Revision to build. More words." placeholder:"R"`
		Mode string `help:"How." enum:",fast,slow" default:""`
	} `cmd:"" default:"withargs" aliases:"b" help:"Build it."`
	List struct {
		Format string   `help:"Format." enum:"text,json" default:"text"`
		Names  []string `arg:"" optional:"" help:"Names."`
	} `cmd:"" aliases:"ls" help:"List them."`
	Pick struct {
		Which string `arg:"" enum:"one,two" help:"Which."`
	} `cmd:"" help:"Pick one."`
	Secret struct{} `cmd:"" hidden:"" help:"Not for people."`
}

func names(flags []Flag) []string {
	var out []string
	for _, f := range flags {
		out = append(out, f.Name)
	}
	return out
}

func TestOfReadsTheModel(t *testing.T) {
	root, err := Of(&testGrammar{})
	if err != nil {
		t.Fatal(err)
	}
	// The root takes its own flags and, build being its default, build's;
	// the hidden one is left out, the negatable one comes with its negation.
	if got, want := names(root.Flags), []string{"help", "verbose", "color", "no-color", "rev", "mode"}; !reflect.DeepEqual(got, want) {
		t.Errorf("root flags = %v, want %v", got, want)
	}
	var cmds []string
	for _, c := range root.Commands {
		cmds = append(cmds, c.Name)
	}
	if want := []string{"build", "list", "pick"}; !reflect.DeepEqual(cmds, want) {
		t.Fatalf("commands = %v, want %v (the hidden one left out)", cmds, want)
	}
	build, list, pick := root.Commands[0], root.Commands[1], root.Commands[2]
	if !reflect.DeepEqual(build.Aliases, []string{"b"}) || build.Help != "Build it." {
		t.Errorf("build = %+v", build)
	}
	// A subcommand takes its ancestors' flags too, not its default sibling's.
	if got, want := names(list.Flags), []string{"help", "verbose", "color", "no-color", "format"}; !reflect.DeepEqual(got, want) {
		t.Errorf("list flags = %v, want %v", got, want)
	}
	f := root.Flags[0]
	if f.Name != "help" || f.Short != "h" || f.Value {
		t.Errorf("help flag = %+v", f)
	}
	if v := root.Flags[1]; v.Short != "v" || v.Value {
		t.Errorf("verbose flag = %+v", v)
	}
	rev := root.Flags[4]
	if !rev.Value || rev.Enum != nil {
		t.Errorf("rev flag = %+v", rev)
	}
	// The empty value of an enum is nothing to complete.
	if mode := root.Flags[5]; !reflect.DeepEqual(mode.Enum, []string{"fast", "slow"}) {
		t.Errorf("mode enum = %v", mode.Enum)
	}
	if len(list.Args) != 1 || list.Args[0].Name != "names" || list.Args[0].Enum != nil {
		t.Errorf("list args = %+v", list.Args)
	}
	if len(pick.Args) != 1 || !reflect.DeepEqual(pick.Args[0].Enum, []string{"one", "two"}) {
		t.Errorf("pick args = %+v", pick.Args)
	}
}

// The model crosses a process boundary as JSON, whole.
func TestCommandRoundTripsJSON(t *testing.T) {
	root, err := Of(&testGrammar{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	var back Command
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, root) {
		t.Errorf("round trip changed the model:\n%+v\n%+v", root, back)
	}
}

func TestScriptHoldsEveryCommandAndFlag(t *testing.T) {
	root, err := Of(&testGrammar{})
	if err != nil {
		t.Fatal(err)
	}
	root.Name = "prog"
	for _, shell := range Shells {
		s, ok := Script(shell, root)
		if !ok {
			t.Fatalf("no script for %s", shell)
		}
		for _, want := range []string{"'prog build'", "'prog b'", "'prog list'", "'prog pick'", "no-color", "slow", "two"} {
			if !strings.Contains(s, want) {
				t.Errorf("%s script lacks %s", shell, want)
			}
		}
		if strings.Contains(s, "secret") || strings.Contains(s, "quiet") {
			t.Errorf("%s script holds a hidden command or flag", shell)
		}
	}
	if _, ok := Script("tcsh", root); ok {
		t.Error("a script for tcsh")
	}
}

func TestSummary(t *testing.T) {
	for in, want := range map[string]string{
		"":                          "",
		"Print it.":                 "Print it",
		"Print it. Then more.":      "Print it",
		"Two\nlines  here":          "Two lines here",
		strings.Repeat("word ", 30): strings.TrimSpace(strings.Repeat("word ", 16)) + "…",
	} {
		if got := Summary(in); got != want {
			t.Errorf("Summary(%q) = %q, want %q", in, got, want)
		}
	}
}

// An alias leads where its command's name does: `prog ls --` completes
// list's flags.
func TestAliasLeadsToItsCommand(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	root, err := Of(&testGrammar{})
	if err != nil {
		t.Fatal(err)
	}
	root.Name = "prog"
	s, _ := Script("bash", root)
	path := filepath.Join(t.TempDir(), "prog.bash")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bash, "--norc", "--noprofile", "-c",
		`source "$1" && COMP_WORDS=(prog ls --) COMP_CWORD=2 && _prog && printf '%s\n' "${COMPREPLY[@]}"`, "bash", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(out)); !slices.Contains(got, "--format") || slices.Contains(got, "--rev") {
		t.Errorf("prog ls -- offers %q, want list's flags", got)
	}
}
