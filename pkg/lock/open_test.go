package lock

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/failure"
)

// A symbolic link at a lock path is refused by every way of taking the
// lock, with an error naming the path, and never followed: a dangling
// link's target is not created, an existing target is not touched.
func TestSymlinkRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "victim")
	if err := os.WriteFile(target, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		filepath.Join(dir, "existing.lock"): target,
		filepath.Join(dir, "dangling.lock"): filepath.Join(dir, "made-by-ferry"),
	}
	for p, to := range links {
		if err := os.Symlink(to, p); err != nil {
			t.Fatal(err)
		}
	}
	takers := map[string]func(string) (*Lock, error){
		"Take": Take, "TryTake": TryTake, "Shared": Shared, "TryShared": TryShared,
	}
	for p := range links {
		for name, take := range takers {
			l, err := take(p)
			if err == nil {
				l.WriteOwner()
				l.Release()
				t.Errorf("%s(%s) followed the link", name, filepath.Base(p))
				continue
			}
			if !errors.Is(err, ErrSymlink) || failure.KindOf(err) != failure.Refused ||
				!strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "symbolic link") {
				t.Errorf("%s(%s) = %v (kind %v), want a refusal naming the path as a symbolic link", name, filepath.Base(p), err, failure.KindOf(err))
			}
			if failure.HintOf(err) == "" {
				t.Errorf("%s(%s): no hint", name, filepath.Base(p))
			}
		}
		if _, err := Held(p); !errors.Is(err, ErrSymlink) {
			t.Errorf("Held(%s) = %v, want ErrSymlink", filepath.Base(p), err)
		}
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "precious\n" {
		t.Errorf("the link's target now holds %q (%v)", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "made-by-ferry")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a dangling link's target was created: %v", err)
	}
}
