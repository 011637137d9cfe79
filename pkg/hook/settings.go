package hook

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/docedit"
	"github.com/ferrydev/ferry/pkg/failure"
)

// Scopes of Claude Code's settings files Ferry installs its hooks in.
const (
	ScopeLocal   = "local"   // <project>/.claude/settings.local.json: this checkout, not committed
	ScopeProject = "project" // <project>/.claude/settings.json: committed, shared with the team
	ScopeUser    = "user"    // ~/.claude/settings.json: every project of this user
)

// Scopes lists the scopes in the order `--help` names them.
var Scopes = []string{ScopeLocal, ScopeProject, ScopeUser}

// SettingsPath is the settings file of scope: under project (the
// project's top directory) for local and project, under configDir (Claude
// Code's configuration directory, ~/.claude unless CLAUDE_CONFIG_DIR says
// otherwise) for user.
func SettingsPath(scope, project, configDir string) (string, error) {
	switch scope {
	case ScopeLocal:
		return filepath.Join(project, ".claude", "settings.local.json"), nil
	case ScopeProject:
		return filepath.Join(project, ".claude", "settings.json"), nil
	case ScopeUser:
		return filepath.Join(configDir, "settings.json"), nil
	}
	return "", failure.New(failure.Usage, "use --scope "+strings.Join(Scopes, ", --scope "),
		"unknown settings scope %q", scope)
}

// Command is the command line Claude Code runs for event: ferry (an
// absolute path) with `hook claude-code EVENT`.
func Command(ferry, event string) string {
	return shellWord(ferry) + " hook " + Tool + " " + event
}

// worktreesFlag is what WorktreeCreate's command line adds to put the
// worktrees under the repository ([paths] worktrees = "repo", for this
// installation only).
const worktreesFlag = " --worktrees repo"

// commandFor is Command, with worktreesFlag on WorktreeCreate when inRepo.
func commandFor(ferry, event string, inRepo bool) string {
	if inRepo && event == EventWorktreeCreate {
		return Command(ferry, event) + worktreesFlag
	}
	return Command(ferry, event)
}

// timeouts are the seconds Claude Code gives each of Ferry's hooks:
// creating and removing an agent copies or deletes a target dir, which on
// the copy backend can take longer than a hook's default minute.
var timeouts = map[string]int{EventWorktreeCreate: 600, EventWorktreeRemove: 600}

// Edit is a change of one settings file, made in memory: Write puts it on
// disk.
type Edit struct {
	Path    string   `json:"path"`
	Command string   `json:"-"`
	Added   []string `json:"added"`   // events whose Ferry hook was added
	Updated []string `json:"updated"` // events whose Ferry hook now runs this ferry
	Removed []string `json:"removed"` // events whose Ferry hook was removed
	Changed bool     `json:"changed"`
	Existed bool     `json:"existed"` // the file was there before

	before, after []byte
	remove        bool // Write removes the file
	mode          fs.FileMode
	target        string // Path with symbolic links resolved: where the bytes go
}

// Content is the file as the edit leaves it.
func (e *Edit) Content() []byte { return e.after }

// Install adds Ferry's hooks (WorktreeCreate, WorktreeRemove,
// SessionStart, CwdChanged), running ferry, to the Claude Code settings
// file at path, keeping every other setting and hook as it is, byte for
// byte where the file does not change. A hook of Ferry's that runs another
// ferry binary (or puts worktrees elsewhere) is pointed at this one; one
// that already runs it is left alone, so installing twice changes nothing.
// inRepo has WorktreeCreate put worktrees under the repository's
// .claude/worktrees/, where every Claude Code accepts them.
func Install(path, ferry string, inRepo bool) (*Edit, error) {
	return InstallEvents(path, ferry, inRepo, Events)
}

