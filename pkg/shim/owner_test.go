package shim

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/store"
)

// TestRefusesAStoreOthersCanChange: in a linked worktree whose store has an
// agents/ directory, the shim reads agent records only from a store whose
// own directories are the caller's alone.
func TestRefusesAStoreOthersCanChange(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	root, _ := filepath.EvalSymlinks(t.TempDir())
	repo, wt := filepath.Join(root, "repo"), filepath.Join(root, "wt")
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	os.Mkdir(repo, 0o755)
	git(repo, "init", "-q", "-b", "main")
	git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "init")
	git(repo, "worktree", "add", "-q", "--detach", wt)

	parent := filepath.Join(root, "home")
	key := store.Key(filepath.Join(repo, ".git"))
	s := &store.Store{Parent: parent, Dir: filepath.Join(parent, key), Key: key}
	for _, d := range []string{s.AgentsDir(), s.ShimDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := &Call{Args: []string{"-V"}, Dir: wt, Env: []string{"PATH=/usr/bin:/bin"}, ShimDir: s.ShimDir()}

	if a, _, _, err := c.resolve(); a != nil || err != nil {
		t.Fatalf("no agent record in an own store: %v, %v", a, err)
	}
	for _, d := range []string{s.Dir, parent, s.ShimDir()} {
		os.Chmod(d, 0o775)
		_, _, _, err := c.resolve()
		if failure.KindOf(err) != failure.Refused || !strings.Contains(err.Error(), d+" is writable by its group") {
			t.Fatalf("%s mode 0775: %v", d, err)
		}
		os.Chmod(d, 0o755)
	}
}
