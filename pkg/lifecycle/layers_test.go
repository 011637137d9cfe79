package lifecycle

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/store"
)

// baseTarget makes a base target dir with a mode and times of its own, for
// an overlay's upper to take.
func baseTarget(t *testing.T) (string, unix.Stat_t) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "target")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	when := time.Date(2024, 3, 1, 12, 0, 0, 123456789, time.UTC)
	if err := os.Chtimes(dir, when, when); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return dir, st
}

// checkFreshLayers fails unless agentDir holds an empty work dir and an
// empty upper dir with the base target's mode and mtime, to the
// nanosecond: the root of the overlay's view is the upper's.
func checkFreshLayers(t *testing.T, agentDir string, base unix.Stat_t) {
	t.Helper()
	files := store.AgentFiles(agentDir)
	for _, d := range []string{files.Upper, files.Work} {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatalf("layer %s: %v", d, err)
		}
		if len(ents) != 0 {
			t.Errorf("layer %s holds %d entries, want none", d, len(ents))
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(files.Upper, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o777 != base.Mode&0o777 {
		t.Errorf("upper mode %o, want the base target's %o", st.Mode&0o777, base.Mode&0o777)
	}
	if st.Mtim != base.Mtim {
		t.Errorf("upper mtime %v, want the base target's %v", st.Mtim, base.Mtim)
	}
}

func TestNewLayersTakeTheBaseTargetsModeAndTimes(t *testing.T) {
	_, base := baseTarget(t)
	dir := t.TempDir()
	if err := NewLayers(dir, &base); err != nil {
		t.Fatal(err)
	}
	checkFreshLayers(t, dir, base)
	// Made in the caller's own new directory: existing layers are an
	// error, never merged into.
	if err := NewLayers(dir, &base); err == nil {
		t.Fatal("NewLayers over existing layers succeeded")
	}
}

// ResetOverlay empties an upper that holds an agent's writes, and finishes
// a reset a crash interrupted (a layer missing); it leaves nothing of its
// own in the agent dir.
func TestResetOverlayEmptiesTheLayers(t *testing.T) {
	target, base := baseTarget(t)
	dir := t.TempDir()
	if err := NewLayers(dir, &base); err != nil {
		t.Fatal(err)
	}
	files := store.AgentFiles(dir)
	if err := os.MkdirAll(filepath.Join(files.Upper, "debug", "deps"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(files.Upper, "debug", "deps", "torn.rlib"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(files.Work, "work"), 0); err != nil { // as overlayfs leaves it
		t.Fatal(err)
	}
	if err := ResetOverlay(target, dir); err != nil {
		t.Fatal(err)
	}
	checkFreshLayers(t, dir, base)

	if err := os.RemoveAll(files.Upper); err != nil {
		t.Fatal(err)
	}
	if err := ResetOverlay(target, dir); err != nil {
		t.Fatalf("reset with the upper missing: %v", err)
	}
	checkFreshLayers(t, dir, base)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != filepath.Base(files.Upper) && e.Name() != filepath.Base(files.Work) {
			t.Errorf("reset left %s in the agent dir", e.Name())
		}
	}
}
