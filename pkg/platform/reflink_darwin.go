package platform

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// cloneCall names the clone as errors and blockers show it.
const cloneCall = "clonefile"

// What the reflink remedy suggests instead: every internal disk of a Mac
// since macOS 10.13 is APFS; HFS+, FAT and network volumes do not clone.
const (
	cloningFS   = "APFS"
	cloningHome = `"$HOME/Library/Caches/ferry"`
)

// cloneProbe clones src to a new name in dir with clonefile(2), which makes
// the destination itself, and removes the clone: refused is the clone's
// error, err a probe that could not be made.
func cloneProbe(dir string, src *os.File) (refused, err error) {
	tmp, err := os.MkdirTemp(dir, ".ferry-clone-probe-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	return unix.Clonefile(src.Name(), filepath.Join(tmp, "clone"), unix.CLONE_NOFOLLOW), nil
}
