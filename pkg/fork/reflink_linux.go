package fork

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/failure"
)

// reflinkTree fills each file of the fork by cloning (cloneFile).
func reflinkTree() *tree { return filling(cloneFile) }

// cloneFile makes dst share src's extents.
func cloneFile(dst, src int) error {
	err := unix.IoctlFileClone(dst, src)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EXDEV), errors.Is(err, unix.EOPNOTSUPP):
		return failure.Wrap(failure.Blocked, err,
			"reflink needs the base and the agent on one filesystem that clones files; use backend copy, or auto",
			"clone (FICLONE)")
	}
	return fmt.Errorf("clone (FICLONE): %w", err)
}

// FIEMAP, from linux/fiemap.h and linux/fs.h. x/sys/unix does not define
// it. The request number is _IOWR('f', 11, struct fiemap): the direction
// bits of _IOWR are 0xC0000000 on every Linux architecture.
const (
	fsIocFiemap        = 0xC020660B
	fiemapFlagSync     = 0x1    // FIEMAP_FLAG_SYNC: write dirty data first
	fiemapExtentLast   = 0x1    // FIEMAP_EXTENT_LAST
	fiemapExtentShared = 0x2000 // FIEMAP_EXTENT_SHARED
	fiemapBatch        = 64     // extents asked for per call
)

type fiemapExtent struct {
	Logical  uint64
	Physical uint64
	Length   uint64
	_        [2]uint64
	Flags    uint32
	_        [3]uint32
}

type fiemapRequest struct {
	Start         uint64
	Length        uint64
	Flags         uint32
	MappedExtents uint32
	ExtentCount   uint32
	_             uint32
	Extents       [fiemapBatch]fiemapExtent
}

// unsharedBytes sums the lengths of path's extents not flagged shared.
// FIEMAP_FLAG_SYNC writes the file's dirty data first: until then an
// overwrite of a cloned range can still show the old, shared extent.
func unsharedBytes(path string) (int64, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	req := new(fiemapRequest)
	var total int64
	var start uint64
	for {
		*req = fiemapRequest{Start: start, Length: ^uint64(0) - start, Flags: fiemapFlagSync, ExtentCount: fiemapBatch}
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), fsIocFiemap, uintptr(unsafe.Pointer(req)))
		if errno != 0 {
			if errno == unix.EOPNOTSUPP || errno == unix.ENOTTY || errno == unix.ENOSYS {
				return 0, errNoFiemap
			}
			return 0, &os.PathError{Op: "fiemap", Path: path, Err: errno}
		}
		n := req.MappedExtents
		if n == 0 {
			return total, nil
		}
		for _, e := range req.Extents[:n] {
			if e.Flags&fiemapExtentShared == 0 {
				total += int64(e.Length)
			}
		}
		last := req.Extents[n-1]
		if last.Flags&fiemapExtentLast != 0 {
			return total, nil
		}
		start = last.Logical + last.Length
	}
}
