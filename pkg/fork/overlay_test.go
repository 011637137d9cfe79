package fork

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/treetest"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/platform"
)

// The overlay's layers are named in mount options, where , separates
// options and : lower layers; Fork refuses a base or an agent dir whose path
// holds one rather than make a fork that cannot be mounted, and Select
// does not offer overlay for such a store.
func TestOverlayInexpressiblePath(t *testing.T) {
	for _, c := range []struct{ name, dir string }{
		{"comma", "store,1"},
		{"colon", "store:1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := filepath.Join(treetest.Dir(t, os.TempDir()), c.dir)
			good := treetest.Dir(t, os.TempDir())
			for _, p := range []Paths{
				{BaseTarget: filepath.Join(bad, "bases", "b1", "target"), AgentDir: filepath.Join(good, "agents", "a1")},
				{BaseTarget: filepath.Join(good, "bases", "b1", "target"), AgentDir: filepath.Join(bad, "agents", "a1")},
			} {
				if _, err := os.Stat(p.BaseTarget); err != nil {
					treetest.MakeTarget(t, p.BaseTarget, treetest.CargoTarget())
				}
				if err := os.MkdirAll(p.AgentDir, 0o755); err != nil {
					t.Fatal(err)
				}
				named := p.BaseTarget
				if strings.HasPrefix(p.AgentDir, bad) {
					named = p.AgentDir
				}
				_, err := Overlay().Fork(p)
				if err == nil {
					t.Fatalf("Fork of %s into %s succeeded", p.BaseTarget, p.AgentDir)
				}
				if failure.KindOf(err) != failure.Refused || !strings.Contains(err.Error(), named) ||
					!strings.Contains(failure.HintOf(err), "copy") {
					t.Errorf("Fork of %s into %s: %q (kind %v, hint %q); want Refused naming %s, with a hint naming another backend",
						p.BaseTarget, p.AgentDir, err, failure.KindOf(err), failure.HintOf(err), named)
				}
				treetest.DirHolds(t, p.AgentDir)
			}

			b, err := Select(NameOverlay, bad)
			if err == nil || failure.KindOf(err) != failure.Blocked || failure.HintOf(err) == "" {
				t.Errorf("Select(overlay) in %s = %v, %v; want Blocked with a hint", bad, b, err)
			}
			if ok, err := CanReflink(bad); err != nil {
				t.Fatal(err)
			} else if !ok {
				if b, err := Select(NameAuto, bad); err != nil || b.Name() != NameCopy {
					t.Errorf("Select(auto) in %s (%s) = %v, %v; want copy", bad, treetest.FSName(bad), b, err)
				}
			}
		})
	}
}

// With the overlay probe refusing, auto falls back to copy (or keeps
// reflink, where the store clones, without asking the probe) and an explicit
// overlay is Blocked with the blocker's remedy; a probe that cannot run is
// an error, never a silent choice.
func TestSelectOverlayBlocked(t *testing.T) {
	tmp := treetest.Dir(t, os.TempDir())
	clones, err := CanReflink(tmp)
	if err != nil {
		t.Fatal(err)
	}
	saved := overlayBlocker
	t.Cleanup(func() { overlayBlocker = saved })

	blocker := &platform.Blocker{
		Check: platform.CheckOverlay, Setting: platform.SettingOverlayModule, Value: "not loaded",
		Problem: "The kernel does not know the overlay filesystem.", Remedy: "sudo modprobe overlay",
	}
	probed := 0
	overlayBlocker = func(string) (*platform.Blocker, error) { probed++; return blocker, nil }
	want := NameCopy
	if clones {
		want = NameReflink
	}
	if b, err := Select(NameAuto, tmp); err != nil || b.Name() != want {
		t.Errorf("Select(auto) on %s with overlay blocked = %v, %v; want %s", treetest.FSName(tmp), b, err, want)
	}
	if clones && probed != 0 {
		t.Errorf("Select(auto) where the store clones asked the overlay probe %d times, want none", probed)
	} else if !clones && probed != 1 {
		t.Errorf("Select(auto) where the store does not clone asked the overlay probe %d times, want once", probed)
	}
	_, err = Select(NameOverlay, tmp)
	if failure.KindOf(err) != failure.Blocked || failure.HintOf(err) != blocker.Remedy ||
		!strings.Contains(err.Error(), tmp) || !errors.Is(err, blocker) {
		t.Errorf("Select(overlay) with overlay blocked: %v (kind %v, hint %q); want Blocked naming %s, the blocker and its remedy",
			err, failure.KindOf(err), failure.HintOf(err), tmp)
	}

	broken := errors.New("probe child lost")
	overlayBlocker = func(string) (*platform.Blocker, error) { return nil, broken }
	names := []string{NameOverlay}
	if !clones {
		names = append(names, NameAuto)
	}
	for _, name := range names {
		if b, err := Select(name, tmp); !errors.Is(err, broken) {
			t.Errorf("Select(%s) with the probe failing = %v, %v; want its error", name, b, err)
		}
	}
}

// Where the operating system has no namespaces (macOS) the overlay is
// blocked by that, named as such: not as a missing nsenter, which such a
// host also lacks.
func TestOverlayBlockedWithoutNamespaces(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no nsenter on it
	b, err := OverlayBlocker(platform.Host{OS: "darwin"}, treetest.Dir(t, os.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if b == nil || b.Setting != platform.SettingOS || !errors.Is(b, errors.ErrUnsupported) {
		t.Fatalf("blocker %v, want the operating system's", b)
	}
}

// Without the namespace sandbox auto picks reflink where the store clones,
// else copy, never asking the overlay probe (which would say the overlay
// works: it mounts in a namespace of its own), and an explicit overlay is
// refused; other names are Select's.
func TestSelectUnsandboxed(t *testing.T) {
	tmp := treetest.Dir(t, os.TempDir())
	clones, err := CanReflink(tmp)
	if err != nil {
		t.Fatal(err)
	}
	saved := overlayBlocker
	t.Cleanup(func() { overlayBlocker = saved })
	overlayBlocker = func(string) (*platform.Blocker, error) {
		t.Error("SelectUnsandboxed asked the overlay probe")
		return nil, nil
	}
	want := NameCopy
	if clones {
		want = NameReflink
	}
	if b, err := SelectUnsandboxed(NameAuto, tmp); err != nil || b.Name() != want {
		t.Errorf("SelectUnsandboxed(auto) on %s = %v, %v; want %s", treetest.FSName(tmp), b, err, want)
	}
	if b, err := SelectUnsandboxed(NameOverlay, tmp); failure.KindOf(err) != failure.Refused || b != nil ||
		!strings.Contains(err.Error(), "needs the namespace sandbox") {
		t.Errorf("SelectUnsandboxed(overlay) = %v, %v (kind %v); want Refused", b, err, failure.KindOf(err))
	}
	if b, err := SelectUnsandboxed(NameCopy, tmp); err != nil || b.Name() != NameCopy {
		t.Errorf("SelectUnsandboxed(copy) = %v, %v", b, err)
	}
	if _, err := SelectUnsandboxed("hardlink", tmp); failure.KindOf(err) != failure.Usage {
		t.Errorf("SelectUnsandboxed(hardlink): %v", err)
	}
}
