package fold

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"
	"unsafe"

	"github.com/ferrydev/ferry/pkg/platform"
	"golang.org/x/sys/unix"
)

// Folding in two steps. Fold's cost grows with the lower layer: it makes
// every directory and links every file the upper does not have, after the
// overlay is unmounted. Prefold does that work beforehand, into a tree of
// its own beside the layers, while the overlay is still in use (it reads
// the lower only, which nothing writes); Merge then moves the upper's own
// entries into that tree, a cost that grows with what the overlay's users
// wrote. The result is Fold's, entry for entry.
//
// Linking the lower's files changes their link counts and ctimes while the
// overlay shows them. Neither is part of what an overlay's user reads as a
// file's identity or age (Cargo compares mtimes), and Fold links them the
// same way while overlay agents show the same files. A base's seal, which
// checks change times, passes these because its caller links in a link
// window (package base).

// Prefold makes next, which must not exist, the tree lower holds as a plain
// directory: every regular file a hard link of lower's, symlinks and
// directories made anew with lower's permissions and times (the fold of an
// empty upper over lower). Its top directory's permissions and times are
// left for Merge, which gives it the upper's.
func Prefold(lower, next string) (Stats, error) {
	if err := os.Mkdir(next, 0o700); err != nil {
		return Stats{}, err
	}
	return Fold(lower, next)
}

// Merge turns next, made by Prefold from the lower dir of an unmounted
// overlay, into the tree the overlay showed, by moving the upper's entries
// into it, as Fold would have left them in upper:
//
//   - an entry upper has replaces next's, cleaned of overlayfs's
//     attributes and whiteouts as Fold cleans it;
//   - a directory both have is merged, unless upper's is opaque, and takes
//     upper's permissions and times;
//   - a whiteout removes next's entry.
//
// upper is left holding the directories merged into next, emptied. laid is
// what Prefold counted; the counts returned are those Fold would have
// returned.
func Merge(upper, next string, laid Stats) (Stats, error) {
	start := time.Now()
	m := &merger{}
	ufd, err := openDirAt(unix.AT_FDCWD, upper)
	if err != nil {
		return Stats{}, err
	}
	defer unix.Close(ufd)
	nfd, err := openDirAt(unix.AT_FDCWD, next)
	if err != nil {
		return Stats{}, err
	}
	defer unix.Close(nfd)
	var st unix.Stat_t
	if err := unix.Fstat(ufd, &st); err != nil {
		return Stats{}, &os.PathError{Op: "fstat", Path: upper, Err: err}
	}
	opaque, err := m.f.clean(upper)
	if err != nil {
		return Stats{}, err
	}
	if err := m.dir(ufd, nfd, upper, next, opaque); err != nil {
		return Stats{}, err
	}
	if err := finishDir(nfd, next, &st); err != nil {
		return Stats{}, err
	}
	out := laid
	out.Own, out.OwnBytes, out.Whiteouts = m.f.stats.Own, m.f.stats.OwnBytes, m.f.stats.Whiteouts
	out.Linked -= m.dropped.Linked
	out.Symlinks -= m.dropped.Symlinks
	out.Dirs -= m.dropped.Dirs
	out.Duration = time.Since(start)
	return out, nil
}

type merger struct {
	f       folder // cleans and counts the upper's entries, as in Fold
	dropped Stats  // next's entries removed or replaced, by kind
}

// dir merges the upper directory ufd (at upath) into next's directory nfd
// (at npath); with opaque, nothing of next's shows below it.
func (m *merger) dir(ufd, nfd int, upath, npath string, opaque bool) error {
	for _, d := range []struct {
		fd   int
		path string
	}{{ufd, upath}, {nfd, npath}} {
		// Entries move out of the one and into the other; each gets its
		// final permissions afterwards (finishDir, or the upper's removal).
		if err := writable(d.fd, d.path); err != nil {
			return err
		}
	}
	if opaque {
		names, err := readEntries(nfd, npath)
		if err != nil {
			return err
		}
		for _, e := range names {
			if err := m.drop(nfd, e.Name(), npath); err != nil {
				return err
			}
		}
	}
	entries, err := readEntries(ufd, upath)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := m.entry(ufd, nfd, e.Name(), upath, npath); err != nil {
			return err
		}
	}
	return nil
}

