package hook

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/failure"
)

const ferryBin = "/opt/ferry/bin/ferry"

// write puts data at dir/name and returns the path.
func write(t *testing.T, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func install(t *testing.T, path, ferry string) *Edit {
	t.Helper()
	e, err := Install(path, ferry, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Write(); err != nil {
		t.Fatal(err)
	}
	return e
}

func uninstall(t *testing.T, path string) *Edit {
	t.Helper()
	e, err := Uninstall(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Write(); err != nil {
		t.Fatal(err)
	}
	return e
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// settings decodes a settings file into plain Go values.
func settings(t *testing.T, path string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(read(t, path)), &m); err != nil {
		t.Fatalf("%s is not JSON after the edit: %v\n%s", path, err, read(t, path))
	}
	return m
}

// ferryCommands lists, per event, the commands of the file's hooks that
// are Ferry's.
func ferryCommands(t *testing.T, path string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	hooks, _ := settings(t, path)["hooks"].(map[string]any)
	for ev, list := range hooks {
		for _, g := range list.([]any) {
			for _, h := range g.(map[string]any)["hooks"].([]any) {
				cmd := h.(map[string]any)["command"].(string)
				if strings.Contains(cmd, " hook claude-code ") {
					out[ev] = append(out[ev], cmd)
				}
			}
		}
	}
	return out
}

// Files as people and tools write them: Claude Code's own two-space JSON,
// four spaces, tabs, one line, odd spacing, CRLF line ends, and files that
// already hold hooks for the same events.
var layouts = map[string]string{
	"claude": `{
  "permissions": {
    "allow": [
      "Bash(cargo test:*)"
    ]
  },
  "hooks": {
    "PostToolUse": [
      {
        "matcher": "Edit|Write",
        "hooks": [
          {
            "type": "command",
            "command": "cargo fmt"
          }
        ]
      }
    ],
    "SessionStart": [
      {
        "matcher": "startup",
        "hooks": [
          {
            "type": "command",
            "command": "echo 'export FOO=1' >> \"$CLAUDE_ENV_FILE\""
          }
        ]
      }
    ]
  },
  "model": "opus"
}
`,
	"four spaces, no hooks": "{\n    \"zeta\": 1,\n    \"alpha\": {\"nested\": [1, 2, 3]},\n    \"unicode\": \"caf\\u00e9 \\\"q\\\"\"\n}\n",
	"tabs":                  "{\n\t\"env\": {\n\t\t\"A\": \"b\"\n\t},\n\t\"hooks\": {\"Stop\": []}\n}",
	"one line":              `{"model":"sonnet","hooks":{"Stop":[{"hooks":[{"type":"command","command":"say done"}]}]}}`,
	"odd spacing":           "  {  \"a\" :1 ,\n\n  \"b\":[ ] , \"hooks\" : { \"Stop\" : [ ] }  }  \n\n",
	"crlf":                  "{\r\n  \"x\": true\r\n}\r\n",
	"empty object":          "{}",
}

// Install then uninstall gives back the file byte for byte, and install
// leaves every other setting and hook as it was. (Not quite for a file
// whose hooks object or list of one of Ferry's events was there but
// empty: uninstall cannot tell it from one install made, and removes it;
// see TestUninstallEmptied.)
func TestInstallUninstallRoundTrip(t *testing.T) {
	for name, orig := range layouts {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			p := write(t, dir, ".claude/settings.local.json", orig)
			var before map[string]any
			if err := json.Unmarshal([]byte(orig), &before); err != nil {
				t.Fatal(err)
			}
			e := install(t, p, ferryBin)
			if !e.Changed || !reflect.DeepEqual(e.Added, Events) {
				t.Errorf("install: changed %v, added %v; want every event added", e.Changed, e.Added)
			}
			got := ferryCommands(t, p)
			for _, ev := range Events {
				if want := []string{ferryBin + " hook claude-code " + ev}; !reflect.DeepEqual(got[ev], want) {
					t.Errorf("%s: Ferry's hooks %q, want %q", ev, got[ev], want)
				}
			}
			after := settings(t, p)
			for k, v := range before {
				if k == "hooks" {
					continue
				}
				if !reflect.DeepEqual(after[k], v) {
					t.Errorf("setting %q changed: %v -> %v", k, v, after[k])
				}
			}
			if h, ok := before["hooks"].(map[string]any); ok {
				for ev, v := range h {
					list := after["hooks"].(map[string]any)[ev].([]any)
					for i, g := range v.([]any) {
						if !reflect.DeepEqual(list[i], g) {
							t.Errorf("hooks.%s[%d] changed: %v -> %v", ev, i, g, list[i])
						}
					}
				}
			}
			// Installing again changes nothing.
			if e := install(t, p, ferryBin); e.Changed {
				t.Errorf("second install changed the file:\n%s", read(t, p))
			}
			e = uninstall(t, p)
			if !reflect.DeepEqual(e.Removed, Events) {
				t.Errorf("uninstall removed %v", e.Removed)
			}
			if got := read(t, p); got != orig {
				t.Errorf("round trip changed the file:\n--- before\n%s\n--- after\n%s", orig, got)
			}
			if e := uninstall(t, p); e.Changed {
				t.Errorf("second uninstall changed the file")
			}
		})
	}
}

// Uninstall removes the lists and the hooks object it empties, whoever
// made them.
func TestUninstallEmptied(t *testing.T) {
	p := write(t, t.TempDir(), "s.json", `{"hooks": {"WorktreeCreate": [], "Stop": []}, "model": "x"}`)
	install(t, p, ferryBin)
	uninstall(t, p)
	if got, want := read(t, p), `{"hooks": {"Stop": []}, "model": "x"}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	p = write(t, t.TempDir(), "s.json", `{"hooks": {}, "model": "x"}`)
	install(t, p, ferryBin)
	uninstall(t, p)
	if got, want := read(t, p), `{"model": "x"}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// Keys keep their order, and new members line up with their neighbours.
func TestInstallLayout(t *testing.T) {
	dir := t.TempDir()
	p := write(t, dir, "s.json", layouts["claude"])
	install(t, p, ferryBin)
	want := `{
  "permissions": {
    "allow": [
      "Bash(cargo test:*)"
    ]
  },
  "hooks": {
    "PostToolUse": [
      {
        "matcher": "Edit|Write",
        "hooks": [
          {
            "type": "command",
            "command": "cargo fmt"
          }
        ]
      }
    ],
    "SessionStart": [
      {
        "matcher": "startup",
        "hooks": [
          {
            "type": "command",
            "command": "echo 'export FOO=1' >> \"$CLAUDE_ENV_FILE\""
          }
        ]
      },
      {
        "hooks": [
          {
            "type": "command",
            "command": "/opt/ferry/bin/ferry hook claude-code SessionStart"
          }
        ]
      }
    ],
    "WorktreeCreate": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "/opt/ferry/bin/ferry hook claude-code WorktreeCreate",
            "timeout": 600
          }
        ]
      }
    ],
    "WorktreeRemove": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "/opt/ferry/bin/ferry hook claude-code WorktreeRemove",
            "timeout": 600
          }
        ]
      }
    ],
    "CwdChanged": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "/opt/ferry/bin/ferry hook claude-code CwdChanged"
          }
        ]
      }
    ]
  },
  "model": "opus"
}
`
	if got := read(t, p); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}

	one := write(t, dir, "one.json", layouts["one line"])
	install(t, one, "/f/ferry")
	if got := read(t, one); strings.Contains(got, "\n") {
		t.Errorf("a file on one line stays on one line, got\n%s", got)
	}
}

// A missing file (and its directory) is created; uninstalling leaves an
// empty object.
func TestInstallNewFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), ".claude", "settings.json")
	e := install(t, p, ferryBin)
	if e.Existed || !e.Changed {
		t.Errorf("existed %v changed %v", e.Existed, e.Changed)
	}
	got := read(t, p)
	if !strings.HasPrefix(got, "{\n  \"hooks\": {\n    \"WorktreeCreate\": [\n") || !strings.HasSuffix(got, "}\n") {
		t.Errorf("new file:\n%s", got)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode: %v %v", fi.Mode(), err)
	}
	uninstall(t, p)
	if got := read(t, p); got != "{}\n" {
		t.Errorf("after uninstall: %q", got)
	}
}

