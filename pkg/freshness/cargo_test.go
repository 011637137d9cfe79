package freshness

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/git"
)

// cargoBuild runs cargo build --workspace in dir with its own target dir and
// returns cargo's standard error.
func cargoBuild(t *testing.T, dir, home, target string) string {
	t.Helper()
	cmd := exec.Command("cargo", "build", "--workspace")
	cmd.Dir = dir
	cmd.Env = fixture.CargoEnv(os.Environ(), home, target)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("cargo build in %s: %v\n%s", dir, err, stderr.String())
	}
	return stderr.String()
}

var compiling = regexp.MustCompile(`(?m)^\s*Compiling (\S+)`)

func compiled(stderr string) []string {
	var out []string
	for _, m := range compiling.FindAllStringSubmatch(stderr, -1) {
		out = append(out, m[1])
	}
	slices.Sort(out)
	return out
}

// TestCargoReusesStampedCheckout is the end-to-end check with real cargo: a
// warm base build, its target copied with mtimes, and an agent checkout of
// the same commit stamped by Verify and Apply compiles nothing; a member's
// lib.rs edited in the agent (same length, mtime forced to the stamp time
// before Verify, as a clock hazard would) is refused by Verify, and that
// crate is rebuilt.
func TestCargoReusesStampedCheckout(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: builds a Cargo workspace (about 20 s); run without -short")
	}
	fixture.RequireTools(t)
	tmp := t.TempDir()
	r, err := fixture.Generate(filepath.Join(tmp, "repo"), fixture.Options{})
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(tmp, "cargo-home")

	// The base: a stamped checkout and its warm build.
	baseSrc := filepath.Join(tmp, "base", "src")
	try(r.Git("worktree", "add", "-q", "--detach", baseSrc, r.Head)).must(t)
	entries := try(try(git.Open(baseSrc)).must(t).LsFiles("")).must(t)
	try(StampBaseCheckout(baseSrc, entries)).must(t)
	t1, t2 := filepath.Join(tmp, "base", "target"), filepath.Join(tmp, "t2")
	start := time.Now()
	cargoBuild(t, baseSrc, home, t1)
	t.Logf("base build: %v", time.Since(start).Round(time.Millisecond))
	notBefore := time.Now()
	if out, err := exec.Command("cp", "-a", t1, t2).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v\n%s", err, out)
	}

	// An agent at the same commit: everything but the symlink is stamped,
	// and nothing compiles.
	agent := filepath.Join(tmp, "agents", "one")
	try(r.Git("worktree", "add", "-q", "--detach", agent, r.Head)).must(t)
	in := input(t, agent, baseSrc, r.Head)
	p := spawn(t, in, notBefore)
	want := []Skip{{fixture.SymlinkPath, ReasonSymlink}}
	if got := p.Skipped(); !slices.Equal(got, want) {
		t.Errorf("skipped %v, want %v", got, want)
	}
	if got := compiled(cargoBuild(t, agent, home, t2)); len(got) != 0 {
		t.Fatalf("the stamped agent compiled %q", got)
	}

	// A second agent edits chain-b's lib.rs (same length) and forces its
	// mtime to the stamp time before Verify.
	agent2 := filepath.Join(tmp, "agents", "two")
	try(r.Git("worktree", "add", "-q", "--detach", agent2, r.Head)).must(t)
	lib := filepath.Join(agent2, filepath.FromSlash(fixture.LibPath(fixture.ChainB)))
	src, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(src), "//! chain-b:", "//! CHAIN-B:", 1)
	if edited == string(src) || len(edited) != len(src) {
		t.Fatal("the edit did not apply")
	}
	if err := os.WriteFile(lib, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(lib, StampTime, StampTime); err != nil {
		t.Fatal(err)
	}
	in = input(t, agent2, baseSrc, r.Head)
	p = try(Verify(in)).must(t)
	if slices.Contains(p.Files(), fixture.LibPath(fixture.ChainB)) {
		t.Fatal("Verify would stamp the edited lib.rs")
	}
	if r := reasonOf(p, fixture.LibPath(fixture.ChainB)); r != ReasonContent {
		t.Errorf("edited lib.rs skipped for %q, want %q", r, ReasonContent)
	}
	try(p.Apply()).must(t)
	try(FreshenSkipped(agent2, p, notBefore)).must(t)
	got := compiled(cargoBuild(t, agent2, home, t2))
	// chain-b and what depends on it, nothing else.
	if wantC := []string{fixture.AppCrate, fixture.ChainA, fixture.ChainB}; !slices.Equal(got, wantC) {
		t.Errorf("the edited agent compiled %q, want %q", got, wantC)
	}
	marker, err := fixture.ExpectedMarker(agent2)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(t2, "debug", fixture.BinName)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(out)) != marker {
		t.Errorf("app printed\n%s\nwant\n%s", out, marker)
	}
}
