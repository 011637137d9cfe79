package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/store"
)

// An agent's PATH has the shim first and once, however the caller's PATH
// already named it (as written, with a trailing slash, through a link), and
// no entry twice: eval "$(ferry env)" twice leaves PATH as once.
func TestEnvironPathHasEachEntryOnce(t *testing.T) {
	root := t.TempDir()
	s, err := store.Open(filepath.Join(root, "home"), filepath.Join(root, "repo", ".git"), filepath.Join(root, "repo"))
	if err != nil {
		t.Fatal(err)
	}
	shim := s.ShimDir()
	if err := os.MkdirAll(shim, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "shim-link")
	if err := os.Symlink(shim, link); err != nil {
		t.Fatal(err)
	}
	r := &Record{Name: "a1"}
	path := strings.Join([]string{"/usr/bin", shim + "/", "/bin", link, "/usr/bin", "", shim, "/opt/x/bin"}, ":")
	env := Environ(s, r, []string{"PATH=" + path, "HOME=/h"})
	got := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			got = v
		}
	}
	want := strings.Join([]string{shim, "/usr/bin", "/bin", "", "/opt/x/bin"}, ":")
	if got != want {
		t.Fatalf("PATH\n%s\nwant\n%s", got, want)
	}
	again := Environ(s, r, env)
	for _, kv := range again {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok && v != want {
			t.Fatalf("PATH after a second Environ: %s", v)
		}
	}
}
