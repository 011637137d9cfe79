package agenttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/fixture"
)

type AdoptionJSON struct {
	AgentJSON
	Tool    string `json:"tool"`
	Adopted bool   `json:"adopted"`
	Already bool   `json:"already"`
}

// AddWorktree makes a worktree the way agent tools do, with plain git.
func (w *World) AddWorktree(t *testing.T, name string, args ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if out, err := w.Repo.Git(append([]string{"worktree", "add", "--quiet", path}, args...)...); err != nil {
		t.Fatalf("git worktree add: %v\n%s", err, out)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	return real
}

// ShimPath is PATH with the shim first, as a tool's shell has it once the
// profile line is in place.
func (w *World) ShimPath() string {
	return "PATH=" + filepath.Join(w.Home, "bin") + ":" + os.Getenv("PATH")
}

func (w *World) Adopt(t *testing.T, args ...string) AdoptionJSON {
	t.Helper()
	out, stderr, err := w.Ferry(w.Repo.Dir, []string{w.ShimPath()}, append([]string{"adopt", "--json"}, args...)...)
	if err != nil {
		t.Fatalf("ferry adopt %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	var a AdoptionJSON
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatalf("adopt output %q: %v", out, err)
	}
	return a
}

// CheckMarker runs the agent's binary in its sandbox and compares what it
// prints with what the worktree's sources say it prints.
func (w *World) CheckMarker(t *testing.T, worktree string) {
	t.Helper()
	bin := filepath.Join(w.StoreDir(t), "mnt", "target", "debug", fixture.BinName)
	out, stderr, err := w.Ferry(worktree, nil, "run", "--", bin)
	if err != nil {
		t.Fatalf("ferry run %s: %v\n%s", bin, err, stderr)
	}
	want, err := fixture.ExpectedMarker(worktree)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != strings.TrimSpace(want) {
		t.Fatalf("the adopted agent's binary prints\n%s\nwant\n%s", out, want)
	}
}

// AgentsByWorktree lists the store's agents by worktree.
func (w *World) AgentsByWorktree(t *testing.T) map[string]AdoptionJSON {
	t.Helper()
	var list []AdoptionJSON
	if err := json.Unmarshal([]byte(w.MustFerry(t, "list", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]AdoptionJSON{}
	for _, a := range list {
		out[a.Worktree] = a
	}
	return out
}
