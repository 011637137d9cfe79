// Package diskuse says what trees take on disk: their apparent bytes (the
// sizes of their files) and their physical bytes (the blocks the disk
// lost to them). Forks share blocks with their base (reflink clones share
// extents, overlays read the base's own files, a folded refresh hard-links
// its seed's files), so apparent bytes overstate a store many times over;
// physical bytes count every block once.
//
// A Counter counts trees in turn, and each tree's physical bytes are the
// blocks it takes that no tree counted before: count the bases oldest
// first, then the agents, and a base refreshed from a seed shows what the
// refresh added, an agent what it wrote, and the sum is the store's.
// Blocks are told apart by where FIEMAP says they are; where a filesystem
// does not say (tmpfs, macOS), a file's allocated blocks count once per
// inode.
package diskuse

import (
	"errors"
	"io/fs"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/platform"
)

// Usage is what one tree takes.
type Usage struct {
	// Apparent is the sizes of its regular files, each inode once.
	Apparent int64 `json:"apparent_bytes"`
	// Physical is the blocks it takes that the Counter had not counted
	// before: what the disk lost to it.
	Physical int64 `json:"physical_bytes"`
	Files    int   `json:"files"`
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{Apparent: u.Apparent + v.Apparent, Physical: u.Physical + v.Physical, Files: u.Files + v.Files}
}

type inode struct{ dev, ino uint64 }

// span is the blocks [start, end) of a filesystem.
type span struct {
	dev        uint64
	start, end uint64
}

// Counter counts trees, each block once across all of them.
type Counter struct {
	inodes map[inode]bool // counted by allocation (no extents)
	blocks []span         // counted by extent: sorted, merged
}

// New returns a Counter that has counted nothing.
func New() *Counter { return &Counter{inodes: map[inode]bool{}} }

// Add walks root and returns its usage: its apparent bytes, and the
// physical bytes no earlier Add counted. A missing root takes nothing;
// entries it may not read are left out.
func (c *Counter) Add(root string) (Usage, error) {
	var u Usage
	seen := map[inode]bool{} // this tree's inodes, for its apparent bytes
	var spans []span
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && path == root {
			return fs.SkipAll
		}
		if errors.Is(err, fs.ErrPermission) {
			return nil
		}
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return nil // gone since its directory was read
		}
		id := inode{uint64(st.Dev), st.Ino}
		if seen[id] {
			return nil
		}
		seen[id] = true
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			u.Physical += c.once(id, st.Blocks*512)
			return nil
		}
		u.Files++
		u.Apparent += st.Size
		var inline int64
		var located []span
		err = platform.Extents(path, func(e platform.Extent) {
			if e.Located {
				located = append(located, span{uint64(st.Dev), e.Physical, e.Physical + e.Length})
			} else {
				inline += int64(e.Length)
			}
		})
		switch {
		case errors.Is(err, platform.ErrNoExtents):
			u.Physical += c.once(id, st.Blocks*512)
		case err != nil:
			return nil // unreadable or gone: left out
		default:
			spans = append(spans, located...)
			u.Physical += c.once(id, inline)
		}
		return nil
	})
	u.Physical += c.take(spans)
	return u, err
}

// once counts n bytes of inode id the first time it is seen.
func (c *Counter) once(id inode, n int64) int64 {
	if c.inodes[id] {
		return 0
	}
	c.inodes[id] = true
	return n
}

// take adds spans to the counted blocks and returns how many bytes of them
// were not counted before.
func (c *Counter) take(spans []span) int64 {
	spans = merge(spans)
	var fresh int64
	i := 0
	for _, s := range spans {
		// Skip counted spans that end before s, then subtract each that
		// overlaps it.
		for i < len(c.blocks) && before(c.blocks[i], s.dev, s.start) {
			i++
		}
		covered := uint64(0)
		for j := i; j < len(c.blocks) && c.blocks[j].dev == s.dev && c.blocks[j].start < s.end; j++ {
			covered += min(c.blocks[j].end, s.end) - max(c.blocks[j].start, s.start)
		}
		fresh += int64(s.end - s.start - covered)
	}
	c.blocks = merge(append(c.blocks, spans...))
	return fresh
}

// before reports whether b lies wholly before (dev, at): on a lower
// device, or ending at or before at on the same one.
func before(b span, dev, at uint64) bool {
	return b.dev < dev || b.dev == dev && b.end <= at
}

// merge sorts spans and joins those that overlap or touch.
func merge(spans []span) []span {
	slices.SortFunc(spans, func(a, b span) int {
		if a.dev != b.dev {
			return cmpU(a.dev, b.dev)
		}
		return cmpU(a.start, b.start)
	})
	out := spans[:0]
	for _, s := range spans {
		if n := len(out); n > 0 && out[n-1].dev == s.dev && s.start <= out[n-1].end {
			out[n-1].end = max(out[n-1].end, s.end)
			continue
		}
		out = append(out, s)
	}
	return out
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
