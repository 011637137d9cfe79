// Package agenttest is what the tests of pkg/agent and its test-only
// packages (pkg/agent/hostile, pkg/agent/warming) share: a world (a fixture
// repository with its Ferry home and worktrees dir), the Ferry binaries run
// in it, and the records they print. The tests are split across packages so
// that each package's test binary stays well inside its timeout on a loaded
// machine; the world is built once per package.
package agenttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/sandbox"
)

// World is a fixture repository with a built base, shared by the tests of
// this package (each uses its own agent names).
type World struct {
	Repo      *fixture.Repo
	Bin       string
	Home      string // FERRY_HOME
	Worktrees string // FERRY_WORKTREES
	Store     string // the repository's store dir
}

var (
	sharedOnce  sync.Once
	sharedWorld *World
	sharedErr   error
)

const WarmToml = "[base]\nwarm = [\"cargo build --workspace --all-targets\"]\n"

// NewWorld is a world of the test's own, with its base when withBase. Its
// repository leaves out the registry crates (fixture.Options.NoRegistry):
// they are most of a cold build's work, and what these tests check does not
// depend on where crates come from. Tests of relocation, whose plans judge
// registry crates too, take newRegistryWorld; the shared world has them.
func NewWorld(t *testing.T, withBase bool) *World {
	t.Helper()
	return NewWorldOf(t, fixture.Options{NoRegistry: true}, withBase)
}

// NewRegistryWorld is newWorld with the registry crates.
func NewRegistryWorld(t *testing.T, withBase bool) *World {
	t.Helper()
	return NewWorldOf(t, fixture.Options{}, withBase)
}

func NewWorldOf(t *testing.T, opts fixture.Options, withBase bool) *World {
	t.Helper()
	w := &World{Repo: testenv.Repo(t, opts), Bin: testenv.Binaries(t)}
	root := t.TempDir()
	w.Home, w.Worktrees = filepath.Join(root, "home"), filepath.Join(root, "worktrees")
	if err := os.WriteFile(filepath.Join(w.Repo.Dir, "ferry.toml"), []byte(WarmToml), 0o644); err != nil {
		t.Fatal(err)
	}
	if withBase {
		w.MustFerry(t, "base")
	}
	return w
}