// A hook of Ferry's that runs another ferry binary (moved, upgraded) is
// pointed at this one in place; duplicates are dropped; a command that
// merely mentions ferry is not Ferry's.
func TestInstallUpdates(t *testing.T) {
	orig := `{
  "hooks": {
    "WorktreeCreate": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "'/old place/ferry' hook claude-code WorktreeCreate",
            "timeout": 30
          }
        ]
      },
      {
        "hooks": [
          {
            "type": "command",
            "command": "/usr/bin/ferry hook claude-code WorktreeCreate"
          }
        ]
      }
    ],
    "WorktreeRemove": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "/usr/bin/not-ferry hook claude-code WorktreeRemove"
          },
          {
            "type": "command",
            "command": "echo ferry hook claude-code WorktreeRemove"
          }
        ]
      }
    ]
  }
}
`
	p := write(t, t.TempDir(), "s.json", orig)
	e := install(t, p, "/new/ferry")
	if !reflect.DeepEqual(e.Updated, []string{EventWorktreeCreate}) || !reflect.DeepEqual(e.Added, []string{EventWorktreeRemove, EventSessionStart, EventCwdChanged}) {
		t.Errorf("updated %v added %v", e.Updated, e.Added)
	}
	got := ferryCommands(t, p)
	if want := []string{"/new/ferry hook claude-code WorktreeCreate"}; !reflect.DeepEqual(got[EventWorktreeCreate], want) {
		t.Errorf("WorktreeCreate: %q", got[EventWorktreeCreate])
	}
	// The user's own timeout stays.
	if !strings.Contains(read(t, p), `"timeout": 30`) {
		t.Errorf("timeout lost:\n%s", read(t, p))
	}
	rm := got[EventWorktreeRemove]
	if len(rm) != 3 || rm[2] != "/new/ferry hook claude-code WorktreeRemove" {
		t.Errorf("WorktreeRemove: %q", rm)
	}
	uninstall(t, p)
	got = ferryCommands(t, p)
	if len(got[EventWorktreeCreate]) != 0 || len(got[EventWorktreeRemove]) != 2 {
		t.Errorf("after uninstall: %q\n%s", got, read(t, p))
	}
	if strings.Contains(read(t, p), "SessionStart") {
		t.Errorf("uninstall left SessionStart:\n%s", read(t, p))
	}
}

