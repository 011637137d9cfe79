package freshness

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// meta is what must not change between verifying a path and stamping it:
// the inode (dev, ino), its type and permissions, its size and both times
// a write or a metadata change moves.
type meta struct {
	dev, ino     uint64
	mode         uint32
	size         int64
	mtime, ctime unix.Timespec
}

func metaOf(st *unix.Stat_t) meta {
	return meta{
		dev: uint64(st.Dev), ino: st.Ino, mode: uint32(st.Mode), size: st.Size,
		mtime: st.Mtim, ctime: st.Ctim,
	}
}

func (m meta) isRegular() bool { return m.mode&unix.S_IFMT == unix.S_IFREG }
func (m meta) isDir() bool     { return m.mode&unix.S_IFMT == unix.S_IFDIR }

func lstatMeta(path string) (meta, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return meta{}, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	return metaOf(&st), nil
}

// place is a path as a directory's descriptor and a name in it (stat'ed
// and opened relative to the directory, which resolves one component and
// not every one again), or, with AT_FDCWD, as its full path.
type place struct {
	dfd  int
	name string // relative to dfd
	path string // the full path, for errors
}

// pathPlace is the place of a full path.
func pathPlace(p string) place { return place{dfd: unix.AT_FDCWD, name: p, path: p} }

// lstat is lstatMeta of the place.
func (p place) lstat() (meta, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(p.dfd, p.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return meta{}, &os.PathError{Op: "lstat", Path: p.path, Err: err}
	}
	return metaOf(&st), nil
}

// open opens the place's regular file as openNoFollow does.
func (p place) open() (fd, error) {
	for {
		n, err := unix.Openat(p.dfd, p.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: p.path, Err: err}
		}
		return fd(n), nil
	}
}

// fd is a descriptor openNoFollow opened, used through plain system
// calls. An *os.File made from a descriptor opened O_NONBLOCK costs two
// more calls per file (fcntl, and an epoll_ctl that fails for a regular
// file), and comparing a checkout opens thousands.
type fd int

// openNoFollow opens path read-only without following a final symlink and
// without blocking on a FIFO that may have replaced the file.
func openNoFollow(path string, dir bool) (fd, error) {
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	if dir {
		flags |= unix.O_DIRECTORY
	}
	for {
		n, err := unix.Open(path, flags, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return fd(n), nil
	}
}

func (f fd) meta() (meta, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f), &st); err != nil {
		return meta{}, err
	}
	return metaOf(&st), nil
}

// read reads once into b; 0 is the end of the file.
func (f fd) read(b []byte) (int, error) {
	for {
		n, err := unix.Read(int(f), b)
		if err == unix.EINTR {
			continue
		}
		return max(n, 0), err
	}
}

func (f fd) close() { unix.Close(int(f)) }

// stampIfUnchanged gives path the mtime to if it is still the inode
// verified as want, with the same metadata. It checks with lstat before opening (so that
// nothing but the verified file or directory is ever opened), then with fstat
// on the open descriptor, and stamps through that descriptor, so a path
// swapped in between (a rename over it, a parent replaced by a symlink) is
// never the one stamped. ok is false when anything differs or the path is
// gone.
func stampIfUnchanged(path string, want meta, to time.Time) (ok bool, err error) {
	got, err := lstatMeta(path)
	if err != nil || got != want {
		return false, nil
	}
	f, err := openNoFollow(path, want.isDir())
	if err != nil {
		return false, nil
	}
	defer f.close()
	if got, err := f.meta(); err != nil || got != want {
		return false, nil
	}
	if err := futimens(f, to); err != nil {
		return false, fmt.Errorf("stamp %s: %w", path, err)
	}
	return true, nil
}

// canonicalDir returns dir made absolute with every symlink resolved, and
// checks that it is a directory.
func canonicalDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	return real, nil
}

// tsTime converts a Timespec to a time.Time.
func tsTime(ts unix.Timespec) time.Time { return time.Unix(ts.Unix()) }