func Shared(t *testing.T) *World {
	t.Helper()
	sharedOnce.Do(func() {
		// Built in a directory of its own so it outlives the first test.
		dir, err := os.MkdirTemp("", "ferry-agent-test-")
		if err != nil {
			sharedErr = err
			return
		}
		testenv.RemoveAtExit(dir)
		fixture.RequireTools(t)
		w := &World{Bin: testenv.Binaries(t), Home: filepath.Join(dir, "home"), Worktrees: filepath.Join(dir, "worktrees")}
		if w.Repo, err = fixture.Generate(filepath.Join(dir, "repo"), fixture.Options{}); err != nil {
			sharedErr = err
			return
		}
		os.WriteFile(filepath.Join(w.Repo.Dir, "ferry.toml"), []byte(WarmToml), 0o644)
		if _, stderr, err := w.Ferry(w.Repo.Dir, nil, "base"); err != nil {
			sharedErr = fmt.Errorf("ferry base: %v\n%s", err, stderr)
			return
		}
		sharedWorld = w
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedWorld
}

func (w *World) Env(extra []string) []string {
	// Overlay namespaces end with their last session unless a test asks
	// for a holder (overlay_hold.go in package lifecycle).
	return append(os.Environ(), append([]string{"FERRY_HOME=" + w.Home, "FERRY_WORKTREES=" + w.Worktrees, knobs.OverlayHold + "=0"}, extra...)...)
}

// Ferry runs a Ferry binary (Ferry, or Ferry-<stage> when args[0] names one
// with a leading "Ferry-") in dir.
func (w *World) Ferry(dir string, extra []string, args ...string) (string, string, error) {
	bin := "ferry"
	if strings.HasPrefix(args[0], "ferry-") {
		bin, args = args[0], args[1:]
	}
	c := exec.Command(filepath.Join(w.Bin, bin), args...)
	c.Dir = dir
	c.Env = w.Env(extra)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	return stdout.String(), stderr.String(), err
}

func (w *World) MustFerry(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := w.Ferry(w.Repo.Dir, nil, args...)
	if err != nil {
		t.Fatalf("ferry %s: %v\n%s%s", strings.Join(args, " "), err, stderr, out)
	}
	return out
}

type AgentJSON struct {
	Name        string `json:"name"`
	State       string `json:"state"`
	Worktree    string `json:"worktree"`
	Branch      string `json:"branch"`
	StartCommit string `json:"start_commit"`
	Base        string `json:"base"`
}

func (w *World) Spawn(t *testing.T, name string, args ...string) AgentJSON {
	t.Helper()
	out := w.MustFerry(t, append([]string{"spawn", name, "--json"}, args...)...)
	var a AgentJSON
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatalf("spawn output %q: %v", out, err)
	}
	return a
}

func (w *World) StoreDir(t *testing.T) string {
	t.Helper()
	ents, err := filepath.Glob(filepath.Join(w.Home, "repo-*"))
	if err != nil || len(ents) != 1 {
		t.Fatalf("store dirs %v (%v)", ents, err)
	}
	return ents[0]
}

// Cargo runs Cargo through the shim (Ferry's bin dir first on PATH) in dir.
func (w *World) Cargo(dir string, extra []string, args ...string) (string, string, int) {
	c := exec.Command("cargo", args...)
	c.Dir = dir
	env := w.Env(extra)
	for i, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			env[i] = "PATH=" + filepath.Join(w.Home, "bin") + ":" + kv[5:]
		}
	}
	c.Env = env
	c.Path = filepath.Join(w.Home, "bin", "cargo")
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return stdout.String(), stderr.String(), code
}

func (w *World) BranchExists(name string) bool {
	_, err := w.Repo.Git("rev-parse", "--verify", "--quiet", "refs/heads/"+name)
	return err == nil
}

func (w *World) WorktreeRegistered(path string) bool {
	out, _ := w.Repo.Git("worktree", "list", "--porcelain")
	return strings.Contains(out, "worktree "+path+"\n")
}

func Must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func ExpectRefusal(t *testing.T, stderr string, err error, msg string) {
	t.Helper()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 6 {
		t.Fatalf("want a refusal (exit 6), got %v:\n%s", err, stderr)
	}
	if !strings.Contains(stderr, msg) || !strings.Contains(stderr, "hint:") {
		t.Fatalf("want %q with a hint, got:\n%s", msg, stderr)
	}
}

// OffRecord is what agent.json says of isolation and relocation.
type OffRecord struct {
	Worktree  string `json:"worktree"`
	Backend   string `json:"backend"`
	Isolation string `json:"isolation"`
	Fork      struct {
		Relocated *struct {
			Paths   int  `json:"paths"`
			Emptied bool `json:"emptied"`
		} `json:"relocated"`
	} `json:"fork"`
}

func (w *World) SpawnWith(t *testing.T, extra []string, name string, args ...string) OffRecord {
	t.Helper()
	out, stderr, err := w.Ferry(w.Repo.Dir, extra, append([]string{"spawn", name, "--json"}, args...)...)
	if err != nil {
		t.Fatalf("ferry spawn %s: %v\n%s", name, err, stderr)
	}
	var r OffRecord
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("spawn output %q: %v", out, err)
	}
	return r
}

// Alive reports whether pid runs (a zombie does not count).
func Alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	return err == nil && !strings.Contains(string(b), ") Z ")
}

// GitIn runs git in dir with a fixed identity and no user configuration.
func GitIn(t *testing.T, dir string, args ...string) {
	t.Helper()
	c := exec.Command("git", args...)
	c.Dir = dir
	c.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// Main runs a test package of agents: the sandbox's re-exec entry first,
// then the tests, then the removal of what they left at exit.
func Main(m *testing.M) {
	sandbox.Init()
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}
