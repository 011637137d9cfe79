package fold

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/platform"

	"golang.org/x/sys/unix"
)

// Stats counts what Fold did.
type Stats struct {
	Own       int   // entries the overlay's users wrote (the upper's own, whiteouts aside)
	OwnBytes  int64 // the sizes of the upper's own regular files
	Linked    int   // lower files hard-linked into the upper
	Symlinks  int   // lower symlinks made again in the upper
	Dirs      int   // lower directories made in the upper
	Whiteouts int   // whiteouts removed
	Duration  time.Duration
}

// Fold turns the upper dir of an unmounted overlay, whose only lower layer
// is lower, into the tree the overlay showed, as a plain directory: upper
// is left holding the merged view, and lower is never written.
//
//   - An entry only lower has is made in upper: a regular file as a hard
//     link of lower's (the same inode, so lower must never change again:
//     a sealed base's target), a symlink and a directory anew, with lower's
//     permission bits and times, a directory's set after its children.
//   - An entry upper has is kept, and hides lower's; a directory in both is
//     merged, unless overlayfs marked upper's opaque (removed and made
//     again through the overlay).
//   - Whiteouts (character devices 0/0) are removed, with the lower entry
//     they hid.
//   - overlayfs's own extended attributes (user.overlay.* under userxattr,
//     trusted.overlay.* otherwise) are removed from upper's entries, so the
//     result is a plain tree that can be any overlay's lower layer.
//   - Upper's directories keep the times the overlay showed.
//
// The mount options Ferry uses (userxattr, one lower) leave no redirects
// and no metacopy files, the two other things an upper can hold. Hard links
// between lower's files stay links of each other in upper, as the overlay
// showed them until written. A crash leaves upper partly folded: the caller
// discards it (a base not ready is discarded). The overlay must not be
// mounted: overlayfs does not expect its upper changed under it.
func Fold(lower, upper string) (Stats, error) {
	start := time.Now()
	f := &folder{}
	lfd, err := openDirAt(unix.AT_FDCWD, lower)
	if err != nil {
		return Stats{}, err
	}
	defer func() {
		// Closed once: an opaque upper closes it early, and a second
		// close could close a descriptor opened since.
		if lfd >= 0 {
			unix.Close(lfd)
		}
	}()
	ufd, err := openDirAt(unix.AT_FDCWD, upper)
	if err != nil {
		return Stats{}, err
	}
	defer unix.Close(ufd)
	var st unix.Stat_t
	if err := unix.Fstat(ufd, &st); err != nil {
		return Stats{}, &os.PathError{Op: "fstat", Path: upper, Err: err}
	}
	opaque, err := f.clean(upper)
	if err != nil {
		return Stats{}, err
	}
	if opaque {
		unix.Close(lfd)
		lfd = -1
	}
	if err := f.dir(lfd, ufd, lower, upper, &st); err != nil {
		return Stats{}, err
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, upper, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Stats{}, &os.PathError{Op: "utimensat", Path: upper, Err: err}
	}
	f.stats.Duration = time.Since(start)
	return f.stats, nil
}

type folder struct {
	stats Stats
	buf   []byte // readlink and xattr listing
}

func openDirAt(dirfd int, name string) (int, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return fd, nil
}

// readEntries reads the entries of directory fd with their types as the
// directory records them (os.File.ReadDir stats an entry only on a
// filesystem that records none).
func readEntries(fd int, path string) ([]fs.DirEntry, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, &os.PathError{Op: "dup", Path: path, Err: err}
	}
	d := os.NewFile(uintptr(dup), path)
	defer d.Close()
	return d.ReadDir(-1)
}

// dir folds the upper directory ufd (at upath, whose stat is st) over the
// lower directory lfd (at lpath; -1 when nothing below shows through).
func (f *folder) dir(lfd, ufd int, lpath, upath string, st *unix.Stat_t) error {
	// A directory Cargo left without write permission still takes links.
	if st.Mode&0o300 != 0o300 {
		if err := unix.Fchmod(ufd, (st.Mode|0o300)&0o7777); err != nil {
			return &os.PathError{Op: "chmod", Path: upath, Err: err}
		}
		defer unix.Fchmod(ufd, st.Mode&0o7777)
	}
	upper, err := readEntries(ufd, upath)
	if err != nil {
		return err
	}
	taken := make(map[string]bool, len(upper)) // shown or hidden by the upper
	for _, e := range upper {
		n := e.Name()
		taken[n] = true
		p := upath + "/" + n
		var cst unix.Stat_t
		if err := unix.Fstatat(ufd, n, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &os.PathError{Op: "lstat", Path: p, Err: err}
		}
		if cst.Mode&unix.S_IFMT == unix.S_IFCHR && cst.Rdev == 0 {
			if err := unix.Unlinkat(ufd, n, 0); err != nil {
				return &os.PathError{Op: "unlink", Path: p, Err: err}
			}
			f.stats.Whiteouts++
			continue
		}
		f.stats.Own++
		if cst.Mode&unix.S_IFMT == unix.S_IFREG {
			f.stats.OwnBytes += cst.Size
		}
		if cst.Mode&unix.S_IFMT != unix.S_IFDIR {
			if cst.Mode&unix.S_IFMT != unix.S_IFLNK {
				if _, err := f.clean(p); err != nil {
					return err
				}
			}
			continue
		}
		opaque, err := f.clean(p)
		if err != nil {
			return err
		}
		if err := f.subdir(lfd, ufd, n, lpath, upath, opaque, &cst); err != nil {
			return err
		}
	}
	if lfd < 0 {
		return nil
	}
	lower, err := readEntries(lfd, lpath)
	if err != nil {
		return err
	}
	for _, e := range lower {
		if taken[e.Name()] {
			continue
		}
		if err := f.lowerOnly(lfd, ufd, e, lpath, upath); err != nil {
			return err
		}
	}
	return nil
}

