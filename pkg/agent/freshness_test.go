package agent_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/agenttest"
	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/failure"
)

// A small workspace on the rustup nightly (rust-toolchain.toml), for the
// freshness modes: app prints lib_a's text, read with include_str! through
// the link lib_a/src/data.txt, then lib_b's.
var freshFiles = map[string]string{
	"Cargo.toml":          "[workspace]\nmembers = [\"app\", \"lib_a\", \"lib_b\"]\nresolver = \"2\"\n",
	"rust-toolchain.toml": "[toolchain]\nchannel = \"nightly\"\n",
	".gitignore":          "/target\n",
	"app/Cargo.toml":      "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\nlib_a = { path = \"../lib_a\" }\nlib_b = { path = \"../lib_b\" }\n",
	"app/src/main.rs":     "fn main() {\n    print!(\"{}{}\", lib_a::text(), lib_b::text());\n}\n",
	"lib_a/Cargo.toml":    "[package]\nname = \"lib_a\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
	"lib_a/src/lib.rs":    "pub fn text() -> &'static str {\n    include_str!(\"data.txt\")\n}\n",
	"lib_a/src/one.txt":   "one\n",
	"lib_a/src/two.txt":   "two\n",
	"lib_b/Cargo.toml":    "[package]\nname = \"lib_b\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
	"lib_b/src/lib.rs":    "pub fn text() -> &'static str {\n    \"b\\n\"\n}\n",
}

// requireNightly skips unless rustup has a nightly toolchain.
func requireNightly(t *testing.T) {
	t.Helper()
	fixture.RequireTools(t)
	out, err := exec.Command("rustup", "toolchain", "list").Output()
	if err != nil || !strings.Contains(string(out), "nightly") {
		t.Skipf("no rustup nightly toolchain (`rustup toolchain list`: %v)", err)
	}
}

// freshWorld makes the workspace with lib_a/src/data.txt linking to link,
// in freshness mode mode, and builds its base.
func freshWorld(t *testing.T, mode, link string) *agenttest.World {
	t.Helper()
	w := freshRepo(t, mode, link, freshFiles)
	w.MustFerry(t, "base")
	return w
}

