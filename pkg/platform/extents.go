package platform

import "errors"

// Extent is one run of a file's bytes on disk, as FIEMAP reports it.
type Extent struct {
	Physical, Length uint64
	// Shared: the filesystem says other files use these blocks too (a
	// reflink clone, until either side is written).
	Shared bool
	// Located: Physical names where the bytes are; false for data kept
	// inline in the inode or at a place the filesystem does not say.
	Located bool
}

// ErrNoExtents is Extents' error where the filesystem (tmpfs) or the
// system (macOS) does not say where a file's bytes are.
var ErrNoExtents = errors.New("the filesystem does not map files' extents (FIEMAP)")