// entry moves the upper's entry n into next.
func (m *merger) entry(ufd, nfd int, n, upath, npath string) error {
	up, np := upath+"/"+n, npath+"/"+n
	var st unix.Stat_t
	if err := unix.Fstatat(ufd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "lstat", Path: up, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 {
		if err := unix.Unlinkat(ufd, n, 0); err != nil {
			return &os.PathError{Op: "unlink", Path: up, Err: err}
		}
		m.f.stats.Whiteouts++
		return m.drop(nfd, n, npath)
	}
	m.f.stats.Own++
	kind := st.Mode & unix.S_IFMT
	if kind == unix.S_IFREG {
		m.f.stats.OwnBytes += st.Size
	}
	if kind != unix.S_IFDIR {
		if kind != unix.S_IFLNK {
			if _, err := m.f.clean(up); err != nil {
				return err
			}
		}
		var nst unix.Stat_t
		err := unix.Fstatat(nfd, n, &nst, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case err == nil && nst.Mode&unix.S_IFMT == unix.S_IFDIR:
			if err := m.drop(nfd, n, npath); err != nil {
				return err
			}
		case err == nil:
			m.count(&nst) // replaced by the rename below
		case !errors.Is(err, unix.ENOENT):
			return &os.PathError{Op: "lstat", Path: np, Err: err}
		}
		if err := unix.Renameat(ufd, n, nfd, n); err != nil {
			return &os.LinkError{Op: "rename", Old: up, New: np, Err: err}
		}
		return nil
	}
	opaque, err := m.f.clean(up)
	if err != nil {
		return err
	}
	usub, err := openDirAt(ufd, n)
	if err != nil {
		return err
	}
	defer unix.Close(usub)
	nsub, err := unix.Openat(nfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case err == nil:
		// A directory in both: merged, with the upper's permissions and
		// times. Next's was counted as laid; Fold counts it as the
		// upper's own.
		defer unix.Close(nsub)
		m.dropped.Dirs++
		if err := m.dir(usub, nsub, up, np, opaque); err != nil {
			return err
		}
		return finishDir(nsub, np, &st)
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		// Only the upper has a directory here: cleaned as Fold cleans a
		// directory with nothing below it, then moved whole.
		if err := m.drop(nfd, n, npath); err != nil {
			return err
		}
		// Fold's dir counts the directory's entries, not the directory.
		if err := m.f.dir(-1, usub, "", up, &st); err != nil {
			return err
		}
		// Moving a directory rewrites its parent entry: it must be
		// writable meanwhile, and gets its times back after.
		if err := writable(usub, up); err != nil {
			return err
		}
		if err := unix.Renameat(ufd, n, nfd, n); err != nil {
			return &os.LinkError{Op: "rename", Old: up, New: np, Err: err}
		}
		return finishDir(usub, np, &st)
	default:
		return &os.PathError{Op: "open", Path: np, Err: err}
	}
}

// drop removes next's entry n, if any, counting what it held.
func (m *merger) drop(nfd int, n, npath string) error {
	var st unix.Stat_t
	err := unix.Fstatat(nfd, n, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	np := npath + "/" + n
	if err != nil {
		return &os.PathError{Op: "lstat", Path: np, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		m.count(&st)
		if err := unix.Unlinkat(nfd, n, 0); err != nil {
			return &os.PathError{Op: "unlink", Path: np, Err: err}
		}
		return nil
	}
	err = filepath.WalkDir(np, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var est unix.Stat_t
		if err := unix.Lstat(p, &est); err != nil {
			return &os.PathError{Op: "lstat", Path: p, Err: err}
		}
		m.count(&est)
		return nil
	})
	if err != nil {
		return err
	}
	return platform.RemoveTree(np)
}

// count adds an entry of next's, removed or replaced, to what was dropped.
func (m *merger) count(st *unix.Stat_t) {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m.dropped.Dirs++
	case unix.S_IFLNK:
		m.dropped.Symlinks++
	default:
		m.dropped.Linked++
	}
}

// writable gives directory fd (at path) write and search permission for
// its owner, if it lacks them.
func writable(fd int, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&0o300 == 0o300 {
		return nil
	}
	if err := unix.Fchmod(fd, (st.Mode|0o300)&0o7777); err != nil {
		return &os.PathError{Op: "chmod", Path: path, Err: err}
	}
	return nil
}

// finishDir gives directory fd (at path) st's permissions and times, once
// nothing is written into it any more.
func finishDir(fd int, path string, st *unix.Stat_t) error {
	if err := unix.Fchmod(fd, st.Mode&0o7777); err != nil {
		return &os.PathError{Op: "chmod", Path: path, Err: err}
	}
	return futimens(fd, path, st)
}

// futimens sets the times of the open file fd to st's: utimensat(2) on the
// descriptor with a NULL path (x/sys offers only the path-taking form).
func futimens(fd int, path string, st *unix.Stat_t) error {
	times := [2]unix.Timespec{st.Atim, st.Mtim}
	if _, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&times)), 0, 0, 0); errno != 0 {
		return &os.PathError{Op: "utimensat", Path: path, Err: errno}
	}
	return nil
}
