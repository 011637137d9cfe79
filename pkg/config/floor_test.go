package config

import (
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/failure"
)

func TestParseMinFree(t *testing.T) {
	for v, want := range map[string]Floor{
		"auto": {Auto: true}, "0": {}, "512": {Bytes: 512}, "4K": {Bytes: 4 << 10},
		"10G": {Bytes: 10 << 30}, "10GiB": {Bytes: 10 << 30}, "10gb": {Bytes: 10 << 30},
		"1.5M": {Bytes: 3 << 19}, "2T": {Bytes: 2 << 40},
	} {
		if got, msg, _ := ParseMinFree(v); msg != "" || got != want {
			t.Errorf("ParseMinFree(%q) = %+v %q, want %+v", v, got, msg, want)
		}
	}
	for _, v := range []string{"", "lots", "-1G", "10X", "G", "NaN", "9999999T"} {
		if _, msg, hint := ParseMinFree(v); msg == "" || hint == "" {
			t.Errorf("ParseMinFree(%q) accepted", v)
		}
	}
}

// The automatic floor is 2 GiB, or a twentieth of a smaller filesystem.
func TestAutoFloor(t *testing.T) {
	for size, want := range map[uint64]uint64{
		200 << 30: 2 << 30, 40 << 30: 2 << 30, 20 << 30: 1 << 30, 100 << 20: 5 << 20, 0: 0,
	} {
		if got := AutoMinFree.Of(size); got != want {
			t.Errorf("auto floor of %d bytes = %d, want %d", size, got, want)
		}
	}
	if got := (Floor{Bytes: 7}).Of(1 << 40); got != 7 {
		t.Errorf("a set floor = %d, want it whatever the size", got)
	}
}

// Check passes under no floor and over it, and refuses under it with the
// figures, the setting that sets it and kind NoSpace (exit 8).
func TestFloorCheck(t *testing.T) {
	dir := t.TempDir()
	full := failure.Measure(dir)
	if !full.Measured {
		t.Skipf("cannot measure %s", dir)
	}
	for _, f := range []Floor{{}, {Bytes: 1}, {Bytes: full.Free / 2}} {
		if err := f.Check(dir, "testing"); err != nil {
			t.Errorf("floor %v with %d free: %v", f, full.Free, err)
		}
	}
	err := Floor{Bytes: full.Size + 1}.Check(dir+"/not/yet/made", `spawning agent "a"`)
	if err == nil {
		t.Fatal("a floor over the filesystem's size passed")
	}
	if k := failure.KindOf(err); k != failure.NoSpace {
		t.Errorf("kind %v, want NoSpace", k)
	}
	for _, want := range []string{`spawning agent "a" refused`, " free on ", "under the free-space floor of " + failure.Bytes(full.Size+1)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if h := failure.HintOf(err); !strings.Contains(h, "ferry gc") || !strings.Contains(h, "FERRY_MIN_FREE") || !strings.Contains(h, "[gc] min-free") {
		t.Errorf("hint %q names neither the way to free space nor the setting", h)
	}
}
