package hook_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/claudestub"
	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/testenv"
)

// The real Claude Code CLI (claudestub.Version, installed by
// script/bootstrap) against a scripted stand-in for the Messages API:
// the hooks as `ferry hook claude-code install` leaves them, the sessions
// as a user starts them.

// realWorld is a fixture repository with Ferry's hooks installed and no
// base yet.
type realWorld struct {
	repo       *fixture.Repo
	bin, home  string
	claude     string
	worktrees  string
	buildCheck string // the scripted command: build, where cargo is, run the binary
}

func newRealWorld(t *testing.T) *realWorld {
	t.Helper()
	return newRealWorldOf(t, claudestub.Binary(t))
}

func newRealWorldOf(t *testing.T, claude string) *realWorld {
	t.Helper()
	// Without the registry crates (most of a cold build's work): what
	// these tests check does not depend on where crates come from.
	w := &realWorld{claude: claude, repo: testenv.Repo(t, fixture.Options{NoRegistry: true}), bin: testenv.Binaries(t)}
	root := t.TempDir()
	w.home, w.worktrees = filepath.Join(root, "home"), filepath.Join(root, "worktrees")
	if err := os.WriteFile(filepath.Join(w.repo.Dir, "ferry.toml"), []byte("[base]\nwarm = [\"cargo build --workspace --all-targets\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.ferry(t, "hook", "claude-code", "install")
	// Plain commands joined by ';': Claude Code's guard in worktree
	// sessions refuses what it cannot verify ($(...), variables).
	w.buildCheck = "cargo build --workspace --all-targets 2>&1; command -v cargo; ./target/debug/" + fixture.BinName
	return w
}

func (w *realWorld) env() []string {
	return []string{"FERRY_HOME=" + w.home, "FERRY_WORKTREES=" + w.worktrees}
}

func (w *realWorld) ferry(t *testing.T, args ...string) string {
	t.Helper()
	c := exec.Command(filepath.Join(w.bin, "ferry"), args...)
	c.Dir = w.repo.Dir
	c.Env = append(os.Environ(), w.env()...)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("ferry %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

type listed struct {
	Name     string `json:"name"`
	Worktree string `json:"worktree"`
	Tool     string `json:"tool"`
	Session  string `json:"session"`
	Adopted  bool   `json:"adopted"`
}

func (w *realWorld) agents(t *testing.T) []listed {
	t.Helper()
	c := exec.Command(filepath.Join(w.bin, "ferry"), "list", "--json")
	c.Dir = w.repo.Dir
	c.Env = append(os.Environ(), w.env()...)
	out, err := c.Output()
	if err != nil {
		t.Fatalf("ferry list: %v", err)
	}
	var l []listed
	if err := json.Unmarshal(out, &l); err != nil {
		t.Fatal(err)
	}
	return l
}

// expectWarm checks a session's answer for the scripted build: nothing
// compiled, cargo was Ferry's shim, and the binary printed the worktree's
// own marker.
func (w *realWorld) expectWarm(t *testing.T, res claudestub.Result, worktree string, s *claudestub.Server) {
	t.Helper()
	if res.Err != nil {
		t.Fatalf("claude: %v\nstdout:\n%s\nstderr:\n%s\nstand-in:\n%s", res.Err, res.Stdout, res.Stderr, s.Log())
	}
	want, err := fixture.ExpectedMarker(worktree)
	if err != nil {
		t.Fatal(err)
	}
	shim := filepath.Join(w.home, "bin", "cargo")
	if strings.Contains(res.Stdout, "Compiling") || !strings.Contains(res.Stdout, "Finished") ||
		!strings.Contains(res.Stdout, shim) || !strings.Contains(res.Stdout, strings.TrimSpace(want)) {
		t.Fatalf("the session's build (want nothing compiled, cargo = %s, the marker %q):\n%s\nstand-in:\n%s", shim, strings.TrimSpace(want), res.Stdout, s.Log())
	}
}

// One repository, hooks installed before any base exists, as a new user
// would: claude -w still gets its worktree (cold, where Claude Code would
// have made it), the hook starts the base's build, and the worktree is
// adopted once the base is ready. Then, warm: claude -w NAME makes an
// agent, SessionStart puts the shim on the session's PATH, and the
// session's Bash tool builds nothing and runs ./target/debug/<bin> of the
// worktree; a subagent isolated in a worktree gets an agent of its own the
// same way; and installed with --worktrees repo, the worktree is under the
// repository.
func TestRealClaudeCode(t *testing.T) {
	w := newRealWorld(t)

	s := claudestub.Start(t, claudestub.Script{Bash: "pwd"})
	res := s.Run(t, w.claude, w.repo.Dir, w.env(), "-w", "early")
	early := filepath.Join(w.repo.Dir, ".claude", "worktrees", "early")
	if res.Err != nil || !strings.Contains(res.Stdout, early) {
		t.Fatalf("claude -w without a base: %v\nstdout:\n%s\nstderr:\n%s\nstand-in:\n%s", res.Err, res.Stdout, res.Stderr, s.Log())
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		adopted := false
		for _, l := range w.agents(t) {
			adopted = adopted || (l.Worktree == early && l.Adopted)
		}
		if adopted {
			break
		}
		if time.Now().After(deadline) {
			logs, _ := filepath.Glob(filepath.Join(w.home, "*", "tmp", "base-*.log"))
			var all []byte
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				all = append(all, b...)
			}
			t.Fatalf("the early worktree was not adopted within 5 minutes; the background build's log:\n%s", all)
		}
		time.Sleep(time.Second)
	}

	s = claudestub.Start(t, claudestub.Script{Bash: w.buildCheck})
	res = s.Run(t, w.claude, w.repo.Dir, w.env(), "-w", "fix-login")
	var a *listed
	for _, l := range w.agents(t) {
		if l.Name == "fix-login" {
			a = &l
		}
	}
	if a == nil || a.Tool != "claude-code" || a.Session == "" {
		t.Fatalf("no agent fix-login made by the hook (%+v); claude said:\n%s\n%s", a, res.Stdout, res.Stderr)
	}
	w.expectWarm(t, res, a.Worktree, s)
	t.Logf("claude -w: %s", res.Took)

	sub := claudestub.Start(t, claudestub.Script{Bash: w.buildCheck, Subagent: true})
	before := map[string]bool{}
	for _, l := range w.agents(t) {
		before[l.Name] = true
	}
	res = sub.Run(t, w.claude, w.repo.Dir, w.env())
	var made []listed
	for _, l := range w.agents(t) {
		if !before[l.Name] {
			made = append(made, l)
		}
	}
	if len(made) != 1 || made[0].Tool != "claude-code" {
		t.Fatalf("agents made for the subagent's worktree: %+v; claude said:\n%s\n%s\nstand-in:\n%s", made, res.Stdout, res.Stderr, sub.Log())
	}
	w.expectWarm(t, res, made[0].Worktree, sub)
	t.Logf("subagent isolated in a worktree: %s", res.Took)

	// Installed to put worktrees under the repository, as Claude Code
	// does itself.
	w.ferry(t, "hook", "claude-code", "install", "--worktrees", "repo")
	in := claudestub.Start(t, claudestub.Script{Bash: w.buildCheck})
	res = in.Run(t, w.claude, w.repo.Dir, w.env(), "-w", "in-repo")
	var inRepo *listed
	for _, l := range w.agents(t) {
		if l.Name == "in-repo" {
			inRepo = &l
		}
	}
	if inRepo == nil || inRepo.Worktree != filepath.Join(w.repo.Dir, ".claude", "worktrees", "in-repo") {
		t.Fatalf("agent in-repo: %+v; claude said:\n%s\n%s", inRepo, res.Stdout, res.Stderr)
	}
	w.expectWarm(t, res, inRepo.Worktree, in)
}

// An old Claude Code (claudestub.OldVersion) reads a --worktree session's
// settings from the worktree, where the main checkout's untracked
// .claude/settings.local.json is not: without a copy no SessionStart ran
// there, the session's cargo was the plain one, and it failed on the
// overlay fork's ./target link. The WorktreeCreate hook copies the file
// in: the session builds warm through the shim, and the copy is Ferry's,
// so ferry rm removes the agent without --force.
func TestRealClaudeCodeOldRelease(t *testing.T) {
	w := newRealWorldOf(t, claudestub.OldBinary(t))
	w.ferry(t, "base")
	s := claudestub.Start(t, claudestub.Script{Bash: w.buildCheck})
	res := s.Run(t, w.claude, w.repo.Dir, w.env(), "-w", "fix-login")
	var a *listed
	for _, l := range w.agents(t) {
		if l.Name == "fix-login" {
			a = &l
		}
	}
	if a == nil || a.Tool != "claude-code" {
		t.Fatalf("no agent fix-login made by the hook (%+v); claude said:\n%s\n%s", a, res.Stdout, res.Stderr)
	}
	w.expectWarm(t, res, a.Worktree, s)
	copied, err := os.ReadFile(filepath.Join(a.Worktree, ".claude", "settings.local.json"))
	main, _ := os.ReadFile(filepath.Join(w.repo.Dir, ".claude", "settings.local.json"))
	if err != nil || string(copied) != string(main) {
		t.Fatalf("the worktree's .claude/settings.local.json is not the main checkout's: %v\n%s", err, copied)
	}
	w.ferry(t, "rm", "fix-login")
}