// A path with spaces is quoted for the shell Claude Code runs the hook
// with, and recognised again.
func TestInstallQuotedPath(t *testing.T) {
	p := write(t, t.TempDir(), "s.json", "{}\n")
	ferry := "/home/me/My Tools/ferry"
	install(t, p, ferry)
	if got := ferryCommands(t, p)[EventSessionStart]; len(got) != 1 || got[0] != `'/home/me/My Tools/ferry' hook claude-code SessionStart` {
		t.Errorf("command %q", got)
	}
	if e := install(t, p, ferry); e.Changed {
		t.Error("second install changed the file")
	}
}

// Files Ferry cannot edit safely are refused with nothing written.
func TestInstallRefuses(t *testing.T) {
	for name, data := range map[string]string{
		"invalid JSON":   `{"hooks": {`,
		"comments":       "{\n  // mine\n  \"a\": 1\n}\n",
		"not an object":  `[1, 2]`,
		"hooks is array": `{"hooks": []}`,
		"event not list": `{"hooks": {"WorktreeCreate": {"hooks": []}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			p := write(t, t.TempDir(), "s.json", data)
			_, err := Install(p, ferryBin, false)
			if err == nil || failure.KindOf(err) != failure.Usage || failure.HintOf(err) == "" {
				t.Fatalf("err %v (kind %v), want a usage error with a hint", err, failure.KindOf(err))
			}
			if read(t, p) != data {
				t.Error("file changed")
			}
		})
	}
}

// A settings file that is a symbolic link (kept in a dotfiles repository)
// stays a link; the new bytes go where it points.
func TestInstallThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	real := write(t, dir, "dotfiles/claude.json", `{"model": "opus"}`)
	link := filepath.Join(dir, ".claude", "settings.json")
	os.MkdirAll(filepath.Dir(link), 0o755)
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	install(t, link, ferryBin)
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", fi.Mode(), err)
	}
	if !strings.Contains(read(t, real), "WorktreeCreate") {
		t.Error("the file the link points to did not get the hooks")
	}
}

// A file changed between reading and writing (Claude Code saving a
// permission) is not overwritten.
func TestWriteRefusesAChangedFile(t *testing.T) {
	p := write(t, t.TempDir(), "s.json", `{"a": 1}`)
	e, err := Install(p, ferryBin, false)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p, []byte(`{"a": 2}`), 0o644)
	if err := e.Write(); failure.KindOf(err) != failure.Refused {
		t.Fatalf("err %v, want refused", err)
	}
	if read(t, p) != `{"a": 2}` {
		t.Error("the newer file was overwritten")
	}
}

func TestSettingsPath(t *testing.T) {
	for scope, want := range map[string]string{
		ScopeLocal:   "/p/.claude/settings.local.json",
		ScopeProject: "/p/.claude/settings.json",
		ScopeUser:    "/home/u/.claude/settings.json",
	} {
		got, err := SettingsPath(scope, "/p", "/home/u/.claude")
		if err != nil || got != want {
			t.Errorf("%s: %q %v", scope, got, err)
		}
	}
	if _, err := SettingsPath("global", "/p", "/c"); failure.KindOf(err) != failure.Usage {
		t.Errorf("unknown scope: %v", err)
	}
}

// Installed with worktrees under the repository, WorktreeCreate's command
// carries --worktrees repo; installing without it points the hook back,
// and uninstalling finds Ferry's hook either way.
func TestInstallWorktreesInRepo(t *testing.T) {
	p := filepath.Join(t.TempDir(), "settings.local.json")
	e, err := Install(p, "/opt/ferry/bin/ferry", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Write(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(read(t, p), `"/opt/ferry/bin/ferry hook claude-code WorktreeCreate --worktrees repo"`) ||
		strings.Count(read(t, p), "--worktrees repo") != 1 {
		t.Fatalf("settings:\n%s", read(t, p))
	}
	if again, err := Install(p, "/opt/ferry/bin/ferry", true); err != nil || again.Changed {
		t.Fatalf("install again: %v changed %v", err, again.Changed)
	}
	e = install(t, p, "/opt/ferry/bin/ferry")
	if len(e.Updated) != 1 || e.Updated[0] != EventWorktreeCreate || strings.Contains(read(t, p), "--worktrees") {
		t.Fatalf("install without: updated %v\n%s", e.Updated, read(t, p))
	}
	if e, err := Install(p, "/opt/ferry/bin/ferry", true); err != nil || e.Write() != nil {
		t.Fatal(err)
	}
	if e := uninstall(t, p); len(e.Removed) != len(Events) {
		t.Fatalf("uninstall removed %v\n%s", e.Removed, read(t, p))
	}
}
