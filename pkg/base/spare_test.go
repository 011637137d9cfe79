package base_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/store"
)

// The spare checkout a build makes beside its warm commands is what the
// next build's checkout starts from: that checkout must be exactly a fresh
// checkout of its commit, whatever the commit changed (an edit, a new file
// in a new directory, a removed file, a mode change, a symlink).
func TestSpareCheckoutIsAFreshCheckout(t *testing.T) {
	e := setup(t, "cargo build -p "+fixture.ChainC)
	first, err := e.build(t, "")
	if err != nil {
		t.Fatal(err)
	}
	e.checkSpare(t, first.Record.Commit)
	kept := "crates/chain-a/src/lib.rs" // unchanged by the next commit
	before := inodeOf(t, filepath.Join(e.store.Spare().Src, kept))

	if err := e.repo.Append(fixture.LibPath(fixture.ChainC), "\n// spare\n"); err != nil {
		t.Fatal(err)
	}
	if err := e.repo.Write("notes/deep/new.txt", "new\n"); err != nil {
		t.Fatal(err)
	}
	if err := e.repo.Remove("README.md"); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.repo.Path("shared/data.txt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../shared/data.txt", e.repo.Path("notes/data-link")); err != nil {
		t.Fatal(err)
	}
	next, err := e.repo.Commit("changes of every kind")
	if err != nil {
		t.Fatal(err)
	}
	second, log := e.buildLogged(t, e.store, "", false)
	if !strings.Contains(log, "from the spare checkout") {
		t.Fatalf("the second build did not take the spare checkout:\n%s", log)
	}
	if second.Record.Commit != next {
		t.Fatalf("second base at %s, want %s", second.Record.Commit, next)
	}
	if got := inodeOf(t, filepath.Join(second.Record.Src, kept)); got != before {
		t.Errorf("%s is inode %v, not the spare's %v: the checkout was not the spare's", kept, got, before)
	}
	sameCheckout(t, second.Record.Src, e.freshCheckout(t, next))
	if dirty, err := e.g.Dirty(second.Record.Src); err != nil || len(dirty) != 0 {
		t.Fatalf("the base's checkout is not clean: %v %v", dirty, err)
	}
	e.checkSpare(t, next)
}

