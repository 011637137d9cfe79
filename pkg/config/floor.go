package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ferrydev/ferry/pkg/failure"
)

// Floor is a free-space floor: the space a filesystem must keep free for a
// spawn, an adoption or a base build to start on it ([gc] min-free,
// FERRY_MIN_FREE). Ferry cannot know how much a build will write, so the
// floor is a margin, not a promise: it turns the common case, a disk that
// agents and bases have filled over days, into a refusal with the figures
// before any work, instead of a build stopping part way on ENOSPC.
type Floor struct {
	Bytes uint64 // the floor; 0 with Auto unset: none
	Auto  bool   // the smaller of AutoFloorMax and AutoFloorShare of the filesystem
}

// AutoMinFree is the default floor ("auto"): AutoFloorMax, or less on a
// small filesystem (a test's loop mount, a container's disk), where
// AutoFloorShare of its size is the margin.
var AutoMinFree = Floor{Auto: true}

const (
	AutoFloorMax   = 2 << 30 // 2 GiB
	AutoFloorShare = 20      // a twentieth (5%) of the filesystem's size
)

// Of is the floor on a filesystem of size bytes.
func (f Floor) Of(size uint64) uint64 {
	if f.Auto {
		return min(AutoFloorMax, size/AutoFloorShare)
	}
	return f.Bytes
}

// String is the floor as ferry.toml spells it.
func (f Floor) String() string {
	switch {
	case f.Auto:
		return "auto"
	case f.Bytes == 0:
		return "0"
	}
	return failure.Bytes(f.Bytes)
}

// Check refuses what (a phrase such as "spawning agent-1") when the
// filesystem holding path has less free space than the floor: kind NoSpace
// (exit 8), naming the filesystem, what is free, the floor and how to
// change it. A filesystem it cannot measure passes.
func (f Floor) Check(path, what string) error {
	full := failure.Measure(path)
	if !full.Measured {
		return nil
	}
	floor := f.Of(full.Size)
	if floor == 0 || full.Free >= floor {
		return nil
	}
	where := full.MountPoint
	if where == "" {
		where = "the filesystem holding " + path
	}
	return failure.New(failure.NoSpace,
		fmt.Sprintf("free space on %s (`ferry gc` deletes bases nothing uses, `ferry rm NAME` removes an agent you are done with), "+
			"or change the floor: [gc] min-free in ferry.toml or FERRY_MIN_FREE (now %s; \"0\" turns it off)", where, f),
		"%s refused: %s free on %s of %s, under the free-space floor of %s",
		what, failure.Bytes(full.Free), where, failure.Bytes(full.Size), failure.Bytes(floor))
}

// ParseMinFree parses a free-space floor: "auto", "0" (none), or a size in
// bytes with an optional binary suffix (K, M, G, T, as KiB and so on).
func ParseMinFree(v string) (f Floor, msg, hint string) {
	const h = `give a size such as "10G" or "500M" (binary units), "auto" (the smaller of 2 GiB and 5% of the filesystem) or "0" (no floor)`
	s := strings.TrimSpace(v)
	if s == "auto" {
		return AutoMinFree, "", ""
	}
	s = strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(s), "B"), "I")
	shift := 0
	if s != "" {
		if i := strings.IndexByte("KMGT", s[len(s)-1]); i >= 0 {
			shift = 10 * (i + 1)
			s = s[:len(s)-1]
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n < 0 || n != n {
		return Floor{}, "not a size", h
	}
	b := n * float64(uint64(1)<<shift)
	if b >= 1<<63 {
		return Floor{}, "too large", h
	}
	return Floor{Bytes: uint64(b)}, "", ""
}
