package hook

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
// working tool.
//
// The files, as the tools document them (December 2026):
//
//   - Cursor: .cursor/worktrees.json at the project's root, read when Cursor
//     (Agents Window, editor, CLI) creates a worktree; its commands run in
//     the new worktree, ROOT_WORKTREE_PATH names the project's root. Keys
//     setup-worktree-unix (macOS and Linux) over setup-worktree (every
//     platform); a value is an array of commands or a string naming a
//     script file. No teardown. https://cursor.com/docs/configuration/worktrees
//   - Conductor: .conductor/settings.toml (project, committed),
//     .conductor/settings.local.toml (this checkout) or
//     ~/.conductor/settings.toml (user), [scripts] setup and archive,
//     strings run by zsh in the workspace (CONDUCTOR_WORKSPACE_PATH,
//     CONDUCTOR_ROOT_PATH); the older conductor.json ({"scripts": {"setup",
//     "archive"}}) is read only where no .conductor/settings.toml exists.
//     https://www.conductor.build/docs/reference/scripts,
//     https://www.conductor.build/docs/reference/conductor-json
//   - Codex (app, local environments): .codex/environments/environment.toml,
//     [setup] script (with [setup.linux] / [setup.darwin] overriding it on
//     those platforms) run in the new worktree, and [cleanup] script before
//     Codex deletes one. https://developers.openai.com/codex/app/local-environments

// The tools whose setup files Ferry installs in.
const (
	ToolCursor    = "cursor"
	ToolConductor = "conductor"
	ToolCodex     = "codex"
)

// SetupTools lists them, and the cloud tools (cloud.go), in the order
// help names them.
var SetupTools = []string{ToolCodex, ToolCursor, ToolConductor, ToolCodexCloud, ToolCursorCloud, ToolCopilot}

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

// SetupFile is the file tool's installer edits for scope, under project
// (the repository's top) or home.
func SetupFile(tool, scope, project, home string) (string, error) {
	bad := func(scopes string) error {
		return failure.New(failure.Usage, "use --scope "+scopes, "%s has no %s scope", tool, scope)
	}
	switch tool {
	case ToolCursor:
		if scope != ScopeProject {
			return "", bad(ScopeProject + " (Cursor reads .cursor/worktrees.json from the project only)")
		}
		return filepath.Join(project, ".cursor", "worktrees.json"), nil
	case ToolCursorCloud:
		if scope != ScopeProject {
			return "", bad(ScopeProject + " (Cursor's cloud agents read .cursor/environment.json from the project only)")
		}
		return CursorCloudFile(project), nil
	case ToolCopilot:
		if scope != ScopeProject {
			return "", bad(ScopeProject + " (Copilot reads .github/workflows/" + CopilotJob + ".yml from the repository only)")
		}
		return CopilotFile(project), nil
	case ToolCodexCloud:
		return "", failure.New(failure.Usage, "run `ferry hook codex-cloud print` and paste its scripts into the environment's settings",
			"Codex cloud keeps its setup in the environment's settings, not in a file Ferry can edit")
	case ToolCodex:
		if scope != ScopeProject {
			return "", bad(ScopeProject + " (Codex reads .codex/environments/ from the project only)")
		}
		return filepath.Join(project, ".codex", "environments", "environment.toml"), nil
	case ToolConductor:
		switch scope {
		case ScopeProject:
			toml := filepath.Join(project, ".conductor", "settings.toml")
			legacy := filepath.Join(project, "conductor.json")
			if _, err := os.Stat(toml); errors.Is(err, fs.ErrNotExist) {
				if _, err := os.Stat(legacy); err == nil {
					return legacy, nil
				}
			}
			return toml, nil
		case ScopeLocal:
			return filepath.Join(project, ".conductor", "settings.local.toml"), nil
		case ScopeUser:
			return filepath.Join(home, ".conductor", "settings.toml"), nil
		}
		return "", bad(ScopeProject + ", " + ScopeLocal + " or " + ScopeUser)
	}
	return "", failure.New(failure.Usage, "name one of: claude-code, git, "+strings.Join(SetupTools, ", "),
		"unknown agent tool %q", tool)
}

// InstallSetup merges tool's setup (and teardown) lines, running ferry,
// into path (SetupFile).
func InstallSetup(tool, path, ferry string) (*Edit, error) {
	return editSetup(tool, path, ferry, true)
}

// UninstallSetup takes Ferry's lines for tool out of path.
func UninstallSetup(tool, path string) (*Edit, error) {
	return editSetup(tool, path, "", false)
}