// subdir folds upper's directory n over lower's of the same name, if lower
// has one and upper's is not opaque, and gives it back its times.
func (f *folder) subdir(lfd, ufd int, n, lpath, upath string, opaque bool, st *unix.Stat_t) error {
	sub, err := openDirAt(ufd, n)
	if err != nil {
		return err
	}
	defer unix.Close(sub)
	lsub := -1
	if lfd >= 0 && !opaque {
		fd, err := unix.Openat(lfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch {
		case err == nil:
			lsub = fd
			defer unix.Close(lsub)
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
			// Nothing below to merge: a new directory, or one that
			// replaced a file or a link.
		default:
			return &os.PathError{Op: "open", Path: lpath + "/" + n, Err: err}
		}
	}
	if err := f.dir(lsub, sub, lpath+"/"+n, upath+"/"+n, st); err != nil {
		return err
	}
	if err := unix.UtimesNanoAt(ufd, n, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "utimensat", Path: upath + "/" + n, Err: err}
	}
	return nil
}

// lowerOnly makes lower's entry e, which upper neither has nor hides, in
// upper.
func (f *folder) lowerOnly(lfd, ufd int, e fs.DirEntry, lpath, upath string) error {
	n := e.Name()
	lp, up := lpath+"/"+n, upath+"/"+n
	if e.Type().IsRegular() {
		// The directory entry's type is enough to link a file: most of
		// a target is files, which need no stat of their own.
		if err := unix.Linkat(lfd, n, ufd, n, 0); err != nil {
			return &os.LinkError{Op: "link", Old: lp, New: up, Err: err}
		}
		f.stats.Linked++
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstatat(lfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "lstat", Path: lp, Err: err}
	}
	times := []unix.Timespec{st.Atim, st.Mtim}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if err := unix.Linkat(lfd, n, ufd, n, 0); err != nil {
			return &os.LinkError{Op: "link", Old: lp, New: up, Err: err}
		}
		f.stats.Linked++
	case unix.S_IFLNK:
		if cap(f.buf) < 4096 {
			f.buf = make([]byte, 4096)
		}
		k, err := unix.Readlinkat(lfd, n, f.buf[:cap(f.buf)])
		if err != nil {
			return &os.PathError{Op: "readlink", Path: lp, Err: err}
		}
		if err := unix.Symlinkat(string(f.buf[:k]), ufd, n); err != nil {
			return &os.PathError{Op: "symlink", Path: up, Err: err}
		}
		if err := unix.UtimesNanoAt(ufd, n, times, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &os.PathError{Op: "utimensat", Path: up, Err: err}
		}
		f.stats.Symlinks++
	case unix.S_IFDIR:
		if err := unix.Mkdirat(ufd, n, 0o700); err != nil {
			return &os.PathError{Op: "mkdir", Path: up, Err: err}
		}
		f.stats.Dirs++
		lsub, err := openDirAt(lfd, n)
		if err != nil {
			return err
		}
		defer unix.Close(lsub)
		sub, err := openDirAt(ufd, n)
		if err != nil {
			return err
		}
		defer unix.Close(sub)
		made := unix.Stat_t{Mode: unix.S_IFDIR | 0o700}
		if err := f.dir(lsub, sub, lp, up, &made); err != nil {
			return err
		}
		if err := unix.Fchmod(sub, st.Mode&0o7777); err != nil {
			return &os.PathError{Op: "chmod", Path: up, Err: err}
		}
		if err := unix.UtimesNanoAt(ufd, n, times, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &os.PathError{Op: "utimensat", Path: up, Err: err}
		}
	default:
		return fork.SpecialFile(lp, st.Mode)
	}
	return nil
}

// overlayXattrs are the prefixes of overlayfs's own extended attributes.
var overlayXattrs = []string{"user.overlay.", "trusted.overlay."}

