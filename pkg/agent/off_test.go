package agent_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/agenttest"
	"github.com/ferrydev/ferry/internal/fixture"
)

// workspaceRoot asks cargo, through the shim in dir, where it sees the
// workspace and its target dir.
func workspaceRoot(w *agenttest.World, t *testing.T, dir string, extra []string, args ...string) (root, target string) {
	t.Helper()
	out, stderr, code := w.Cargo(dir, extra, append([]string{"metadata", "--format-version", "1", "--no-deps"}, args...)...)
	if code != 0 {
		t.Fatalf("cargo metadata in %s: %s", dir, stderr)
	}
	var m struct {
		WorkspaceRoot   string `json:"workspace_root"`
		TargetDirectory string `json:"target_directory"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("cargo metadata: %v", err)
	}
	return m.WorkspaceRoot, m.TargetDirectory
}

// An agent spawned with sandbox mode off records it, builds in its worktree
// into its fork, and keeps doing so whatever mode later calls are made
// under; its app reports the agent's paths, never the base's (the fork of
// a namespace base gets a dead relocation plan). A namespace agent spawned
// beside it stays in the sandbox when a call is made under mode off.
func TestOffAgentBuildsAtItsOwnPaths(t *testing.T) {
	w := agenttest.Shared(t)
	off := []string{"FERRY_SANDBOX=off"}
	a := w.SpawnWith(t, off, "off-a")
	if a.Isolation != "off" || a.Fork.Relocated == nil || a.Backend == "overlay" {
		t.Fatalf("agent %+v: want isolation off, a relocated fork, no overlay", a)
	}
	fork := filepath.Join(w.StoreDir(t), "agents", "off-a", "target")
	for _, mode := range []string{"off", "on", "auto"} {
		root, target := workspaceRoot(w, t, filepath.Join(a.Worktree, fixture.CratesDir), []string{"FERRY_SANDBOX=" + mode})
		if root != a.Worktree || target != fork {
			t.Errorf("a call under mode %s: cargo saw the workspace at %s with target %s; want %s and %s", mode, root, target, a.Worktree, fork)
		}
	}
	// The nested workspace gets its own target dir in the fork, as in the
	// sandbox, from inside it and through --manifest-path.
	nested := filepath.Join(fork, "ferry-ws", fixture.ToolsDir)
	if root, target := workspaceRoot(w, t, filepath.Join(a.Worktree, fixture.ToolsDir), nil); root != filepath.Join(a.Worktree, fixture.ToolsDir) || target != nested {
		t.Errorf("in the nested workspace cargo saw %s with target %s; want target %s", root, target, nested)
	}
	if _, target := workspaceRoot(w, t, a.Worktree, []string{}, "--manifest-path", filepath.Join(a.Worktree, fixture.ToolsManifest)); target != nested {
		t.Errorf("with --manifest-path the nested workspace's target is %s; want %s", target, nested)
	}
	if _, stderr, code := w.Cargo(a.Worktree, nil, "build", "--workspace"); code != 0 {
		t.Fatalf("build: %s", stderr)
	}
	md, err := os.ReadFile(filepath.Join(fork, "debug", fixture.BinName))
	if err != nil || len(md) == 0 {
		t.Fatalf("no app in the fork: %v", err)
	}
	out, stderr, err := w.Ferry(a.Worktree, nil, "run", "--", filepath.Join(fork, "debug", fixture.BinName), fixture.ManifestDirFlag)
	if err != nil {
		t.Fatalf("app: %v\n%s", err, stderr)
	}
	if want := filepath.Join(a.Worktree, fixture.CrateDir(fixture.ManifestCrate)); strings.TrimSpace(out) != want {
		t.Errorf("the off agent's app reports %q, want %q", strings.TrimSpace(out), want)
	}

	// A namespace agent keeps the sandbox under a call made with mode off.
	n := w.SpawnWith(t, nil, "off-ns")
	if n.Isolation != "namespace" || n.Fork.Relocated != nil {
		t.Fatalf("agent %+v: want isolation namespace, no relocation (a namespace base)", n)
	}
	if root, _ := workspaceRoot(w, t, n.Worktree, off); root != filepath.Join(w.StoreDir(t), "mnt", "src") {
		t.Errorf("a namespace agent's call under mode off saw the workspace at %s, not in the sandbox", root)
	}
	for _, name := range []string{"off-a", "off-ns"} {
		w.MustFerry(t, "rm", "--force", name)
	}
}

// With sandbox mode off the overlay is refused at spawn, and auto never
// picks it; nothing of the refused spawn is left.
func TestOffRefusesTheOverlay(t *testing.T) {
	w := agenttest.Shared(t)
	_, stderr, err := w.Ferry(w.Repo.Dir, []string{"FERRY_SANDBOX=off"}, "spawn", "off-ov", "--backend", "overlay")
	if err == nil || !strings.Contains(stderr, "fork backend overlay needs the namespace sandbox") {
		t.Fatalf("spawn --backend overlay under mode off: %v\n%s", err, stderr)
	}
	if code := exitCode(err); code != 6 {
		t.Errorf("exit %d, want 6 (refused)", code)
	}
	if _, err := os.Stat(filepath.Join(w.StoreDir(t), "agents", "off-ov")); !os.IsNotExist(err) {
		t.Errorf("the refused spawn left its agent dir: %v", err)
	}
	if w.BranchExists("ferry/off-ov") {
		t.Error("the refused spawn left its branch")
	}
}

// A base built at host paths stores its relocation plan; a sandboxed agent
// of it builds at the canonical paths, so its fork gets that plan too, and
// its app reports the canonical checkout, never the base's.
func TestNamespaceAgentOfAnOffBase(t *testing.T) {
	w := agenttest.NewRegistryWorld(t, false)
	var rec struct {
		Modes struct {
			Isolation string `json:"isolation"`
		} `json:"modes"`
		Dir string `json:"dir"`
	}
	out, _, err := w.Ferry(w.Repo.Dir, []string{"FERRY_SANDBOX=off"}, "base", "--json")
	if err != nil || json.Unmarshal([]byte(out), &rec) != nil || rec.Modes.Isolation != "off" {
		t.Fatalf("ferry base --json under mode off: %v %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(rec.Dir, "relocation.json")); err != nil {
		t.Fatalf("the off base has no relocation.json: %v", err)
	}
	n := w.SpawnWith(t, nil, "ns-of-off", "--backend", "copy")
	if n.Isolation != "namespace" || n.Fork.Relocated == nil {
		t.Fatalf("agent %+v: want isolation namespace and a relocated fork", n)
	}
	if _, stderr, code := w.Cargo(n.Worktree, nil, "build", "--workspace"); code != 0 {
		t.Fatalf("build: %s", stderr)
	}
	app := filepath.Join(w.StoreDir(t), "mnt", "target", "debug", fixture.BinName)
	out, stderr, err := w.Ferry(n.Worktree, nil, "run", "--", app, fixture.ManifestDirFlag)
	if err != nil {
		t.Fatalf("app: %v\n%s", err, stderr)
	}
	if want := filepath.Join(w.StoreDir(t), "mnt", "src", fixture.CrateDir(fixture.ManifestCrate)); strings.TrimSpace(out) != want {
		t.Errorf("the agent's app reports %q, want %q", strings.TrimSpace(out), want)
	}
}
