package fork

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/failure"
)

// Reflink forks by cloning every regular file with FICLONE: the fork's files
// are new inodes sharing the base's extents copy-on-write, so a fork costs
// metadata per file and no data, and a write in the fork never reaches the
// base. It needs a filesystem that clones (XFS with reflink=1, btrfs) and the
// base and the agent on the same one.
func Reflink() Backend { return reflinkBackend{} }

type reflinkBackend struct{ bindForks }

func (reflinkBackend) Name() string { return NameReflink }

func (reflinkBackend) Needs() Needs { return Needs{Clones: true} }

func (reflinkBackend) Cost() string {
	return "forks share the base's blocks (a clone per file), and each call gets a sandbox of its own"
}

func (reflinkBackend) Fork(p Paths) (Stats, error) { return forkTree(p, cloneFile) }

func (reflinkBackend) TargetSpec(p Paths) TargetSpec { return TargetSpec{Dir: p.Target()} }

// PrivateBytes sums, per file of the fork, the extents FIEMAP does not flag
// as shared: right after a fork that is about 0, and it grows by what the
// agent's builds rewrite. Directories and symlinks count their allocated
// size (they are never shared). Where FIEMAP is unavailable for a file, the
// file's allocated size counts instead, which overstates: it includes what
// is still shared with the base.
func (reflinkBackend) PrivateBytes(p Paths) (int64, error) {
	return walkPrivate(p.Target(), func(path string, st *unix.Stat_t) (int64, error) {
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size == 0 {
			return allocated(st), nil
		}
		n, err := unsharedBytes(path)
		if errors.Is(err, errNoFiemap) {
			return allocated(st), nil
		}
		return n, err
	})
}

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

// errNoFiemap marks a file whose filesystem does not answer FIEMAP.
var errNoFiemap = errors.New("FIEMAP not supported")

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

// allocated is the space st's inode takes on disk.
func allocated(st *unix.Stat_t) int64 { return st.Blocks * 512 }

// walkPrivate sums size over every entry of the tree at root (root
// included), once per inode.
func walkPrivate(root string, size func(path string, st *unix.Stat_t) (int64, error)) (int64, error) {
	var total int64
	seen := map[fileID]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return &os.PathError{Op: "lstat", Path: path, Err: err}
		}
		if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			id := fileID{dev: uint64(st.Dev), ino: st.Ino}
			if seen[id] {
				return nil
			}
			seen[id] = true
		}
		n, err := size(path, &st)
		total += n
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("private bytes of %s: %w", root, err)
	}
	return total, nil
}