// A spare made in another boot (its files may have been torn by a crash)
// is dropped, not taken, and so is a spare a build was killed while
// making (no ready file); either way the next spare is made, and only it
// stays registered.
func TestUntrustedSpareIsDropped(t *testing.T) {
	e := setup(t, "cargo build -p "+fixture.ChainC)
	if _, err := e.build(t, ""); err != nil {
		t.Fatal(err)
	}
	sp := e.store.Spare()
	for _, c := range []struct {
		name  string
		spoil func()
	}{
		{"another boot", func() {
			b, err := os.ReadFile(sp.Ready)
			if err != nil {
				t.Fatal(err)
			}
			var rec map[string]string
			if err := json.Unmarshal(b, &rec); err != nil {
				t.Fatal(err)
			}
			rec["boot"] = "a-boot-before-a-crash"
			b, _ = json.Marshal(rec)
			if err := os.WriteFile(sp.Ready, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"no ready file", func() {
			if err := os.Remove(sp.Ready); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.spoil()
			if err := e.repo.Append(fixture.LibPath(fixture.ChainC), "\n// "+c.name+"\n"); err != nil {
				t.Fatal(err)
			}
			next, err := e.repo.Commit(c.name)
			if err != nil {
				t.Fatal(err)
			}
			res, log := e.buildLogged(t, e.store, "", false)
			if strings.Contains(log, "from the spare checkout") {
				t.Fatalf("the build took the spare:\n%s", log)
			}
			sameCheckout(t, res.Record.Src, e.freshCheckout(t, next))
			e.checkSpare(t, next)
		})
	}
}

// git rewrites only the files whose blob changed, so a spare whose commit
// converts files otherwise (another .gitattributes) is not taken: the
// base's checkout has the new conversion, as a fresh checkout does.
func TestSpareNotTakenAcrossAttributes(t *testing.T) {
	e := setup(t, "cargo build -p "+fixture.ChainC)
	if _, err := e.build(t, ""); err != nil {
		t.Fatal(err)
	}
	if err := e.repo.Write(".gitattributes", "*.txt text eol=crlf\n"); err != nil {
		t.Fatal(err)
	}
	next, err := e.repo.Commit("crlf text files")
	if err != nil {
		t.Fatal(err)
	}
	res, log := e.buildLogged(t, e.store, "", false)
	if strings.Contains(log, "from the spare checkout") {
		t.Fatalf("the build took the spare across a .gitattributes change:\n%s", log)
	}
	b, err := os.ReadFile(filepath.Join(res.Record.Src, "shared/data.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("\r\n")) {
		t.Fatalf("shared/data.txt in the base has no CRLF line ends: %q", b)
	}
	sameCheckout(t, res.Record.Src, e.freshCheckout(t, next))
}

// freshCheckout checks commit out in a new worktree, removed when the
// test ends.
func (e *env) freshCheckout(t *testing.T, commit string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fresh")
	if _, err := e.repo.Git("worktree", "add", "-q", "--detach", dir, commit); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.repo.Git("worktree", "remove", "--force", dir) })
	return dir
}

// checkSpare fails unless the store's spare is a complete, clean checkout
// of commit, registered once, and no other worktree is left under it.
func (e *env) checkSpare(t *testing.T, commit string) {
	t.Helper()
	sp := e.store.Spare()
	b, err := os.ReadFile(sp.Ready)
	if err != nil {
		t.Fatalf("no ready spare: %v", err)
	}
	var rec struct{ Commit string }
	if err := json.Unmarshal(b, &rec); err != nil || rec.Commit != commit {
		t.Fatalf("spare ready file %s, want commit %s (%v)", b, commit, err)
	}
	if head, err := e.g.Run(sp.Src, "rev-parse", "HEAD"); err != nil || strings.TrimSpace(head) != commit {
		t.Fatalf("spare HEAD %q, want %s (%v)", head, commit, err)
	}
	if dirty, err := e.g.Dirty(sp.Src); err != nil || len(dirty) != 0 {
		t.Fatalf("spare checkout not clean: %v %v", dirty, err)
	}
	wts, err := e.g.Worktrees()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, w := range wts {
		if w.Prunable {
			t.Errorf("worktree %s is registered but gone", w.Path)
		}
		if strings.HasPrefix(resolved(w.Path)+"/", resolved(sp.Dir)+"/") {
			n++
			// git worktree list -v says whose it is.
			if !w.Locked || w.LockReason != store.SpareCheckoutReason {
				t.Errorf("the spare %s is listed locked %v (%q), not as Ferry's spare", w.Path, w.Locked, w.LockReason)
			}
		}
		if strings.HasPrefix(resolved(w.Path)+"/", resolved(e.store.BasesDir())+"/") {
			id := filepath.Base(filepath.Dir(w.Path))
			if !w.Locked || w.LockReason != store.BaseCheckoutReason(id) {
				t.Errorf("base checkout %s is listed locked %v (%q), not as Ferry's checkout of base %s", w.Path, w.Locked, w.LockReason, id)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d worktrees registered under the spare's directory, want 1", n)
	}
}

// sameCheckout fails unless the checkouts at a and b hold the same tracked
// and untracked entries (their .git files aside): types, permission bits,
// bytes and link targets.
func sameCheckout(t *testing.T, a, b string) {
	t.Helper()
	list := func(root string) map[string]string {
		out := map[string]string{}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			if rel == ".git" {
				return nil
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			desc := fi.Mode().String()
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				l, err := os.Readlink(p)
				if err != nil {
					return err
				}
				desc += " -> " + l
			case fi.Mode().IsRegular():
				c, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				desc += " " + string(c)
			}
			out[rel] = desc
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	la, lb := list(a), list(b)
	for p, d := range la {
		if lb[p] != d {
			t.Errorf("%s: %q in the base's checkout, %q in a fresh one", p, d, lb[p])
		}
	}
	for p := range lb {
		if _, ok := la[p]; !ok {
			t.Errorf("%s: missing from the base's checkout", p)
		}
	}
}
