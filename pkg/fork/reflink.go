package fork

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/platform"
)

// Reflink forks by cloning every regular file, with FICLONE on Linux and
// clonefile(2) on macOS: the fork's files are new inodes sharing the base's
// extents copy-on-write, so a fork costs metadata per file and no data, and
// a write in the fork never reaches the base. It needs a filesystem that
// clones (XFS with reflink=1, btrfs; APFS) and the base and the agent on the
// same one. The tree is walked the same way on both (forkTree): only how a
// file is made differs (reflinkTree).
func Reflink() Backend { return reflinkBackend{} }

type reflinkBackend struct{}

func (reflinkBackend) Name() string { return NameReflink }

func (reflinkBackend) Needs() Needs { return Needs{Clones: true} }

func (reflinkBackend) Cost() string {
	return "forks share the base's blocks (a clone per file), and each call gets a sandbox of its own"
}

func (reflinkBackend) Fork(p Paths) (Stats, error) { return forkTree(p, reflinkTree()) }

func (reflinkBackend) TargetSpec(p Paths) TargetSpec { return TargetSpec{Dir: p.Target()} }

// PrivateBytes sums, per file of the fork, the extents FIEMAP does not flag
// as shared: right after a fork that is about 0, and it grows by what the
// agent's builds rewrite. Directories and symlinks count their allocated
// size (they are never shared). Where FIEMAP is unavailable for a file (and
// on macOS, which has none), the file's allocated size counts instead, which
// overstates: it includes what is still shared with the base.
func (reflinkBackend) PrivateBytes(p Paths) (int64, error) {
	return walkPrivate(p.Target(), func(path string, st *unix.Stat_t) (int64, error) {
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size == 0 {
			return allocated(st), nil
		}
		n, err := unsharedBytes(path)
		if errors.Is(err, platform.ErrNoExtents) {
			return allocated(st), nil
		}
		return n, err
	})
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
