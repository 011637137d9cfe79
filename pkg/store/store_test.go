package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/failure"
)

func TestKeyIsStableAndDistinct(t *testing.T) {
	a := Key("/home/u/src/widget/.git")
	if a != Key("/home/u/src/widget/.git/") {
		t.Fatal("key depends on a trailing slash")
	}
	if !strings.HasPrefix(a, "widget-") || len(a) != len("widget-")+12 {
		t.Fatalf("key %q", a)
	}
	if a == Key("/home/u/other/widget/.git") {
		t.Fatal("two repositories with one name share a store key")
	}
	if k := Key("/srv/My Repo.git"); !strings.HasPrefix(k, "My-Repo-") {
		t.Fatalf("bare repo key %q", k)
	}
}

func TestOpenLaysOutAndRefusesInsideRepo(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	os.MkdirAll(filepath.Join(repo, ".git"), 0o755)
	s, err := Open(filepath.Join(root, "store"), filepath.Join(repo, ".git"), repo)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Dir); err == nil {
		t.Fatal("Open created the store; only Init may")
	}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{s.MntSrc(), s.MntTarget(), s.BasesDir(), s.AgentsDir()} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Fatalf("%s not created: %v", d, err)
		}
	}
	if id, _ := s.Current(); id != "" {
		t.Fatalf("fresh store has current %q", id)
	}
	id := strings.Repeat("d5", 20) + "-" + strings.Repeat("ca", 8)
	if err := s.SetCurrent(id); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Current(); got != id {
		t.Fatalf("current = %q", got)
	}
	// A current cut short names itself, with the fix.
	if err := os.WriteFile(s.CurrentPath(), []byte(id[:10]), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := s.Current()
	if d := failure.AsDamaged(err); got != "" || d == nil || d.Path != s.CurrentPath() || failure.KindOf(err) != failure.Refused || !strings.Contains(failure.HintOf(err), "ferry base") {
		t.Fatalf("truncated current: %q, %v (hint %q)", got, err, failure.HintOf(err))
	}

	_, err = Open(filepath.Join(repo, "target", "ferry"), filepath.Join(repo, ".git"), repo)
	if failure.KindOf(err) != failure.Usage || failure.HintOf(err) == "" {
		t.Fatalf("store inside the worktree: err = %v, want a usage error with a hint", err)
	}
	if _, err := os.Stat(filepath.Join(repo, "target")); err == nil {
		t.Fatal("refused store left a directory behind")
	}
}
