package ferrycmd

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/cli/complete"
	"github.com/ferrydev/ferry/pkg/docedit"
	"github.com/ferrydev/ferry/pkg/hook"
)

// TestAddingATool follows docs/internals.md's "Adding an agent tool" with a
// test tool, Zed, whose file is a JSON object with a setup command: one
// SetupTool and its entry in the list give it its commands (install,
// uninstall, --dry-run, --json), its help, its place in the hint for an
// unknown tool and in completion; nothing else names it.
func TestAddingATool(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "internals.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := regexp.MustCompile(`(?s)## Adding an agent tool\n(.*?)\n## `).FindSubmatch(append(doc, "\n## "...))
	if section == nil {
		t.Fatal("docs/internals.md has no section \"Adding an agent tool\"")
	}
	for _, name := range []string{"`SetupTool`", "`setupTools`", "`pkg/hook/tools.go`", "`EditJSON`", "`Installed`"} {
		if !bytes.Contains(section[1], []byte(name)) {
			t.Errorf("the section does not name %s, which adding a tool takes", name)
		}
	}
	if src, err := os.ReadFile(filepath.Join("..", "..", "hook", "tools.go")); err != nil || !bytes.Contains(src, []byte("var setupTools = []*SetupTool{")) {
		t.Fatalf("pkg/hook/tools.go does not hold the list the section names (%v)", err)
	}

	// Step 1: the tool. Step 2: its entry in the list.
	zed := &hook.SetupTool{
		Name: "zed",
		Help: "Zed's agent threads (.zed/ferry.json): a setup command.",
		File: func(scope, project, home string) (string, error) {
			return filepath.Join(project, ".zed", "ferry.json"), nil
		},
		Edit: func(path string, o hook.SetupOptions) (*hook.Edit, error) {
			return hook.EditJSON(path, func(d *docedit.Doc, e *hook.Edit) error {
				cur := d.Root().Get("setup")
				switch {
				case o.Install && cur == nil:
					d.Root().Add("setup", docedit.String(hook.SetupLine(o.Ferry, "zed")))
					e.Added = append(e.Added, "setup")
				case !o.Install && cur != nil:
					d.Root().RemoveKey("setup")
					e.Removed = append(e.Removed, "setup")
				}
				return nil
			})
		},
		Cloud:       true, // its lines run the ferry on PATH (a test binary is no ferry to point at)
		InstallHelp: "Add Ferry's setup command to .zed/ferry.json.",
		Installed:   "each thread Zed starts adopts its worktree",
	}
	t.Cleanup(hook.RegisterForTest(zed))

	repo := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	t.Chdir(repo)
	run := func(args ...string) (string, string, int) {
		var stdout, stderr bytes.Buffer
		code := hookAgent(args, cli.IO{Stdout: &stdout, Stderr: &stderr})
		return stdout.String(), stderr.String(), code
	}

	out, stderr, code := run("zed", "install", "--json")
	var ed struct {
		Path  string   `json:"path"`
		Added []string `json:"added"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &ed) != nil || !slices.Equal(ed.Added, []string{"setup"}) {
		t.Fatalf("ferry hook zed install --json: exit %d\n%s%s", code, out, stderr)
	}
	data, err := os.ReadFile(filepath.Join(repo, ".zed", "ferry.json"))
	if err != nil || !bytes.Contains(data, []byte("adopt --cold-ok --tool zed")) {
		t.Fatalf("the tool's file after install (%v):\n%s", err, data)
	}
	if _, stderr, code = run("zed", "install"); code != 0 || !strings.Contains(stderr, "nothing to do") {
		t.Errorf("a second install: exit %d\n%s", code, stderr)
	}
	if out, _, code = run("zed", "uninstall", "--dry-run"); code != 0 || strings.Contains(out, "adopt") {
		t.Errorf("uninstall --dry-run: exit %d, prints\n%s", code, out)
	}

	help, _, _ := run("--help")
	for _, want := range []string{"zed install", zed.InstallHelp, "zed uninstall"} {
		if !strings.Contains(strings.Join(strings.Fields(help), " "), want) {
			t.Errorf("ferry hook --help does not show %q:\n%s", want, help)
		}
	}
	if _, stderr, code = run("vscode", "install"); code != 2 || !strings.Contains(stderr, "zed") {
		t.Errorf("an unknown tool's hint does not name zed (exit %d):\n%s", code, stderr)
	}
	m, err := complete.Of(new(hookCmd))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(m.Commands, func(c complete.Command) bool { return c.Name == "zed" && len(c.Commands) == 2 }) {
		t.Errorf("completion's model of ferry hook has no zed with install and uninstall: %+v", m.Commands)
	}
}
