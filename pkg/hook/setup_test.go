package hook

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/docedit"
	"github.com/ferrydev/ferry/pkg/failure"
	toml "github.com/pelletier/go-toml/v2"
)

const testFerry = "/opt/ferry/bin/ferry"

func writeTestFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// install runs InstallSetup and writes it, then checks a second install
// changes nothing.
func installSetup(t *testing.T, tool, path string) *Edit {
	t.Helper()
	e, err := InstallSetup(tool, path, SetupOptions{Ferry: testFerry})
	if err != nil {
		t.Fatalf("install %s: %v", tool, err)
	}
	if err := e.Write(); err != nil {
		t.Fatal(err)
	}
	again, err := InstallSetup(tool, path, SetupOptions{Ferry: testFerry})
	if err != nil || again.Changed {
		t.Fatalf("install %s again: changed %v, %v\n%s", tool, again != nil && again.Changed, err, again.Content())
	}
	return e
}

func uninstallSetup(t *testing.T, tool, path string) {
	t.Helper()
	e, err := UninstallSetup(tool, path)
	if err != nil {
		t.Fatalf("uninstall %s: %v", tool, err)
	}
	if err := e.Write(); err != nil {
		t.Fatal(err)
	}
	if again, err := UninstallSetup(tool, path); err != nil || again.Changed {
		t.Fatalf("uninstall %s again: %v", tool, err)
	}
}

// Cursor: the line joins the commands of the key Cursor runs here, every
// other byte stays, and uninstalling gives the file back byte for byte; a
// key naming a script file is refused with the line to add.
func TestSetupCursor(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ".cursor", "worktrees.json")
	orig := "{\n  // not JSON: refused\n}\n"
	writeTestFile(t, path, orig)
	if _, err := InstallSetup(ToolCursor, path, SetupOptions{Ferry: testFerry}); failure.KindOf(err) != failure.Usage {
		t.Fatalf("comments: %v", err)
	}

	orig = "{\n    \"setup-worktree\": [\n        \"npm ci\",\n        \"cp $ROOT_WORKTREE_PATH/.env .env\"\n    ],\n    \"other\": {\"x\": 1}\n}\n"
	writeTestFile(t, path, orig)
	e := installSetup(t, ToolCursor, path)
	got := string(e.Content())
	line := SetupLine(testFerry, ToolCursor)
	want := strings.Replace(orig, `"cp $ROOT_WORKTREE_PATH/.env .env"`, `"cp $ROOT_WORKTREE_PATH/.env .env",`+"\n        "+jsonString(line), 1)
	if got != want {
		t.Fatalf("installed:\n%s\nwant:\n%s", got, want)
	}
	uninstallSetup(t, ToolCursor, path)
	if b, _ := os.ReadFile(path); string(b) != orig {
		t.Fatalf("after uninstall:\n%s\nwant:\n%s", b, orig)
	}

	// setup-worktree-unix wins on Linux and macOS: the line goes there.
	orig = "{\"setup-worktree-unix\": [\"make deps\"], \"setup-worktree\": [\"echo win\"]}\n"
	writeTestFile(t, path, orig)
	e = installSetup(t, ToolCursor, path)
	if !strings.Contains(string(e.Content()), `"make deps",`+jsonString(line)+`]`) || strings.Count(string(e.Content()), "adopt") != 1 {
		t.Fatalf("with setup-worktree-unix:\n%s", e.Content())
	}
	uninstallSetup(t, ToolCursor, path)
	if b, _ := os.ReadFile(path); string(b) != orig {
		t.Fatalf("after uninstall:\n%s", b)
	}

	writeTestFile(t, path, "{\"setup-worktree-unix\": \"setup-worktree-unix.sh\"}\n")
	_, err := InstallSetup(ToolCursor, path, SetupOptions{Ferry: testFerry})
	if failure.KindOf(err) != failure.Refused || !strings.Contains(failure.HintOf(err), line) {
		t.Fatalf("script path: %v (hint %q)", err, failure.HintOf(err))
	}

	// No file: one is made.
	os.Remove(path)
	e = installSetup(t, ToolCursor, path)
	if e.Existed || !strings.Contains(string(e.Content()), `"setup-worktree": [`) {
		t.Fatalf("new file:\n%s", e.Content())
	}
}

