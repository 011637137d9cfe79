package platform

import (
	"os"

	"golang.org/x/sys/unix"
)

// cloneCall names the clone as errors and blockers show it.
const cloneCall = "FICLONE"

// What the reflink remedy suggests instead.
const (
	cloningFS   = "XFS made with mkfs.xfs -m reflink=1, or btrfs"
	cloningHome = "/mnt/xfs/ferry"
)

// cloneProbe clones src into a new temporary file of dir with FICLONE and
// removes it: refused is the clone's error, err a probe that could not be
// made.
func cloneProbe(dir string, src *os.File) (refused, err error) {
	dst, err := os.CreateTemp(dir, ".ferry-clone-probe-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(dst.Name())
	defer dst.Close()
	return unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())), nil
}
