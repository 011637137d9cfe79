package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// storeRoot resolves paths below the store without following symbolic
// links (openat2 with RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS). Ferry makes
// no links in its store, so one found there was planted, and following it
// could mount another agent's fork, or a base, where this one's belongs.
type storeRoot struct {
	dir string
	fd  int // -1: no store, every path is used as given
}

func openStoreRoot(dir string) (*storeRoot, error) {
	if dir == "" {
		return &storeRoot{fd: -1}, nil
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return &storeRoot{dir: filepath.Clean(dir), fd: fd}, nil
}

// below returns p relative to the store, and whether it lies below it.
func (r *storeRoot) below(p string) (string, bool) {
	if r.fd < 0 {
		return "", false
	}
	rel, err := filepath.Rel(r.dir, filepath.Clean(p))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// pin returns a path that names p's directory (or file) for mount(2): for a
// path below the store, /proc/self/fd/N of a descriptor opened without
// following links, which mount resolves to exactly that inode, so nothing
// can swap a link in between; any other path as it is.
func (r *storeRoot) pin(p string) (string, error) {
	rel, ok := r.below(p)
	if !ok {
		return p, nil
	}
	if rel == "." {
		return "/proc/self/fd/" + strconv.Itoa(r.fd), nil
	}
	fd, err := unix.Openat2(r.fd, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return "", err
	}
	return "/proc/self/fd/" + strconv.Itoa(fd), nil
}

// check confirms that p, when below the store, resolves without a link.
// Overlayfs takes its directories by path, so for them this is a check
// just before the mount rather than a pin.
func (r *storeRoot) check(p string) error {
	q, err := r.pin(p)
	if err != nil || q == p {
		return err
	}
	if fd, err := strconv.Atoi(strings.TrimPrefix(q, "/proc/self/fd/")); err == nil && fd != r.fd {
		unix.Close(fd)
	}
	return nil
}

// mask hides each of paths (below the store, pinned without following a
// link) once the store is sealed: a directory behind an empty read-only
// tmpfs, anything else behind /dev/null, read-only. A path that does not
// exist is left alone. On failure it returns the step, and the path when
// the store holds something Ferry did not make there (a link).
func mask(root *storeRoot, paths []string) (step, path string, err error) {
	for _, m := range paths {
		var st unix.Stat_t
		if err := unix.Lstat(m, &st); errors.Is(err, unix.ENOENT) {
			continue
		} else if err != nil {
			return "mask " + m, "", err
		}
		at, err := root.pin(m)
		if err != nil {
			return "open " + m, m, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := unix.Mount("tmpfs", at, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0555,size=4k"); err != nil {
				return "mask " + m, "", err
			}
			continue
		}
		if err := unix.Mount("/dev/null", at, "", unix.MS_BIND, ""); err != nil {
			return "mask " + m, "", err
		}
		if err := readOnly(m); err != nil {
			return "mask " + m, "", err
		}
	}
	return "", "", nil
}

// checkMasked confirms that a joined namespace hides each of paths that
// exists: a directory is an empty tmpfs, anything else /dev/null.
func checkMasked(paths []string) error {
	var null unix.Stat_t
	if err := unix.Stat("/dev/null", &null); err != nil {
		return err
	}
	for _, m := range paths {
		var st unix.Stat_t
		if err := unix.Lstat(m, &st); errors.Is(err, unix.ENOENT) {
			continue
		} else if err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			var fs unix.Statfs_t
			if err := unix.Statfs(m, &fs); err != nil {
				return err
			}
			if fs.Type != unix.TMPFS_MAGIC || fs.Flags&unix.ST_RDONLY == 0 {
				return fmt.Errorf("%s is not hidden in the joined namespace", m)
			}
			continue
		}
		if st.Rdev != null.Rdev || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			return fmt.Errorf("%s is not hidden in the joined namespace", m)
		}
	}
	return nil
}

// readOnly makes the mount at dir read-only, not its submounts. In a user
// namespace a remount must repeat the flags the mount was locked with
// (nosuid, nodev, noexec, atime); mount_setattr (Linux 5.12) changes only
// the one attribute, and the remount is the fallback.
func readOnly(dir string) error {
	err := unix.MountSetattr(unix.AT_FDCWD, dir, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
	if err != unix.ENOSYS {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
	for _, f := range []struct{ st, ms uintptr }{
		{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(st.Flags)&f.st != 0 {
			flags |= f.ms
		}
	}
	return unix.Mount("", dir, "", flags, "")
}

// Sealed reports whether dir is on a read-only mount: inside a sandbox whose
// plan named it (or a directory above it) as the store.
func Sealed(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_RDONLY != 0
}

// checkSealed confirms that a joined namespace has the store sealed.
func checkSealed(store string) error {
	if store != "" && !Sealed(store) {
		return fmt.Errorf("the store %s is writable in the joined namespace", store)
	}
	return nil
}