// freshRepo is freshWorld with files, and no base.
func freshRepo(t *testing.T, mode, link string, files map[string]string) *agenttest.World {
	t.Helper()
	root := t.TempDir()
	r := &fixture.Repo{Dir: filepath.Join(root, "repo")}
	if err := os.Mkdir(r.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Git("init", "-q", "-b", "main"); err != nil {
		t.Fatal(err)
	}
	for p, c := range files {
		if err := r.Write(p, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(link, r.Path("lib_a/src/data.txt")); err != nil {
		t.Fatal(err)
	}
	toml := "[base]\nwarm = [\"cargo build --workspace\"]\nfreshness = \"" + mode + "\"\n"
	if err := r.Write("ferry.toml", toml); err != nil {
		t.Fatal(err)
	}
	lock := exec.Command("cargo", "generate-lockfile", "--offline")
	lock.Dir = r.Dir
	if out, err := lock.CombinedOutput(); err != nil {
		t.Fatalf("cargo generate-lockfile: %v\n%s", err, out)
	}
	if _, err := r.Commit("A"); err != nil {
		t.Fatal(err)
	}
	return &agenttest.World{Repo: r, Bin: testenv.Binaries(t), Home: filepath.Join(root, "home"), Worktrees: filepath.Join(root, "worktrees")}
}

// TestChecksumRefusedOnStable: ferry base refuses checksum mode on the
// stable toolchain, which would ignore the switch and build by mtime,
// saying why and how to get a nightly.
func TestChecksumRefusedOnStable(t *testing.T) {
	fixture.RequireTools(t)
	if out, err := exec.Command("cargo", "-V").Output(); err != nil || strings.Contains(string(out), "nightly") {
		t.Skipf("needs a stable default toolchain (cargo -V: %q, %v)", out, err)
	}
	files := maps.Clone(freshFiles)
	delete(files, "rust-toolchain.toml")
	w := freshRepo(t, "checksum", "one.txt", files)
	_, stderr, err := w.Ferry(w.Repo.Dir, nil, "base")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != failure.Prereq.ExitCode() {
		t.Fatalf("ferry base: %v, want exit %d\n%s", err, failure.Prereq.ExitCode(), stderr)
	}
	for _, want := range []string{`freshness = "checksum"`, "not a nightly", "rust-toolchain.toml", "cargo +nightly"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("ferry base does not say %q:\n%s", want, stderr)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(w.Home, "repo-*", "bases", "*", "base.json")); len(m) != 0 {
		t.Errorf("a base was made: %q", m)
	}
}

var compilingRe = regexp.MustCompile(`(?m)^\s*Compiling (\S+)`)

// compiledIn returns the packages cargo's stderr says it compiled, sorted.
func compiledIn(stderr string) []string {
	out := []string{}
	for _, m := range compilingRe.FindAllStringSubmatch(stderr, -1) {
		out = append(out, m[1])
	}
	slices.Sort(out)
	return out
}

// build runs cargo build --workspace in the agent and returns what it
// compiled.
func build(w *agenttest.World, t *testing.T, a agenttest.AgentJSON) []string {
	t.Helper()
	_, stderr, code := w.Cargo(a.Worktree, nil, "build", "--workspace")
	if code != 0 {
		t.Fatalf("cargo build in %s: exit %d\n%s", a.Name, code, stderr)
	}
	return compiledIn(stderr)
}

// output runs app through the shim and returns what it printed.
func output(w *agenttest.World, t *testing.T, a agenttest.AgentJSON) string {
	t.Helper()
	out, stderr, code := w.Cargo(a.Worktree, nil, "run", "-q", "-p", "app")
	if code != 0 {
		t.Fatalf("cargo run in %s: exit %d\n%s", a.Name, code, stderr)
	}
	return out
}

// TestFreshnessModes: with the nightly, in each mode, an agent's first build
// compiles nothing; a file rewritten with the same bytes (its mtime moves)
// rebuilds nothing in checksum mode and its crate and app in mtime mode; a
// real change rebuilds exactly its crate and app in both. The base records
// the mode and its variables reach cargo.
func TestFreshnessModes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a workspace twice per mode")
	}
	requireNightly(t)
	for _, mode := range []string{"checksum", "mtime"} {
		t.Run(mode, func(t *testing.T) {
			w := freshWorld(t, mode, "one.txt")
			a := w.Spawn(t, "a")
			if got := build(w, t, a); len(got) != 0 {
				t.Fatalf("first build compiled %q", got)
			}
			// The variables reach cargo's children: a build script would see
			// them; cargo config get shows what cargo itself read.
			out, _, _ := w.Cargo(a.Worktree, nil, "-Zunstable-options", "config", "get", "unstable.checksum-freshness")
			if on := strings.Contains(out, "true"); on != (mode == "checksum") {
				t.Errorf("cargo config get unstable.checksum-freshness = %q in %s mode", out, mode)
			}

			lib := filepath.Join(a.Worktree, "lib_b/src/lib.rs")
			data, err := os.ReadFile(lib)
			if err != nil {
				t.Fatal(err)
			}
			future := time.Now().Add(time.Minute)
			if err := os.WriteFile(lib, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(lib, future, future); err != nil {
				t.Fatal(err)
			}
			want := []string{"app", "lib_b"}
			if mode == "checksum" {
				want = []string{}
			}
			if got := build(w, t, a); !slices.Equal(got, want) {
				t.Errorf("same bytes, newer mtime: compiled %q, want %q", got, want)
			}

			if err := os.WriteFile(lib, []byte(strings.Replace(string(data), `b\n`, `B\n`, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := build(w, t, a); !slices.Equal(got, []string{"app", "lib_b"}) {
				t.Errorf("real change: compiled %q, want [app lib_b]", got)
			}
			if got := output(w, t, a); got != "one\nB\n" {
				t.Errorf("app prints %q", got)
			}
		})
	}
}

// TestLinkRetargets: a symlink lib_a/src/data.txt that leads elsewhere in
// the agent's commit than in the base's (within lib_a, into the checkout
// from outside, out of it, and from outside to elsewhere outside), in
// each mode: spawn empties exactly lib_a's dep-info, and the agent's app
// prints the new target's content. Outside files are old, as a stamped
// file would be. Without the emptying, checksum mode serves the old
// content within and out of the checkout, and mtime mode from outside to
// outside (seen: each prints the base's text, compiling nothing).
func TestLinkRetargets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a workspace per case and mode")
	}
	requireNightly(t)
	outside := t.TempDir()
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, content := range map[string]string{"out.txt": "out\n", "other.txt": "other\n"} {
		p := filepath.Join(outside, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	out, other := filepath.Join(outside, "out.txt"), filepath.Join(outside, "other.txt")
	unit := regexp.MustCompile(`^debug/\.fingerprint/lib_a-[0-9a-f]{16}/dep-lib-lib_a$`)
	cases := []struct {
		name, base, agent, prints string
		backend                   string // default: the store's (overlay on tmpfs or ext4)
	}{
		{"within the checkout", "one.txt", "two.txt", "two\n", ""},
		{"within the checkout, copy backend", "one.txt", "two.txt", "two\n", "copy"},
		{"into the checkout", out, "two.txt", "two\n", ""},
		{"out of the checkout", "one.txt", out, "out\n", ""},
		{"outside to outside", out, other, "other\n", ""},
	}
	// Cases whose base links alike share a world (a base per mode and
	// link): each commits its retarget on the base's commit, detached, and
	// spawns an agent of its own from it.
	type shared struct {
		w    *agenttest.World
		head string
	}
	worlds := map[string]shared{}
	for _, mode := range []string{"checksum", "mtime"} {
		for _, c := range cases {
			if _, ok := worlds[mode+"\x00"+c.base]; !ok {
				w := freshWorld(t, mode, c.base)
				head, err := w.Repo.Git("rev-parse", "HEAD")
				if err != nil {
					t.Fatal(err)
				}
				worlds[mode+"\x00"+c.base] = shared{w, strings.TrimSpace(head)}
			}
		}
	}
	for _, mode := range []string{"checksum", "mtime"} {
		for i, c := range cases {
			t.Run(mode+"/"+c.name, func(t *testing.T) {
				sw := worlds[mode+"\x00"+c.base]
				w := sw.w
				if _, err := w.Repo.Git("checkout", "-q", "--detach", sw.head); err != nil {
					t.Fatal(err)
				}
				link := w.Repo.Path("lib_a/src/data.txt")
				if err := os.Remove(link); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(c.agent, link); err != nil {
					t.Fatal(err)
				}
				commit, err := w.Repo.Commit("retarget")
				if err != nil {
					t.Fatal(err)
				}
				args := []string{"--from", commit}
				if c.backend != "" {
					args = append(args, "--backend", c.backend)
				}
				name := fmt.Sprintf("a%d", i)
				a := w.Spawn(t, name, args...)
				var rec struct {
					Fork struct {
						LinkRebuilds []string `json:"link_rebuilds"`
					} `json:"fork"`
				}
				data, err := os.ReadFile(filepath.Join(w.StoreDir(t), "agents", name, "agent.json"))
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(data, &rec); err != nil {
					t.Fatal(err)
				}
				if got := rec.Fork.LinkRebuilds; len(got) != 1 || !unit.MatchString(got[0]) {
					t.Errorf("emptied %q, want lib_a's dep-info alone", got)
				}
				if got := build(w, t, a); !slices.Equal(got, []string{"app", "lib_a"}) {
					t.Errorf("compiled %q, want [app lib_a]", got)
				}
				if got := output(w, t, a); got != c.prints+"b\n" {
					t.Errorf("app prints %q, want %q", got, c.prints+"b\n")
				}
			})
		}
	}
}

// TestSeededRefreshLinkRetarget: a refresh seeded from the base of a
// commit whose link lib_a/src/data.txt led elsewhere (within lib_a) empties
// lib_a's dep-info in its clone of the seed's target before its warm
// build, in each mode, so the new base and an agent of it print the new
// target's content. Without it, checksum mode's warm build finds lib_a
// fresh and the base serves the old text.
func TestSeededRefreshLinkRetarget(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a workspace twice per mode")
	}
	requireNightly(t)
	unit := regexp.MustCompile(`^debug/\.fingerprint/lib_a-[0-9a-f]{16}/dep-lib-lib_a$`)
	for _, mode := range []string{"checksum", "mtime"} {
		t.Run(mode, func(t *testing.T) {
			w := freshWorld(t, mode, "one.txt")
			link := w.Repo.Path("lib_a/src/data.txt")
			if err := os.Remove(link); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("two.txt", link); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Repo.Commit("retarget"); err != nil {
				t.Fatal(err)
			}
			var rec struct {
				Seed         string   `json:"seed"`
				LinkRebuilds []string `json:"link_rebuilds"`
				Modes        struct {
					Freshness string `json:"freshness"`
				} `json:"modes"`
			}
			out := w.MustFerry(t, "base", "--json")
			if err := json.Unmarshal([]byte(out), &rec); err != nil {
				t.Fatalf("ferry base --json: %v\n%s", err, out)
			}
			if rec.Seed == "" || rec.Modes.Freshness != mode {
				t.Fatalf("not a seeded %s refresh: %s", mode, out)
			}
			if got := rec.LinkRebuilds; len(got) != 1 || !unit.MatchString(got[0]) {
				t.Errorf("emptied %q, want lib_a's dep-info alone", got)
			}
			a := w.Spawn(t, "a")
			if got := build(w, t, a); len(got) != 0 {
				t.Errorf("first build compiled %q", got)
			}
			if got := output(w, t, a); got != "two\nb\n" {
				t.Errorf("app prints %q, want %q", got, "two\nb\n")
			}
		})
	}
}