// InstallEvents is Install for the events evs only (ClaudeEvents): a hook
// of Ferry's for another of Events is removed, as Uninstall would.
func InstallEvents(path, ferry string, inRepo bool, evs []string) (*Edit, error) {
	return EditJSON(path, func(d *docedit.Doc, e *Edit) error {
		hooks, err := hooksObject(d, e, true)
		if err != nil {
			return err
		}
		for _, ev := range Events {
			if slices.Contains(evs, ev) {
				continue
			}
			list := hooks.Get(ev)
			if list == nil || !list.IsArray() {
				continue
			}
			found := ferryHooks(list, ev)
			for i := len(found) - 1; i >= 0; i-- {
				found[i].drop()
			}
			if len(found) > 0 {
				dropEmptyGroups(list)
				if list.Len() == 0 {
					hooks.RemoveKey(ev)
				}
				e.Removed = append(e.Removed, ev)
			}
		}
		for _, ev := range evs {
			want := commandFor(ferry, ev, inRepo)
			list := hooks.Get(ev)
			if list == nil {
				hooks.Add(ev, docedit.Array(group(ev, want)))
				e.Added = append(e.Added, ev)
				continue
			}
			if !list.IsArray() {
				return notEditable(e.Path, fmt.Sprintf("hooks.%s is not a list", ev))
			}
			found := ferryHooks(list, ev)
			if len(found) == 0 {
				list.Push(group(ev, want))
				e.Added = append(e.Added, ev)
				continue
			}
			changed := false
			first := found[0]
			if cmd := first.hook.Get("command"); cmd != nil {
				if s, _ := cmd.Str(); s != want {
					cmd.SetString(want)
					changed = true
				}
			}
			// A second copy would run the hook twice: keep the first.
			for i := len(found) - 1; i >= 1; i-- {
				found[i].drop()
				changed = true
			}
			dropEmptyGroups(list)
			if changed {
				e.Updated = append(e.Updated, ev)
			}
		}
		return nil
	})
}

// InstalledEvents returns the events whose Ferry hook the settings file at
// path holds (none when the file is not there).
func InstalledEvents(path string) ([]string, error) {
	var evs []string
	_, err := EditJSON(path, func(d *docedit.Doc, e *Edit) error {
		hooks, err := hooksObject(d, e, false)
		if err != nil || hooks == nil {
			return err
		}
		for _, ev := range Events {
			if list := hooks.Get(ev); list != nil && list.IsArray() && len(ferryHooks(list, ev)) > 0 {
				evs = append(evs, ev)
			}
		}
		return nil
	})
	return evs, err
}

// Uninstall removes Ferry's hooks from the settings file at path, and the
// groups, event lists and hooks object that held nothing else, keeping
// everything else as it is. A file without Ferry's hooks is not changed.
func Uninstall(path string) (*Edit, error) {
	return EditJSON(path, func(d *docedit.Doc, e *Edit) error {
		hooks, err := hooksObject(d, e, false)
		if err != nil || hooks == nil {
			return err
		}
		for _, ev := range Events {
			list := hooks.Get(ev)
			if list == nil || !list.IsArray() {
				continue
			}
			found := ferryHooks(list, ev)
			if len(found) == 0 {
				continue
			}
			for i := len(found) - 1; i >= 0; i-- {
				found[i].drop()
			}
			dropEmptyGroups(list)
			if list.Len() == 0 {
				hooks.RemoveKey(ev)
			}
			e.Removed = append(e.Removed, ev)
		}
		if len(e.Removed) > 0 && hooks.Len() == 0 {
			d.Root().RemoveKey("hooks")
		}
		return nil
	})
}

// EditJSON reads the JSON file at path (a tool's settings), applies change
// to it as a document that keeps every byte change does not touch, and
// records what the file would become; Write writes it.
func EditJSON(path string, change func(*docedit.Doc, *Edit) error) (*Edit, error) {
	e, data, err := readForEdit(path)
	if err != nil {
		return nil, err
	}
	d, err := docedit.ParseJSON(data)
	if err != nil {
		return nil, failure.Wrap(failure.Usage, err, "fix the file (it is read as plain JSON), then run this again", "settings file %s cannot be read", e.Path)
	}
	if !d.Root().IsObject() {
		return nil, notEditable(e.Path, "its top level is not a JSON object")
	}
	if err := change(d, e); err != nil {
		return nil, err
	}
	e.before = data
	e.after = d.Bytes()
	e.Changed = !bytes.Equal(e.before, e.after)
	return e, nil
}

// readForEdit reads the file at path for an Edit: its bytes (nil when it
// does not exist yet), and where they go.
func readForEdit(path string) (*Edit, []byte, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, nil, err
	}
	e := &Edit{Path: abs, target: abs, mode: 0o644, Added: []string{}, Updated: []string{}, Removed: []string{}}
	// A settings file kept elsewhere (a dotfiles repository) and linked in
	// stays a link: the new bytes go to what it points to.
	if t, err := filepath.EvalSymlinks(abs); err == nil {
		e.target = t
	} else if fi, lerr := os.Lstat(abs); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return nil, nil, failure.Wrap(failure.Usage, err, "fix or remove the link", "settings file %s is a broken symbolic link", abs)
	}
	data, err := os.ReadFile(e.target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, nil, fmt.Errorf("read %s: %w", abs, err)
	default:
		e.Existed = true
		if fi, err := os.Stat(e.target); err == nil {
			e.mode = fi.Mode().Perm()
		}
	}
	return e, data, nil
}

