package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/failure"
)

// A sealed plan: the store (the layout's root) is read-only in the
// namespace, except the canonical mounts and the writable paths, whatever
// name a write uses; the host sees only the writes that went through.
func TestSealedStore(t *testing.T) {
	l := newLayout(t)
	root := filepath.Dir(filepath.Dir(filepath.Dir(l.src)))
	keep := filepath.Join(root, "worktrees")
	os.MkdirAll(keep, 0o755)
	p := l.plan(`
		echo mine > "$T/mine" || exit 10
		echo src > new.txt || exit 11
		echo kept > ` + keep + `/kept || exit 12
		for f in ` + l.target + `/direct ` + l.src + `/direct ` + root + `/planted ` + root + `/bases/planted; do
			if echo X > "$f" 2>/dev/null; then echo "wrote $f"; exit 13; fi
		done
		mkdir ` + root + `/newdir 2>/dev/null && exit 14
		grep -q " $T " /proc/self/mountinfo || exit 15
		echo ok`)
	p.Store, p.Writable = root, []string{keep, filepath.Join(root, "not-there")}
	out, err := run(t, p)
	if err != nil || !strings.HasSuffix(out, "ok\n") {
		t.Fatalf("%v\n%q", err, out)
	}
	for f, want := range map[string]string{filepath.Join(l.target, "mine"): "mine\n", filepath.Join(l.src, "new.txt"): "src\n", filepath.Join(keep, "kept"): "kept\n"} {
		if b, err := os.ReadFile(f); err != nil || string(b) != want {
			t.Errorf("%s on the host: %q, %v", f, b, err)
		}
	}
	for _, f := range []string{filepath.Join(l.target, "direct"), filepath.Join(root, "planted"), filepath.Join(root, "newdir")} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s exists on the host", f)
		}
	}
}

// An overlay under a sealed store still writes its upper dir; the upper dir
// itself, and the lower, are read-only by their host paths.
func TestSealedStoreOverlay(t *testing.T) {
	l := newOverlayLayout(t)
	p := l.plan(`echo changed > hello.txt || exit 10
		if echo X > ` + l.upper + `/direct 2>/dev/null; then exit 11; fi
		if echo X > ` + l.lower + `/hello.txt 2>/dev/null; then exit 12; fi
		echo built > "$T/out" || exit 13
		echo ok`)
	p.Store = l.root
	out, err := run(t, p)
	if err != nil || !strings.HasSuffix(out, "ok\n") {
		t.Fatalf("%v\n%q", err, out)
	}
	if got := readFile(t, filepath.Join(l.upper, "hello.txt")); got != "changed\n" {
		t.Errorf("upper holds %q", got)
	}
	if got := readFile(t, filepath.Join(l.lower, "hello.txt")); got != "from the base\n" {
		t.Errorf("lower holds %q", got)
	}
	if got := readFile(t, filepath.Join(l.target, "out")); got != "built\n" {
		t.Errorf("bound target holds %q", got)
	}
}

// A symbolic link planted below the store, at a bind's source or on its
// way, is never followed: the sandbox is refused as an unsafe store path
// (failure.Refused), not explained as a host blocker, and nothing runs.
func TestStoreLinkRefused(t *testing.T) {
	l := newLayout(t)
	root := filepath.Dir(filepath.Dir(filepath.Dir(l.src)))
	other := filepath.Join(root, "bases", "b2", "target")
	os.MkdirAll(other, 0o755)
	moved := l.target + ".real"
	if err := os.Rename(l.target, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, l.target); err != nil {
		t.Fatal(err)
	}
	p := l.plan(`echo X > "$T/through-link"`)
	p.Store = root
	_, err := run(t, p)
	var se *SetupError
	if !errors.As(err, &se) || se.Blocker != nil || se.Path != l.target {
		t.Fatalf("err = %#v, want a store path error for %s", err, l.target)
	}
	if k := failure.KindOf(err); k != failure.Refused || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("kind %v: %v", k, err)
	}
	if _, err := os.Stat(filepath.Join(other, "through-link")); err == nil {
		t.Fatal("the command ran and wrote through the link")
	}
	// A link on the way (a directory above the source) is refused too.
	os.Remove(l.target)
	os.Rename(moved, l.target)
	b1 := filepath.Dir(l.src)
	if err := os.Rename(b1, b1+".real"); err != nil {
		t.Fatal(err)
	}
	os.Symlink(b1+".real", b1)
	if _, err := run(t, p); failure.KindOf(err) != failure.Refused {
		t.Fatalf("a link above the source: %v", err)
	}
	// Without a store in the plan, paths are used as given (the probe).
	p.Store = ""
	if out, err := run(t, p); err != nil {
		t.Fatalf("unsealed plan: %v\n%s", err, out)
	}
}
