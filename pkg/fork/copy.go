package fork

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Copy forks by copying every regular file's bytes with copy_file_range
// (read/write where the kernel cannot, and on macOS). It works on any
// filesystem and costs the target's full size in time and space. Where the
// kernel turns copy_file_range into a clone (same XFS or btrfs filesystem)
// the copy shares extents; the files are new inodes either way.
func Copy() Backend { return copyBackend{} }

type copyBackend struct{}

func (copyBackend) Name() string { return NameCopy }

func (copyBackend) Needs() Needs { return Needs{} }

func (copyBackend) Cost() string { return "each fork is a full copy of the base's target" }

func (copyBackend) Fork(p Paths) (Stats, error) { return forkTree(p, filling(copyFile)) }

func (copyBackend) TargetSpec(p Paths) TargetSpec { return TargetSpec{Dir: p.Target()} }

// PrivateBytes is the fork's allocated size (st_blocks), once per inode: a
// copy shares nothing with the base. Where the kernel cloned the copy, this
// overstates.
func (copyBackend) PrivateBytes(p Paths) (int64, error) {
	return walkPrivate(p.Target(), func(_ string, st *unix.Stat_t) (int64, error) {
		return allocated(st), nil
	})
}

// Allocated is the allocated size (st_blocks) of the tree at dir, once per
// inode; 0 when it does not exist. What an agent's builds wrote to its
// private layers and $TMPDIR (package confine) is counted this way; an
// overlay's work dir, which the kernel leaves without permissions, is
// left out.
func Allocated(dir string) (int64, error) {
	var total int64
	seen := map[fileID]bool{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && path == dir {
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
			return nil // gone since the directory was read
		}
		if id := (fileID{dev: uint64(st.Dev), ino: st.Ino}); st.Nlink > 1 && !d.IsDir() {
			if seen[id] {
				return nil
			}
			seen[id] = true
		}
		total += allocated(&st)
		return nil
	})
	return total, err
}

// readWrite copies src to dst with read and write.
func readWrite(dst, src int) error {
	buf := make([]byte, 128<<10)
	for {
		n, err := unix.Read(src, buf)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("read: %w", err)
		}
		if n == 0 {
			return nil
		}
		for w := buf[:n]; len(w) > 0; {
			m, err := unix.Write(dst, w)
			if err != nil {
				if errors.Is(err, unix.EINTR) {
					continue
				}
				return fmt.Errorf("write: %w", err)
			}
			w = w[m:]
		}
	}
}
