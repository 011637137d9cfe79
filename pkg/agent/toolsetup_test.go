package agent_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"
)

// toolScripts reads the scripts a tool runs from the file Ferry's
// installer wrote, as the tool reads them: setup, then teardown ("" when
// the tool has none).
func toolScripts(t *testing.T, tool, repo string) (setup []string, teardown string) {
	t.Helper()
	switch tool {
	case "cursor":
		var f map[string]any
		data, err := os.ReadFile(filepath.Join(repo, ".cursor", "worktrees.json"))
		if err != nil || json.Unmarshal(data, &f) != nil {
			t.Fatalf("read .cursor/worktrees.json: %v\n%s", err, data)
		}
		for _, c := range f["setup-worktree"].([]any) {
			setup = append(setup, c.(string))
		}
		return setup, ""
	case "conductor":
		var f struct {
			Scripts struct{ Setup, Archive string }
		}
		data, err := os.ReadFile(filepath.Join(repo, ".conductor", "settings.toml"))
		if err != nil || toml.Unmarshal(data, &f) != nil {
			t.Fatalf("read .conductor/settings.toml: %v\n%s", err, data)
		}
		return []string{f.Scripts.Setup}, f.Scripts.Archive
	case "codex":
		var f struct{ Setup, Cleanup struct{ Script string } }
		data, err := os.ReadFile(filepath.Join(repo, ".codex", "environments", "environment.toml"))
		if err != nil || toml.Unmarshal(data, &f) != nil {
			t.Fatalf("read .codex/environments/environment.toml: %v\n%s", err, data)
		}
		return []string{f.Setup.Script}, f.Cleanup.Script
	}
	t.Fatalf("no tool %s", tool)
	return nil, ""
}

// runScript runs one of a tool's scripts as the tool documents it: in the
// worktree, with the tool's variables, by the tool's shell (Conductor's is
// zsh, where this machine has one).
func (w *world) runScript(t *testing.T, tool, script, worktree string) string {
	t.Helper()
	shell := "sh"
	if _, err := exec.LookPath("zsh"); err == nil && tool == "conductor" {
		shell = "zsh"
	}
	c := exec.Command(shell, "-c", script)
	c.Dir = worktree
	env := map[string][]string{
		"cursor":    {"ROOT_WORKTREE_PATH=" + w.repo.Dir},
		"conductor": {"CONDUCTOR_ROOT_PATH=" + w.repo.Dir, "CONDUCTOR_WORKSPACE_PATH=" + worktree, "CONDUCTOR_WORKSPACE_NAME=" + filepath.Base(worktree), "CONDUCTOR_DEFAULT_BRANCH=main", "CONDUCTOR_PORT=55100"},
		"codex":     {"CODEX_WORKTREE_PATH=" + worktree, "CODEX_SOURCE_TREE_PATH=" + w.repo.Dir},
	}[tool]
	c.Env = w.env(env)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%s's script failed: %v\n%s\n%s", tool, err, script, out)
	}
	return string(out)
}

// Each tool's setup file, as `ferry hook TOOL install` leaves it and as
// the tool runs it, makes the worktree the tool made a warm agent whose
// first build compiles nothing and runs its own code; the teardown, where
// the tool has one, releases the agent and leaves the worktree to the tool.
func TestToolSetupScripts(t *testing.T) {
	w := shared(t)
	for _, tool := range []string{"cursor", "conductor", "codex"} {
		t.Run(tool, func(t *testing.T) {
			w.mustFerry(t, "hook", tool, "install")
			defer func() {
				w.mustFerry(t, "hook", tool, "uninstall")
				for _, d := range []string{".cursor", ".conductor", ".codex"} {
					os.RemoveAll(filepath.Join(w.repo.Dir, d))
				}
			}()
			setup, teardown := toolScripts(t, tool, w.repo.Dir)
			path := w.addWorktree(t, tool+"-ws", "--detach")
			var said strings.Builder
			for _, s := range setup {
				said.WriteString(w.runScript(t, tool, s, path))
			}
			a, ok := w.agentsByWorktree(t)[path]
			if !ok || a.Tool != tool || !a.Adopted {
				t.Fatalf("no agent after %s's setup (%+v); it said:\n%s", tool, a, said.String())
			}
			_, out, code := w.cargo(path, nil, "build", "--workspace", "--all-targets")
			if code != 0 || strings.Contains(out, "Compiling") {
				t.Fatalf("first build after %s's setup (exit %d):\n%s", tool, code, out)
			}
			w.checkMarker(t, path)
			if teardown == "" {
				w.mustFerry(t, "rm", a.Name)
				return
			}
			w.runScript(t, tool, teardown, path)
			if _, ok := w.agentsByWorktree(t)[path]; ok {
				t.Fatalf("%s's teardown left the agent", tool)
			}
			if !w.worktreeRegistered(path) {
				t.Fatalf("%s's teardown removed the worktree, which is the tool's", tool)
			}
			// A teardown in a worktree that is no agent's does nothing, and
			// says so.
			if out := w.runScript(t, tool, teardown, path); !strings.Contains(out, "no agent's worktree") {
				t.Fatalf("teardown again said:\n%s", out)
			}
		})
	}
}
