package platform

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FIEMAP, from linux/fiemap.h and linux/fs.h. x/sys/unix does not define
// it. The request number is _IOWR('f', 11, struct fiemap): the direction
// bits of _IOWR are 0xC0000000 on every Linux architecture.
const (
	fsIocFiemap          = 0xC020660B
	fiemapFlagSync       = 0x1    // FIEMAP_FLAG_SYNC: write dirty data first
	fiemapExtentLast     = 0x1    // FIEMAP_EXTENT_LAST
	fiemapExtentUnknown  = 0x2    // FIEMAP_EXTENT_UNKNOWN: no location yet
	fiemapExtentInline   = 0x200  // FIEMAP_EXTENT_DATA_INLINE
	fiemapExtentShared   = 0x2000 // FIEMAP_EXTENT_SHARED
	fiemapBatch          = 64     // extents asked for per call
	fiemapExtentNotBlock = fiemapExtentUnknown | fiemapExtentInline
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

// Extents calls fn for each extent of the regular file at path (never
// followed; anything else is an error), in order. FIEMAP_FLAG_SYNC writes the file's dirty data first:
// until then an overwrite of a cloned range can still show the old, shared
// extent. ErrNoExtents where the filesystem does not answer.
func Extents(path string, fn func(Extent)) error {
	// O_NONBLOCK: a fifo put where the file was (an agent's build can
	// write its fork while this reads it) must not block the open.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return &os.PathError{Op: "fiemap", Path: path, Err: unix.EINVAL}
	}
	req := new(fiemapRequest)
	var start uint64
	for {
		*req = fiemapRequest{Start: start, Length: ^uint64(0) - start, Flags: fiemapFlagSync, ExtentCount: fiemapBatch}
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), fsIocFiemap, uintptr(unsafe.Pointer(req)))
		if errno != 0 {
			if errno == unix.EOPNOTSUPP || errno == unix.ENOTTY || errno == unix.ENOSYS {
				return ErrNoExtents
			}
			return &os.PathError{Op: "fiemap", Path: path, Err: errno}
		}
		n := req.MappedExtents
		if n == 0 {
			return nil
		}
		for _, e := range req.Extents[:n] {
			fn(Extent{Physical: e.Physical, Length: e.Length,
				Shared: e.Flags&fiemapExtentShared != 0, Located: e.Flags&fiemapExtentNotBlock == 0})
		}
		last := req.Extents[n-1]
		if last.Flags&fiemapExtentLast != 0 {
			return nil
		}
		start = last.Logical + last.Length
	}
}
