//go:build !linux

package platform

// Extents needs FIEMAP, which only Linux has.
func Extents(string, func(Extent)) error { return ErrNoExtents }
