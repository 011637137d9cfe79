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
	if err := s.SetCurrent("abc-123"); err != nil {
		t.Fatal(err)
	}
	if id, _ := s.Current(); id != "abc-123" {
		t.Fatalf("current = %q", id)
	}

	_, err = Open(filepath.Join(repo, "target", "ferry"), filepath.Join(repo, ".git"), repo)
	if failure.KindOf(err) != failure.Usage || failure.HintOf(err) == "" {
		t.Fatalf("store inside the worktree: err = %v, want a usage error with a hint", err)
	}
	if _, err := os.Stat(filepath.Join(repo, "target")); err == nil {
		t.Fatal("refused store left a directory behind")
	}
}
