package base

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/git"
)

// A plain call at the root selects less than the workspace where the root
// manifest is a package's or names default members; a virtual manifest
// without them, or one that does not parse, says no.
func TestPlainSelectsLess(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		c := exec.Command("git", args...)
		c.Dir = dir
		c.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("init", "-q", "-b", "main")
	g, err := git.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for manifest, want := range map[string]bool{
		"[workspace]\nmembers = [\"a\", \"b\"]\n":                                           false,
		"[workspace]\nmembers = [\"a\", \"b\"]\ndefault-members = [\"a\"]\n":                true,
		"[package]\nname = \"root\"\nversion = \"0.1.0\"\n[workspace]\nmembers = [\"a\"]\n": true,
		"[workspace\nbroken": false,
	} {
		if err := os.WriteFile(filepath.Join(dir, "Cargo.toml"), []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		run("add", "Cargo.toml")
		run("commit", "-q", "--allow-empty", "-m", "m")
		if got := plainSelectsLess(Options{Repo: g}, run("rev-parse", "HEAD")); got != want {
			t.Errorf("%q: %t, want %t", manifest, got, want)
		}
	}
}
