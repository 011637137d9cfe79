package fork

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/treetest"

	"github.com/ferrydev/ferry/internal/unpriv"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/platform"
)

func TestSelect(t *testing.T) {
	tmp := treetest.Dir(t, os.TempDir())
	blocker, err := platform.Real().OverlayBlocker(tmp)
	if err != nil {
		t.Fatalf("overlay probe in %s: %v", tmp, err)
	}
	if blocker != nil {
		t.Logf("overlay is blocked in %s (%s): %v", tmp, treetest.FSName(tmp), blocker)
	}
	if ok, err := CanReflink(tmp); err != nil {
		t.Fatal(err)
	} else if ok {
		t.Logf("%s (%s) clones files: auto picks reflink there", tmp, treetest.FSName(tmp))
		if b, err := Select(NameAuto, tmp); err != nil || b.Name() != NameReflink {
			t.Errorf("Select(auto) on %s = %v, %v; want reflink", treetest.FSName(tmp), b, err)
		}
	} else {
		// No clones: overlay where it mounts, else copy.
		want := NameOverlay
		if blocker != nil {
			want = NameCopy
		}
		b, err := Select(NameAuto, tmp)
		if err != nil || b.Name() != want {
			t.Errorf("Select(auto) on %s = %v, %v; want %s", treetest.FSName(tmp), b, err, want)
		}
		_, err = Select(NameReflink, tmp)
		if failure.KindOf(err) != failure.Blocked || !strings.Contains(err.Error(), treetest.FSName(tmp)) ||
			!strings.Contains(failure.HintOf(err), "reflink=1") {
			t.Errorf("Select(reflink) on %s: %v (hint %q); want Blocked naming the filesystem, with a hint",
				treetest.FSName(tmp), err, failure.HintOf(err))
		}
	}
	b, err := Select(NameOverlay, tmp)
	switch {
	case blocker == nil && (err != nil || b.Name() != NameOverlay):
		t.Errorf("Select(overlay) on %s = %v, %v; want overlay", treetest.FSName(tmp), b, err)
	case blocker != nil && (failure.KindOf(err) != failure.Blocked || failure.HintOf(err) != blocker.Remedy):
		t.Errorf("Select(overlay) on %s: %v (hint %q); want Blocked with the remedy %q",
			treetest.FSName(tmp), err, failure.HintOf(err), blocker.Remedy)
	}
	if b, err := Select(NameCopy, tmp); err != nil || b.Name() != NameCopy {
		t.Errorf("Select(copy) = %v, %v", b, err)
	}

	if xfs, why := treetest.XFSRoot(); xfs == "" {
		t.Log("skipping auto on XFS: " + why)
	} else {
		// Reflink first, where the store clones files.
		dir := treetest.Dir(t, xfs)
		for _, name := range []string{NameAuto, NameReflink} {
			if b, err := Select(name, dir); err != nil || b.Name() != NameReflink {
				t.Errorf("Select(%s) on %s (%s) = %v, %v; want reflink", name, dir, treetest.FSName(dir), b, err)
			}
		}
		// An explicit overlay is overlay there too, where it mounts.
		if blocker, err := platform.Real().OverlayBlocker(dir); err != nil {
			t.Errorf("overlay probe in %s: %v", dir, err)
		} else if blocker != nil {
			t.Logf("overlay is blocked in %s (%s): %v", dir, treetest.FSName(dir), blocker)
		} else if b, err := Select(NameOverlay, dir); err != nil || b.Name() != NameOverlay {
			t.Errorf("Select(overlay) on %s (%s) = %v, %v; want overlay", dir, treetest.FSName(dir), b, err)
		}
	}

	for _, c := range []struct {
		name string
		kind failure.Kind
		hint string
	}{
		{"hardlink", failure.Usage, "File::create"},
		{"clonefile", failure.Usage, "overlay"},
		{"", failure.Usage, "auto"},
	} {
		_, err := Select(c.name, tmp)
		if err == nil || failure.KindOf(err) != c.kind || !strings.Contains(failure.HintOf(err), c.hint) {
			t.Errorf("Select(%q): %v (kind %v, hint %q); want %v with a hint mentioning %q",
				c.name, err, failure.KindOf(err), failure.HintOf(err), c.kind, c.hint)
		}
	}

	// A store the probes cannot use is an error, not a silent copy.
	for _, name := range []string{NameAuto, NameOverlay} {
		if b, err := Select(name, filepath.Join(tmp, "missing")); err == nil {
			t.Errorf("Select(%s) in a missing dir = %v, want an error", name, b.Name())
		}
	}
}

func TestByName(t *testing.T) {
	for _, name := range []string{NameReflink, NameCopy, NameOverlay} {
		if b, err := ByName(name); err != nil || b.Name() != name {
			t.Errorf("ByName(%s) = %v, %v", name, b, err)
		}
	}
	for _, name := range []string{NameAuto, "hardlink", "bogus"} {
		if b, err := ByName(name); err == nil {
			t.Errorf("ByName(%s) = %v, want an error", name, b.Name())
		}
	}
}

func TestCanReflink(t *testing.T) {
	if _, err := CanReflink(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("CanReflink of a missing dir: no error")
	}
	dir := treetest.Dir(t, os.TempDir())
	ok, err := CanReflink(dir)
	t.Logf("%s (%s): CanReflink = %v, %v", dir, treetest.FSName(dir), ok, err)
	if err != nil {
		t.Fatal(err)
	}
	if xfs, why := treetest.XFSRoot(); xfs == "" {
		t.Log("skipping XFS: " + why)
	} else if ok, err := CanReflink(treetest.Dir(t, xfs)); !ok || err != nil {
		t.Errorf("CanReflink on %s = %v, %v; want true", xfs, ok, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("the probe left files behind: %v", entries)
	}
}

func TestUnprivileged(t *testing.T) {
	unpriv.Rerun(t, "^Test(Conformance|AddingABackend|Select|SelectOverlayBlocked|ByName|CanReflink|OverlayInexpressiblePath)$")
}
