package base

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/store"
)

// twoSharingBases makes two ready bases in a store, the second's target
// linking every file of the first's (as a layered refresh's does, in a link
// window), and a third that shares nothing; then writes a byte into one
// shared file from outside Ferry, putting its mtime back. It returns the
// store, the bases' records and the written file's path inside a target.
func twoSharingBases(t *testing.T) (*store.Store, *Record, *Record, *Record, string) {
	t.Helper()
	s := testStore(t)
	ready := func(r *Record) *Record {
		r.Store = s.Dir
		if err := atomicfile.WriteJSON(s.Base(r.ID).Record, r, 0o644); err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := ready(sealedBase(t, s, "a-f", 120))
	linkTarget(t, s, a, "b-f")
	time.Sleep(60 * time.Millisecond) // past the window's slack
	br := ready(sealDir(t, s, "b-f"))
	c := ready(sealedBase(t, s, "c-f", 30))
	time.Sleep(60 * time.Millisecond)
	rel := "debug/d000/f0042"
	writeOutside(t, filepath.Join(a.Target, rel))
	for _, r := range []*Record{a, br} {
		if Verify(r) == nil {
			t.Fatalf("base %s passes its check after a write into a file it links", r.ID)
		}
	}
	return s, a, br, c, rel
}

// Removing a base's names in a link window moves the change time of every
// inode it shares into that window: without a look at the other bases
// first, a write made outside Ferry into a shared file would pass their
// checks from then on. ExposeSharedWrites makes each base that shows the
// write partial before the removal, and leaves the others alone.
func TestRemovalDoesNotHideASharedWrite(t *testing.T) {
	t.Run("without the guard, the removal hides it", func(t *testing.T) {
		s, a, b, _, _ := twoSharingBases(t)
		if err := linking(s, a.ID, func() error { return platform.RemoveTree(a.Dir) }); err != nil {
			t.Fatal(err)
		}
		if err := Verify(b); err != nil {
			t.Skipf("the removal did not move the shared inode's change time into its window here (%v): nothing to guard", err)
		}
	})
	t.Run("with it", func(t *testing.T) {
		s, a, b, c, rel := twoSharingBases(t)
		exposed, err := ExposeSharedWrites(s, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(exposed, []string{b.ID}) {
			t.Fatalf("made partial: %v, want [%s]", exposed, b.ID)
		}
		if _, err := os.Stat(s.Base(b.ID).Record); !os.IsNotExist(err) {
			t.Fatalf("%s's base.json: %v, want it gone", b.ID, err)
		}
		if err := Verify(c); err != nil {
			t.Fatalf("the base that shares nothing: %v", err)
		}
		if _, err := Read(s, c.ID); err != nil {
			t.Fatalf("the base that shares nothing is no longer ready: %v", err)
		}
		if err := linking(s, a.ID, func() error { return platform.RemoveTree(a.Dir) }); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(b.Target, rel)); err != nil {
			t.Fatalf("the partial base's files: %v", err) // gc's to delete
		}
	})
	t.Run("nothing written", func(t *testing.T) {
		s := testStore(t)
		a := sealedBase(t, s, "a-f", 20)
		a.Store = s.Dir
		if err := atomicfile.WriteJSON(s.Base(a.ID).Record, a, 0o644); err != nil {
			t.Fatal(err)
		}
		if exposed, err := ExposeSharedWrites(s, a.ID); err != nil || len(exposed) != 0 {
			t.Fatalf("an untouched base: %v, %v", exposed, err)
		}
	})
}

// A base that links its seed's files (a pull of a delta) is sealed as any
// other while the seed is unchanged; once something outside Ferry writes
// into a shared file, SealSharing refuses it, naming the file, and makes
// the seed partial first.
func TestSealSharingRefusesASeedWrittenInto(t *testing.T) {
	s := testStore(t)
	a := sealedBase(t, s, "a-f", 60)
	if err := atomicfile.WriteJSON(s.Base(a.ID).Record, a, 0o644); err != nil {
		t.Fatal(err)
	}
	b := linkTarget(t, s, a, "b-f")
	time.Sleep(60 * time.Millisecond) // past the window's slack
	if _, exposed, err := SealSharing(s, b.Dir, &Reuse{Seed: a}); err != nil || len(exposed) > 0 {
		t.Fatalf("an unchanged seed: %v (made partial: %v)", err, exposed)
	}
	rel := "debug/d000/f0007"
	writeOutside(t, filepath.Join(a.Target, rel))
	_, exposed, err := SealSharing(s, b.Dir, &Reuse{Seed: a})
	var sc *SeedChangedError
	if !errors.As(err, &sc) || sc.Seed != a.ID || !slices.Equal(sc.Files, []string{rel}) {
		t.Fatalf("after a write into %s: %v", rel, err)
	}
	if !slices.Equal(exposed, []string{a.ID}) {
		t.Errorf("made partial: %v, want [%s]", exposed, a.ID)
	}
	if _, err := os.Stat(s.Base(a.ID).Record); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the seed is still ready: %v", err)
	}
}

// linkTarget makes base id's target link every file of a's, in a link
// window, as a layered refresh's or a pull's does, and returns id's files.
func linkTarget(t *testing.T, s *store.Store, a *Record, id string) store.Base {
	t.Helper()
	b := s.Base(id)
	if err := os.MkdirAll(b.Target, 0o755); err != nil {
		t.Fatal(err)
	}
	err := linking(s, id, func() error {
		return filepath.WalkDir(a.Target, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(a.Target, p)
			if d.IsDir() {
				return os.MkdirAll(filepath.Join(b.Target, rel), 0o755)
			}
			return os.Link(p, filepath.Join(b.Target, rel))
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeOutside writes a byte into file f as a process outside Ferry would,
// the same size, and puts its mtime back.
func writeOutside(t *testing.T, f string) {
	t.Helper()
	fi, err := os.Stat(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte("y"), 0o644); err != nil { // same size
		t.Fatal(err)
	}
	if err := os.Chtimes(f, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}