// clean removes overlayfs's extended attributes from path (never followed)
// and reports whether they marked it opaque.
func (f *folder) clean(path string) (opaque bool, err error) {
	if cap(f.buf) < 4096 {
		f.buf = make([]byte, 4096)
	}
	var k int
	for {
		k, err = unix.Llistxattr(path, f.buf[:cap(f.buf)])
		if err == unix.ERANGE {
			f.buf = make([]byte, 2*cap(f.buf))
			continue
		}
		break
	}
	if errors.Is(err, unix.ENOTSUP) {
		return false, nil // a filesystem without xattrs holds none of overlayfs's
	}
	if err != nil {
		return false, &os.PathError{Op: "listxattr", Path: path, Err: err}
	}
	var names []string
	for _, name := range bytes.Split(f.buf[:k], []byte{0}) {
		for _, prefix := range overlayXattrs {
			if strings.HasPrefix(string(name), prefix) {
				names = append(names, string(name))
			}
		}
	}
	for _, name := range names {
		if strings.HasSuffix(name, ".opaque") && !opaque {
			opaque = opaqueDir(path)
		}
		if err := unix.Lremovexattr(path, name); err != nil && !errors.Is(err, unix.ENODATA) {
			return false, &os.PathError{Op: "removexattr " + name, Path: path, Err: err}
		}
	}
	return opaque, nil
}

// Layers is an overlay of one lower dir and its upper, unmounted: where a
// process outside the overlay's namespace finds what the overlay shows.
type Layers struct{ Lower, Upper string }

// Show returns the host path of the entry the overlay shows at rel (a
// slash-separated path inside it), in upper or lower, and false when the
// overlay shows nothing there.
func (l Layers) Show(rel string) (string, bool) {
	parts := strings.Split(rel, "/")
	up, below := l.Upper, true
	for i, part := range parts {
		up += "/" + part
		var st unix.Stat_t
		err := unix.Lstat(up, &st)
		if err != nil {
			break // the upper has nothing from here on
		}
		if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 {
			return "", false // a whiteout
		}
		if i == len(parts)-1 {
			return up, true
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return "", false // a file where the path needs a directory
		}
		if below {
			below = !opaqueDir(up)
		}
	}
	if !below {
		return "", false
	}
	p := l.Lower + "/" + rel
	if _, err := os.Lstat(p); err != nil {
		return "", false
	}
	return p, true
}

// opaqueDir reports whether overlayfs marked the upper directory path
// opaque: what was below it no longer shows.
func opaqueDir(path string) bool {
	v := make([]byte, 8)
	for _, prefix := range overlayXattrs {
		if m, err := unix.Lgetxattr(path, prefix+"opaque", v); err == nil && string(v[:m]) == "y" {
			return true
		}
	}
	return false
}

// Hide makes the overlay show nothing at rel (slash-separated, with its
// parent directories in lower), as removing it through the overlay would:
// the parents copied up (made in upper with lower's permissions and times),
// then a whiteout in upper, which an unprivileged process may make since
// Linux 5.8, else an empty directory marked opaque.
func (l Layers) Hide(rel string) error {
	p := l.Upper + "/" + rel
	if err := l.copyUpDirs(parentOf(rel)); err != nil {
		return err
	}
	if err := unix.Mknod(p, unix.S_IFCHR|0o000, 0); err == nil {
		return nil
	} else if !errors.Is(err, unix.EPERM) {
		return &os.PathError{Op: "mknod", Path: p, Err: err}
	}
	if err := os.Mkdir(p, 0o755); err != nil {
		return err
	}
	if err := unix.Lsetxattr(p, overlayXattrs[0]+"opaque", []byte("y"), 0); err != nil {
		return &os.PathError{Op: "setxattr", Path: p, Err: err}
	}
	return nil
}

// copyUpDirs makes the directories of rel missing in upper, each with the
// permissions and times of lower's, leaving its parent's times as they were
// (as overlayfs's copy-up does).
func (l Layers) copyUpDirs(rel string) error {
	if rel == "." {
		return nil
	}
	up := l.Upper
	low := l.Lower
	for _, part := range strings.Split(rel, "/") {
		up, low = up+"/"+part, low+"/"+part
		if _, err := os.Lstat(up); err == nil {
			continue
		}
		var st, pst unix.Stat_t
		if err := unix.Lstat(low, &st); err != nil {
			return &os.PathError{Op: "lstat", Path: low, Err: err}
		}
		parent := up[:strings.LastIndexByte(up, '/')]
		if err := unix.Lstat(parent, &pst); err != nil {
			return &os.PathError{Op: "lstat", Path: parent, Err: err}
		}
		if err := os.Mkdir(up, 0o700); err != nil {
			return err
		}
		if err := platform.SetTimes(parent, &pst); err != nil {
			return err
		}
		if err := unix.Chmod(up, st.Mode&0o7777); err != nil {
			return &os.PathError{Op: "chmod", Path: up, Err: err}
		}
		if err := platform.SetTimes(up, &st); err != nil {
			return err
		}
	}
	return nil
}

func parentOf(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i]
	}
	return "."
}