func editSetup(tool, path, ferry string, install bool) (*Edit, error) {
	switch {
	case tool == ToolCursor:
		return edit(path, func(d *docedit.Doc, e *Edit) error { return cursorEdit(d, e, ferry, install) })
	case tool == ToolCursorCloud:
		return edit(path, func(d *docedit.Doc, e *Edit) error { return cursorCloudEdit(d, e, ferry, install) })
	case tool == ToolCopilot && !install:
		return editText(path, func(doc []byte, e *Edit) ([]byte, error) { return copilotEdit(doc, e, "", false) })
	case tool == ToolCopilot:
		return nil, failure.New(failure.Usage, "install Copilot's workflow with hook.InstallCopilot, which takes the version to install", "no setup line for %s", tool)
	case tool == ToolConductor && filepath.Base(path) == "conductor.json":
		return edit(path, func(d *docedit.Doc, e *Edit) error { return conductorJSONEdit(d, e, ferry, install) })
	case tool == ToolConductor:
		return editText(path, func(doc []byte, e *Edit) ([]byte, error) {
			return scriptEdits(doc, e, tool, ferry, install, []scriptKey{{"scripts", "setup", false}, {"scripts", "archive", true}})
		})
	case tool == ToolCodex:
		return editText(path, func(doc []byte, e *Edit) ([]byte, error) {
			if len(bytes.TrimSpace(doc)) == 0 && install {
				doc = []byte("# Codex local environment; Ferry's lines adopt each new worktree (ferry hook codex install)\nversion = 1\nname = " +
					docedit.TOMLBasic(filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(path))))) + "\n")
			}
			keys := []scriptKey{{"setup", "script", false}, {"cleanup", "script", true}}
			for _, platform := range []string{"linux", "darwin"} {
				for _, k := range []scriptKey{{"setup." + platform, "script", false}, {"cleanup." + platform, "script", true}} {
					if _, ok, _ := docedit.TOMLString(doc, k.table, k.key); ok {
						keys = append(keys, k)
					}
				}
			}
			return scriptEdits(doc, e, tool, ferry, install, keys)
		})
	}
	_, err := SetupFile(tool, ScopeProject, "", "")
	return nil, err
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

// cursorEdit puts Ferry's setup line in the commands Cursor runs on this
// platform: setup-worktree-unix when the file has it, else setup-worktree.
func cursorEdit(d *docedit.Doc, e *Edit, ferry string, install bool) error {
	keys := []string{"setup-worktree-unix", "setup-worktree"}
	if !install {
		for _, k := range keys {
			list := d.Root().Get(k)
			if list == nil || !list.IsArray() {
				continue
			}
			removed := false
			for i := list.Len() - 1; i >= 0; i-- {
				if s, ok := list.At(i).Str(); ok && ourLine(s, ToolCursor) {
					list.Remove(i)
					removed = true
				}
			}
			if removed {
				if list.Len() == 0 {
					d.Root().RemoveKey(k)
				}
				e.Removed = append(e.Removed, k)
			}
		}
		return nil
	}
	key := keys[1]
	if d.Root().Get(keys[0]) != nil {
		key = keys[0]
	}
	line := SetupLine(ferry, ToolCursor)
	list := d.Root().Get(key)
	switch {
	case list == nil:
		d.Root().Add(key, docedit.Array(docedit.String(line)))
		e.Added = append(e.Added, key)
		return nil
	case list.IsString():
		script, _ := list.Str()
		return failure.New(failure.Refused,
			fmt.Sprintf("add this line to the script %s names (%s): %s", key, script, line),
			"%s: %s names a script file, which Ferry does not edit", e.Path, key)
	case !list.IsArray():
		return notEditable(e.Path, key+" is neither a list of commands nor a script path")
	}
	for i := range list.Len() {
		m := list.At(i)
		if s, ok := m.Str(); ok && ourLine(s, ToolCursor) {
			if s == line {
				return nil
			}
			m.SetString(line)
			e.Updated = append(e.Updated, key)
			return nil
		}
	}
	list.Push(docedit.String(line))
	e.Updated = append(e.Updated, key)
	return nil
}

// conductorJSONEdit edits the older conductor.json: scripts.setup and
// scripts.archive are strings.
func conductorJSONEdit(d *docedit.Doc, e *Edit, ferry string, install bool) error {
	scripts := d.Root().Get("scripts")
	if scripts == nil {
		if !install {
			return nil
		}
		scripts = docedit.Object()
		d.Root().Add("scripts", scripts)
	}
	if !scripts.IsObject() {
		return notEditable(e.Path, `"scripts" is not an object`)
	}
	for _, k := range []struct {
		key  string
		line string
	}{{"setup", SetupLine(ferry, ToolConductor)}, {"archive", TeardownLine(ferry)}} {
		v := scripts.Get(k.key)
		old := ""
		if v != nil {
			s, ok := v.Str()
			if !ok {
				return notEditable(e.Path, "scripts."+k.key+" is not a string")
			}
			old = s
		} else if !install {
			continue
		}
		want := without(old, ToolConductor)
		if install {
			want = withLine(old, k.line, ToolConductor)
		}
		want = strings.TrimSuffix(want, "\n")
		if v != nil && want == strings.TrimSuffix(old, "\n") {
			continue
		}
		if v == nil {
			scripts.Add(k.key, docedit.String(want))
		} else {
			v.SetString(want)
		}
		note(e, install, v != nil, "scripts."+k.key)
	}
	return nil
}

// editText is edit for a file Ferry edits as text (TOML).
func editText(path string, change func([]byte, *Edit) ([]byte, error)) (*Edit, error) {
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
