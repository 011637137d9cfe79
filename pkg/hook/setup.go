package hook

import (
	"bytes"
	"strings"

	"github.com/ferrydev/ferry/pkg/docedit"
	"github.com/ferrydev/ferry/pkg/failure"
)

// Setup scripts: agent tools that make their worktrees with `git worktree
// add` and then run a setup script of the repository's get a line in that
// script that runs `ferry adopt --cold-ok` in the new worktree, and, where
// the tool runs one, a line in its teardown that releases the agent
// (`ferry rm --if-agent`). Each installer merges its lines into the
// tool's documented file, keeping every other byte, idempotently, and
// uninstalling takes out exactly its lines. The lines run ferry only
// where it is installed (`command -v`), and never fail the script, so a
// teammate without Ferry, or a host where Ferry cannot help, keeps a
// working tool. Each tool's file, as the tool documents it, is described
// where the tool is (tools.go lists them).

// localInstalled is what installing a local tool's lines tells a person.
func localInstalled(tool string) string {
	return "each worktree " + tool + " makes from now on runs `ferry adopt --cold-ok`; cargo builds through Ferry where its shim is first on PATH (ferry doctor says whether it is)"
}

// SetupLine is the line a tool's setup runs: adopt the working
// directory's worktree for tool, cold when it cannot be warm.
func SetupLine(ferry, tool string) string {
	f := shellWord(ferry)
	return "if command -v " + f + " >/dev/null 2>&1; then " + f + " adopt --cold-ok --tool " + tool + " || true; fi"
}

// TeardownLine is the line a tool's teardown runs: release the agent of
// the working directory's worktree, if it is one.
func TeardownLine(ferry string) string {
	f := shellWord(ferry)
	return "if command -v " + f + " >/dev/null 2>&1; then " + f + " rm --if-agent || true; fi"
}

// ourLine reports whether line is one of Ferry's setup or teardown lines
// for tool (whatever ferry it runs).
func ourLine(line, tool string) bool {
	return strings.Contains(line, " adopt --cold-ok --tool "+tool+" ") || strings.Contains(line, " rm --if-agent ")
}

// scriptKey is a TOML string that is a shell script.
type scriptKey struct {
	table, key string
	teardown   bool
}

func (k scriptKey) String() string { return k.table + "." + k.key }

// withLine is script with line appended (or the line of another ferry
// replaced by it); without is script without Ferry's lines for tool.
func withLine(script, line, tool string) string {
	var out []string
	done := false
	for _, l := range splitLines(script) {
		if ourLine(l, tool) && strings.Contains(l, lineKind(line)) {
			if !done {
				out = append(out, line)
				done = true
			}
			continue
		}
		out = append(out, l)
	}
	if !done {
		out = append(out, line)
	}
	return strings.Join(out, "\n") + "\n"
}

func without(script, tool string) string {
	var out []string
	for _, l := range splitLines(script) {
		if !ourLine(l, tool) {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return strings.Join(out, "\n") + "\n"
}

// lineKind tells a setup line from a teardown line.
func lineKind(line string) string {
	if strings.Contains(line, " rm --if-agent ") {
		return " rm --if-agent "
	}
	return " adopt --cold-ok "
}

func splitLines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// scriptEdits applies Ferry's lines to each TOML script of keys.
func scriptEdits(doc []byte, e *Edit, tool, ferry string, install bool, keys []scriptKey) ([]byte, error) {
	for _, k := range keys {
		old, ok, err := docedit.TOMLString(doc, k.table, k.key)
		if err != nil {
			return nil, failure.Wrap(failure.Usage, err, "fix the file, then run this again", "%s cannot be read", e.Path)
		}
		var want string
		switch {
		case install && k.teardown:
			want = withLine(old, TeardownLine(ferry), tool)
		case install:
			want = withLine(old, SetupLine(ferry, tool), tool)
		case !ok:
			continue
		default:
			want = without(old, tool)
		}
		if ok && want == old {
			continue
		}
		if doc, err = docedit.SetTOMLString(doc, k.table, k.key, want); err != nil {
			return nil, notEditable(e.Path, err.Error())
		}
		note(e, install, ok, k.String())
	}
	return doc, nil
}

// note records that name was added, updated or had Ferry's lines removed.
func note(e *Edit, install, existed bool, name string) {
	switch {
	case !install:
		e.Removed = append(e.Removed, name)
	case existed:
		e.Updated = append(e.Updated, name)
	default:
		e.Added = append(e.Added, name)
	}
}

// EditText is EditJSON for a file Ferry edits as text (TOML, YAML): change
// returns the file's new bytes.
func EditText(path string, change func([]byte, *Edit) ([]byte, error)) (*Edit, error) {
	e, data, err := readForEdit(path)
	if err != nil {
		return nil, err
	}
	out, err := change(data, e)
	if err != nil {
		return nil, err
	}
	e.before, e.after = data, out
	e.Changed = !bytes.Equal(e.before, e.after)
	return e, nil
}