// Write puts the edited file in place atomically (pkg/atomicfile),
// creating its directory. It refuses when the file changed since it was
// read (Claude Code writes settings.local.json itself when a permission is
// granted for good): run the command again.
func (e *Edit) Write() error {
	if !e.Changed {
		return nil
	}
	now, err := os.ReadFile(e.target)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", e.Path, err)
	}
	if exists != e.Existed || !bytes.Equal(now, e.before) {
		return failure.New(failure.Refused, "run the command again",
			"settings file %s changed while Ferry was editing it; nothing written", e.Path)
	}
	if e.remove {
		return os.Remove(e.target)
	}
	if err := os.MkdirAll(filepath.Dir(e.target), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(e.target, e.after, e.mode)
}

func notEditable(path, why string) error {
	return failure.New(failure.Usage, "fix the file by hand (see the tool's documentation of it), then run this again",
		"settings file %s: %s; Ferry does not change it", path, why)
}

// hooksObject returns the document's "hooks" object, adding an empty one
// when create is set and there is none.
func hooksObject(d *docedit.Doc, e *Edit, create bool) (*docedit.Value, error) {
	h := d.Root().Get("hooks")
	if h == nil {
		if !create {
			return nil, nil
		}
		h = docedit.Object()
		d.Root().Add("hooks", h)
		return h, nil
	}
	if !h.IsObject() {
		return nil, notEditable(e.Path, `"hooks" is not an object`)
	}
	return h, nil
}

// group is a new matcher group holding Ferry's hook for event. Worktree
// events take no matcher; SessionStart's runs for every source (startup,
// resume, clear, compact), so it has none either.
func group(event, command string) *docedit.Value {
	h := docedit.Object("type", "command", "command", command)
	if t, ok := timeouts[event]; ok {
		h = docedit.Object("type", "command", "command", command, "timeout", t)
	}
	return docedit.Object("hooks", docedit.Array(h))
}

// found is one of Ferry's hooks inside an event's list: the hook and the
// list of its group.
type found struct {
	hooks, hook *docedit.Value
}

// drop removes the hook from its group's list.
func (f found) drop() {
	for i := range f.hooks.Len() {
		if f.hooks.At(i) == f.hook {
			f.hooks.Remove(i)
			return
		}
	}
}

// ferryHooks finds Ferry's hooks for event in an event's list of groups.
func ferryHooks(list *docedit.Value, event string) []found {
	var out []found
	for i := range list.Len() {
		g := list.At(i)
		hs := g.Get("hooks")
		if !g.IsObject() || hs == nil || !hs.IsArray() {
			continue
		}
		for j := range hs.Len() {
			if h := hs.At(j); isFerryHook(h, event) {
				out = append(out, found{hooks: hs, hook: h})
			}
		}
	}
	return out
}

// isFerryHook reports whether h is a command hook running some ferry
// binary's `hook claude-code EVENT`.
func isFerryHook(h *docedit.Value, event string) bool {
	if !h.IsObject() {
		return false
	}
	if t, _ := h.Get("type").Str(); t != "command" {
		return false
	}
	cmd, ok := h.Get("command").Str()
	if !ok {
		return false
	}
	cmd = strings.TrimSuffix(strings.TrimSpace(cmd), worktreesFlag)
	prog, ok := strings.CutSuffix(cmd, " hook "+Tool+" "+event)
	if !ok {
		return false
	}
	prog = unquoteWord(strings.TrimSpace(prog))
	return filepath.Base(prog) == "ferry"
}

// dropEmptyGroups removes the groups of list whose hooks list Ferry
// emptied.
func dropEmptyGroups(list *docedit.Value) {
	for i := list.Len() - 1; i >= 0; i-- {
		g := list.At(i)
		if !g.Changed() {
			continue // a group the user left empty is theirs
		}
		if hs := g.Get("hooks"); hs != nil && hs.IsArray() && hs.Len() == 0 {
			list.Remove(i)
		}
	}
}

// shellWord quotes s for sh when it holds anything but plain path
// characters.
func shellWord(s string) string {
	plain := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+=:,@%", r)) {
			plain = false
			break
		}
	}
	if plain && s != "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// unquoteWord undoes shellWord.
func unquoteWord(s string) string {
	if len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'' {
		return strings.ReplaceAll(s[1:len(s)-1], `'\''`, "'")
	}
	return s
}
