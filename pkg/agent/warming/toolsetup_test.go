package warming_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/ferrydev/ferry/internal/agenttest"
	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/pkg/hook"
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
func runScript(w *agenttest.World, t *testing.T, tool, script, worktree string) string {
	t.Helper()
	shell := "sh"
	if _, err := exec.LookPath("zsh"); err == nil && tool == "conductor" {
		shell = "zsh"
	}
	c := exec.Command(shell, "-c", script)
	c.Dir = worktree
	env := map[string][]string{
		"cursor":    {"ROOT_WORKTREE_PATH=" + w.Repo.Dir},
		"conductor": {"CONDUCTOR_ROOT_PATH=" + w.Repo.Dir, "CONDUCTOR_WORKSPACE_PATH=" + worktree, "CONDUCTOR_WORKSPACE_NAME=" + filepath.Base(worktree), "CONDUCTOR_DEFAULT_BRANCH=main", "CONDUCTOR_PORT=55100"},
		"codex":     {"CODEX_WORKTREE_PATH=" + worktree, "CODEX_SOURCE_TREE_PATH=" + w.Repo.Dir},
	}[tool]
	c.Env = w.Env(env)
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
	w := agenttest.Shared(t)
	for _, tool := range []string{"cursor", "conductor", "codex"} {
		t.Run(tool, func(t *testing.T) {
			w.MustFerry(t, "hook", tool, "install")
			defer func() {
				w.MustFerry(t, "hook", tool, "uninstall")
				for _, d := range []string{".cursor", ".conductor", ".codex"} {
					os.RemoveAll(filepath.Join(w.Repo.Dir, d))
				}
			}()
			setup, teardown := toolScripts(t, tool, w.Repo.Dir)
			path := w.AddWorktree(t, tool+"-ws", "--detach")
			var said strings.Builder
			for _, s := range setup {
				said.WriteString(runScript(w, t, tool, s, path))
			}
			a, ok := w.AgentsByWorktree(t)[path]
			if !ok || a.Tool != tool || !a.Adopted {
				t.Fatalf("no agent after %s's setup (%+v); it said:\n%s", tool, a, said.String())
			}
			_, out, code := w.Cargo(path, nil, "build", "--workspace", "--all-targets")
			if code != 0 || strings.Contains(out, "Compiling") {
				t.Fatalf("first build after %s's setup (exit %d):\n%s", tool, code, out)
			}
			w.CheckMarker(t, path)
			if teardown == "" {
				w.MustFerry(t, "rm", a.Name)
				return
			}
			runScript(w, t, tool, teardown, path)
			if _, ok := w.AgentsByWorktree(t)[path]; ok {
				t.Fatalf("%s's teardown left the agent", tool)
			}
			if !w.WorktreeRegistered(path) {
				t.Fatalf("%s's teardown removed the worktree, which is the tool's", tool)
			}
			// A teardown in a worktree that is no agent's does nothing, and
			// says so.
			if out := runScript(w, t, tool, teardown, path); !strings.Contains(out, "no agent's worktree") {
				t.Fatalf("teardown again said:\n%s", out)
			}
		})
	}
}

// A cloud agent's container, as Codex cloud makes one: the repository
// cloned at another path, a fresh $HOME and store, and the base a build
// host exported handed over as a file. The setup script `ferry hook
// codex-cloud print` gives imports it (its signer trusted), adopts the
// checkout in place and writes `ferry env` for the shells; a shell that
// reads ~/.bashrc then builds warm in the checkout, running its own code.
// After a new commit, the maintenance script refreshes the base and forks
// it afresh.
func TestCloudSetupScripts(t *testing.T) {
	w := agenttest.Shared(t)
	file := filepath.Join(t.TempDir(), "base.ferrybase")
	w.MustFerry(t, "base", "export", "-o", file)
	key := strings.TrimSpace(w.MustFerry(t, "key"))

	root := t.TempDir()
	checkout, home := filepath.Join(root, "checkout"), filepath.Join(root, "home")
	if out, err := exec.Command("git", "clone", "-q", w.Repo.Dir, checkout).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	// The repository commits its ferry.toml (the shared world's is only
	// in its working tree): a commit after the exported base's, which the
	// setup builds as a seeded refresh of the imported one.
	if err := os.WriteFile(filepath.Join(checkout, "ferry.toml"), []byte(agenttest.WarmToml), 0o644); err != nil {
		t.Fatal(err)
	}
	realHome, _ := os.UserHomeDir()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FERRY_") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	for name, dflt := range map[string]string{"CARGO_HOME": ".cargo", "RUSTUP_HOME": ".rustup"} {
		if os.Getenv(name) == "" {
			env = append(env, name+"="+filepath.Join(realHome, dflt)) // the image's toolchain, whatever $HOME is
		}
	}
	env = append(env, "HOME="+home, "FERRY_BASE_FILE="+file, "FERRY_TRUSTED_KEYS="+key, knobs.OverlayHold+"=0",
		"PATH="+w.Bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	run := func(script string) string {
		t.Helper()
		c := exec.Command("sh", "-c", script)
		c.Dir, c.Env = checkout, env
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%v running:\n%s\n%s", err, script, out)
		}
		return string(out)
	}
	run(`git add ferry.toml && git -c user.email=a@b -c user.name=a commit -qm "ferry.toml"`)
	scripts := hook.CodexCloudScripts("ferry")
	said := run(scripts.Setup)
	if strings.Contains(said, "error:") || !strings.Contains(said, "seeded") {
		t.Errorf("the setup did not import the base and refresh it; it said:\n%s", said)
	}
	// A shell of the agent: ~/.bashrc reads what the setup wrote.
	build := `. "$HOME/.bashrc" && echo "agent=$FERRY_AGENT" && cargo build --workspace 2>&1 && cargo run -q --bin ` + fixture.BinName
	out := run(build)
	if !strings.Contains(out, "agent=") || strings.Contains(out, "agent=\n") {
		t.Fatalf("the shell after the setup is no agent's:\n%s\nthe setup said:\n%s", out, said)
	}
	// The base was built at the build host's store path: only the crate
	// that embeds its CARGO_MANIFEST_DIR, and the one that depends on it,
	// compile again at this store's (the relocated crates).
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "Compiling" && f[1] != fixture.ManifestCrate && f[1] != fixture.AppCrate {
			t.Errorf("the first build in the container compiled %s, which relocation does not touch:\n%s", f[1], out)
		}
	}
	want, err := fixture.ExpectedMarker(checkout)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, strings.TrimSpace(want)) {
		t.Errorf("the container's build does not run its own code; want %q in:\n%s", want, out)
	}
	if data, _ := os.ReadFile(filepath.Join(home, ".bashrc")); strings.Count(string(data), ".ferry-env") != 1 {
		t.Errorf("~/.bashrc:\n%s", data)
	}

	// A new commit, and the container resumed: the maintenance refreshes
	// the base and forks it afresh; the agent builds the new code.
	lib := filepath.Join(checkout, fixture.LibPath(fixture.ChainC))
	data, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, append(data, "\npub fn cloud_edit() -> u32 { 7 }\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	run(`git -c user.email=a@b -c user.name=a commit -qam "a leaf edit"`)
	run(scripts.Maintenance)
	out = run(build)
	if want, _ = fixture.ExpectedMarker(checkout); !strings.Contains(out, strings.TrimSpace(want)) {
		t.Errorf("after the maintenance the agent does not run the new commit's code; want %q in:\n%s", want, out)
	}
}