// Conductor's TOML settings: setup and archive gain one line each, the
// rest of the file is kept byte for byte, and uninstalling leaves the
// scripts as they were; the older conductor.json is edited where no
// .conductor/settings.toml exists.
func TestSetupConductor(t *testing.T) {
	dir := t.TempDir()
	legacy := filepath.Join(dir, "conductor.json")
	writeTestFile(t, legacy, "{\n  \"scripts\": {\n    \"setup\": \"npm ci\",\n    \"run\": \"npm start\"\n  }\n}\n")
	path, err := SetupFile(ToolConductor, ScopeProject, dir, "")
	if err != nil || path != legacy {
		t.Fatalf("project file with conductor.json only: %q %v", path, err)
	}
	e := installSetup(t, ToolConductor, path)
	want := "{\n  \"scripts\": {\n    \"setup\": " + jsonString("npm ci\n"+SetupLine(testFerry, ToolConductor)) +
		",\n    \"run\": \"npm start\",\n    \"archive\": " + jsonString(TeardownLine(testFerry)) + "\n  }\n}\n"
	if string(e.Content()) != want {
		t.Fatalf("conductor.json:\n%s\nwant:\n%s", e.Content(), want)
	}
	uninstallSetup(t, ToolConductor, path)
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), `"setup": "npm ci"`) || strings.Contains(string(b), "ferry") {
		t.Fatalf("conductor.json after uninstall:\n%s", b)
	}

	toml := filepath.Join(dir, ".conductor", "settings.toml")
	orig := "# team settings\n[scripts]\nsetup = \"npm ci\"  # deps\nrun = 'npm start'\n\n[other]\nx = 1\n"
	writeTestFile(t, toml, orig)
	if path, _ = SetupFile(ToolConductor, ScopeProject, dir, ""); path != toml {
		t.Fatalf("project file beside settings.toml: %q", path)
	}
	e = installSetup(t, ToolConductor, toml)
	got := string(e.Content())
	for _, keep := range []string{"# team settings\n[scripts]\n", "setup = '''\nnpm ci\n" + SetupLine(testFerry, ToolConductor) + "\n'''  # deps\nrun = 'npm start'\n\n[other]\nx = 1\n"} {
		if !strings.Contains(got, keep) {
			t.Fatalf("settings.toml lacks %q:\n%s", keep, got)
		}
	}
	if s, _, _ := docedit.TOMLString(e.Content(), "scripts", "archive"); s != TeardownLine(testFerry)+"\n" {
		t.Fatalf("archive %q", s)
	}
	uninstallSetup(t, ToolConductor, toml)
	b, _ := os.ReadFile(toml)
	if s, _, _ := docedit.TOMLString(b, "scripts", "setup"); s != "npm ci\n" || strings.Contains(string(b), "ferry") {
		t.Fatalf("settings.toml after uninstall (setup %q):\n%s", s, b)
	}

	if _, err := SetupFile(ToolCursor, ScopeUser, dir, ""); failure.KindOf(err) != failure.Usage {
		t.Fatalf("cursor --scope user: %v", err)
	}
	if _, err := SetupFile("vscode", ScopeProject, dir, ""); failure.KindOf(err) != failure.Usage || !strings.Contains(err.Error(), "unknown agent tool") {
		t.Fatalf("unknown tool: %v", err)
	}
}

