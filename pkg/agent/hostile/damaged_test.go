package hostile_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/agenttest"
)

// A damaged record is named, not fatal (issue: every failure ends well).
// For each record a command may read, damaged the ways a disk or a hand
// edit leaves one (cut short, overwritten), every command either works
// without it (exit 0) or refuses (exit 6) naming the file with a hint;
// none fails with an internal error (exit 1) or a message that does not
// say which file. Then the fix the hint gives repairs it: ferry base
// --rebuild over a damaged base.json, ferry base over a damaged current,
// ferry rm --force of an agent whose agent.json is damaged.
func TestDamagedRecords(t *testing.T) {
	w := agenttest.NewWorld(t, false)
	if err := os.WriteFile(filepath.Join(w.Repo.Dir, "ferry.toml"), []byte("[base]\nwarm = [\"cargo build -p chain-a\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.MustFerry(t, "base")
	w.Spawn(t, "keep")
	s := w.StoreDir(t)
	cur, err := os.ReadFile(filepath.Join(s, "current"))
	if err != nil {
		t.Fatal(err)
	}
	baseID := strings.TrimSpace(string(cur))

	built := func() {
		t.Helper()
		// A build that compiles: the agent's last-build.json.
		if _, stderr, err := w.Ferry(w.Repo.Dir, nil, "run", "keep", "--", "sh", "-c", "touch crates/chain-a/src/lib.rs && cargo build -p chain-a"); err != nil {
			t.Fatalf("build in keep: %v\n%s", err, stderr)
		}
	}
	parent := filepath.Dir(s)
	w.MustFerry(t, "key")
	cases := []struct {
		name    string
		file    string
		data    func(old []byte) []byte
		prepare func()
	}{
		{"current cut short", filepath.Join(s, "current"), func(old []byte) []byte { return old[:10] }, nil},
		{"current emptied", filepath.Join(s, "current"), func([]byte) []byte { return nil }, nil},
		{"base.json cut short", filepath.Join(s, "bases", baseID, "base.json"), func(old []byte) []byte { return old[:len(old)/2] }, nil},
		{"base.json overwritten", filepath.Join(s, "bases", baseID, "base.json"), func([]byte) []byte { return []byte("\x00\x00\x00\x00") }, nil},
		{"agent.json cut short", filepath.Join(s, "agents", "keep", "agent.json"), func(old []byte) []byte { return old[:len(old)/3] }, nil},
		{"agent.json overwritten", filepath.Join(s, "agents", "keep", "agent.json"), func([]byte) []byte { return []byte("not json") }, nil},
		{"store.json cut short", filepath.Join(s, "store.json"), func(old []byte) []byte { return old[:len(old)/2] }, nil},
		{"demand.log with a torn line", filepath.Join(s, "demand.log"), func(old []byte) []byte { return append(old, "{\"time\":\"2026-"...) }, nil},
		{"last-build.json cut short", filepath.Join(s, "agents", "keep", "last-build.json"), func(old []byte) []byte { return old[:len(old)/2] }, built},
		{"signing key overwritten", filepath.Join(parent, "keys", "signing.key"), func([]byte) []byte { return []byte("-----BEGIN NOTHING-----\n") }, nil},
	}
	commands := [][]string{
		{"list", "--json"},
		{"base", "list", "--json"},
		{"base", "verify", "--json"},
		{"spawn", "probe", "--json"},
		{"base", "--json"},
		{"gc", "--json"},
		{"doctor", "--json"},
		{"rm", "keep", "--json"},
		{"stats", "--json"},
		{"why", "keep", "--json"},
		{"key", "--json"},
		{"env", "keep", "--json"},
		{"run", "keep", "--", "true"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.prepare != nil {
				c.prepare()
			}
			old, err := os.ReadFile(c.file)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			mode := os.FileMode(0o644)
			if fi, err := os.Stat(c.file); err == nil {
				mode = fi.Mode().Perm()
			}
			restore := func() {
				if old == nil {
					os.Remove(c.file)
				} else {
					os.WriteFile(c.file, old, mode)
				}
			}
			defer restore()
			for _, args := range commands {
				if err := os.WriteFile(c.file, c.data(old), mode); err != nil {
					t.Fatal(err)
				}
				stdout, stderr, err := w.Ferry(w.Repo.Dir, nil, args...)
				code := 0
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				} else if err != nil {
					t.Fatal(err)
				}
				what := "ferry " + strings.Join(args, " ")
				// With --json the answer on stdout may name it (ferry
				// base verify's results, doctor's checks).
				said := stdout + stderr
				switch {
				case code == 0:
				case code != 6:
					t.Errorf("%s: exit %d, want 0 or 6 (refused):\n%s", what, code, stderr)
				case !strings.Contains(said, c.file) || !strings.Contains(said, "hint"):
					t.Errorf("%s: refused without naming %s and a hint:\n%s", what, c.file, said)
				}
				if args[0] == "doctor" && !strings.Contains(said, c.file) {
					t.Errorf("ferry doctor does not name %s:\n%s", c.file, stdout)
				}
				if args[0] == "rm" && code == 0 && strings.HasSuffix(c.file, "agent.json") {
					t.Fatalf("%s removed the agent over its damaged record:\n%s", what, stdout)
				}
				// What the command made or removed goes back as it was.
				restore()
				if args[0] == "spawn" && code == 0 {
					w.MustFerry(t, "rm", "probe")
				}
				if args[0] == "rm" && code == 0 {
					w.Spawn(t, "keep")
					if c.prepare != nil {
						c.prepare()
					}
					if old, err = os.ReadFile(c.file); err != nil && !os.IsNotExist(err) {
						t.Fatal(err)
					}
				}
			}
		})
	}

	// The fixes the hints give.
	t.Run("rebuild over a damaged base.json", func(t *testing.T) {
		rec := filepath.Join(s, "bases", baseID, "base.json")
		old, _ := os.ReadFile(rec)
		os.WriteFile(rec, old[:len(old)/2], 0o644)
		_, stderr, err := w.Ferry(w.Repo.Dir, nil, "spawn", "after")
		agenttest.ExpectRefusal(t, stderr, err, "base --rebuild")
		w.MustFerry(t, "base", "--rebuild")
		a := w.Spawn(t, "after")
		if a.State != "ready" {
			t.Fatalf("spawn after the rebuild: %+v", a)
		}
		w.MustFerry(t, "rm", "after")
	})
	t.Run("base over a damaged current", func(t *testing.T) {
		os.WriteFile(filepath.Join(s, "current"), []byte("garbage\n"), 0o644)
		w.MustFerry(t, "base")
		if got, _ := os.ReadFile(filepath.Join(s, "current")); strings.TrimSpace(string(got)) != baseID {
			t.Fatalf("current after ferry base: %q, want %s", got, baseID)
		}
	})
	t.Run("rm --force of a damaged agent", func(t *testing.T) {
		rec := filepath.Join(s, "agents", "keep", "agent.json")
		os.WriteFile(rec, []byte("{"), 0o644)
		out := w.MustFerry(t, "rm", "--force", "keep", "--json")
		var rm struct {
			Damaged  bool   `json:"damaged"`
			Worktree string `json:"worktree"`
		}
		if err := json.Unmarshal([]byte(out), &rm); err != nil || !rm.Damaged || rm.Worktree == "" {
			t.Fatalf("rm --force of a damaged agent: %s (%v)", out, err)
		}
		if _, err := os.Stat(filepath.Join(s, "agents", "keep")); err == nil {
			t.Fatal("its store dir stayed")
		}
		if _, err := os.Lstat(filepath.Join(rm.Worktree, "target")); err == nil {
			t.Fatal("its worktree's target link stayed: plain cargo would follow it into nothing")
		}
		// The worktree builds cold with plain cargo.
		c := exec.Command("cargo", "check", "-p", "chain-a")
		c.Dir = rm.Worktree
		c.Env = w.Env(nil)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("plain cargo in the worktree: %v\n%s", err, out)
		}
		// And the name spawns again once the branch is gone.
		if _, err := w.Repo.Git("worktree", "remove", "--force", rm.Worktree); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Repo.Git("branch", "-D", "ferry/keep"); err != nil {
			t.Fatal(err)
		}
		w.Spawn(t, "keep")
	})
}