// Codex: a new environment file is made whole; in an existing one the
// setup and cleanup scripts and their platform overrides gain the lines.
func TestSetupCodex(t *testing.T) {
	dir := filepath.Join(t.TempDir(), `my "app"`)
	path, err := SetupFile(ToolCodex, ScopeProject, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	e := installSetup(t, ToolCodex, path)
	// The environment's name, the project's directory, is one line.
	if !strings.Contains(string(e.Content()), "\nname = \"my \\\"app\\\"\"\n") {
		t.Fatalf("new file's name is not a one-line string:\n%s", e.Content())
	}
	var top struct{ Name string }
	if err := toml.Unmarshal(e.Content(), &top); err != nil || top.Name != `my "app"` {
		t.Fatalf("new file: name = %q (%v)", top.Name, err)
	}
	for _, k := range [][2]string{{"setup", "script"}, {"cleanup", "script"}} {
		if s, ok, err := docedit.TOMLString(e.Content(), k[0], k[1]); !ok || err != nil || !strings.Contains(s, "ferry") {
			t.Fatalf("new file: [%s] %s = %q (%v)\n%s", k[0], k[1], s, err, e.Content())
		}
	}
	orig := "# THIS IS AUTOGENERATED. DO NOT EDIT MANUALLY\nversion = 1\nname = \"app\"\n\n[setup]\nscript = '''\nnpm ci\n'''\n\n[setup.linux]\nscript = \"make deps\"\n\n[[actions]]\nname = \"Run\"\ncommand = \"npm start\"\n"
	writeTestFile(t, path, orig)
	e = installSetup(t, ToolCodex, path)
	for _, k := range []string{"setup", "setup.linux", "cleanup"} {
		s, _, _ := docedit.TOMLString(e.Content(), k, "script")
		if !strings.Contains(s, " adopt --cold-ok --tool codex ") && !strings.Contains(s, " rm --if-agent ") {
			t.Fatalf("[%s] script = %q\n%s", k, s, e.Content())
		}
	}
	if !strings.Contains(string(e.Content()), "[[actions]]\nname = \"Run\"\ncommand = \"npm start\"\n") {
		t.Fatalf("actions changed:\n%s", e.Content())
	}
	uninstallSetup(t, ToolCodex, path)
	b, _ := os.ReadFile(path)
	if s, _, _ := docedit.TOMLString(b, "setup.linux", "script"); s != "make deps\n" {
		t.Fatalf("[setup.linux] after uninstall %q", s)
	}
	if s, _, _ := docedit.TOMLString(b, "setup", "script"); s != "npm ci\n" {
		t.Fatalf("[setup] after uninstall %q", s)
	}
}

func jsonString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// Cursor's cloud agents: the line joins the install command (a new one
// when there was none), every other byte stays, uninstalling gives the
// file back byte for byte, and an install that is no command string is
// refused. Codex cloud has no file: its scripts are printed.
func TestSetupCursorCloud(t *testing.T) {
	dir := t.TempDir()
	path := CursorCloudFile(dir)
	orig := "{\n    \"snapshot\": \"snap-1\",\n    \"install\": \"npm ci\",\n    \"terminals\": [{\"name\": \"web\", \"command\": \"npm run dev\"}]\n}\n"
	writeTestFile(t, path, orig)
	e := installSetup(t, ToolCursorCloud, path)
	var f struct{ Install, Snapshot string }
	if err := json.Unmarshal(e.Content(), &f); err != nil {
		t.Fatal(err)
	}
	if f.Snapshot != "snap-1" || f.Install != "npm ci\n"+CloudSetupLine(testFerry, ToolCursorCloud) {
		t.Errorf("install is %q", f.Install)
	}
	if !strings.Contains(f.Install, " adopt --cold-ok --tool cursor-cloud --in-place") || !strings.Contains(f.Install, "base import \"$FERRY_BASE_FILE\"") {
		t.Errorf("the line neither imports nor adopts in place: %s", f.Install)
	}
	uninstallSetup(t, ToolCursorCloud, path)
	if data, _ := os.ReadFile(path); string(data) != orig {
		t.Errorf("after uninstall:\n%s\nwant:\n%s", data, orig)
	}

	// No install command yet: one is added, and removed again.
	bare := "{\"snapshot\": \"snap-1\"}\n"
	writeTestFile(t, path, bare)
	installSetup(t, ToolCursorCloud, path)
	uninstallSetup(t, ToolCursorCloud, path)
	if data, _ := os.ReadFile(path); string(data) != bare {
		t.Errorf("after uninstall:\n%s\nwant:\n%s", data, bare)
	}
	writeTestFile(t, path, "{\"install\": [\"npm ci\"]}\n")
	if _, err := InstallSetup(ToolCursorCloud, path, SetupOptions{Ferry: testFerry}); err == nil {
		t.Error("an install that is a list was edited")
	}
	if _, err := SetupFile(ToolCodexCloud, ScopeProject, dir, dir); err == nil || !strings.Contains(failure.HintOf(err), "codex-cloud print") {
		t.Errorf("codex-cloud's file: %v", err)
	}
	sc := CodexCloudScripts("ferry")
	if !strings.HasPrefix(sc.Setup, "if command -v ferry ") || !strings.Contains(sc.Maintenance, " rm --if-agent ") {
		t.Errorf("codex-cloud scripts: %+v", sc)
	}
}
