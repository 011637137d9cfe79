package fork

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/platform"
)

// fillFunc makes the new, empty regular file dst hold the bytes of src.
// Both are open file descriptors; src is read from offset 0.
type fillFunc func(dst, src int) error

// cloneFunc makes the regular file src a new file dst, which must not exist
// yet, never following a link at src: macOS's clonefile, which creates its
// destination itself.
type cloneFunc func(src, dst string) error

// warmFileSize bounds the files a fork asks the kernel to read ahead
// (fadvise WILLNEED) as it makes them: those a no-op cargo build reads
// (readByNoOpBuild), all small; the rest (rlibs, binaries) it only stats.
// Measured on the large bench workspace on XFS: a fresh copy fork's first
// no-op build read about 2 MB from the disk (3,888 sectors, 576 voluntary
// context switches against 183 once they were cached). The dep-info beside
// uplifted artifacts came later: without it, the first build's 112 reads
// of it were most of its waits (perf sched_switch: 72% in read).
const warmFileSize = 64 << 10

// readByNoOpBuild reports whether a no-op cargo build reads the file at
// path of a target dir: a unit's fingerprint files (.fingerprint/<unit>/),
// a build script's recorded output (build/<unit>/output, root-output), the
// rustc-info cache, and the dep-info Cargo writes beside each artifact it
// uplifts (debug/libfoo.d, debug/app.d, debug/examples/x.d), which it reads
// before it writes it again. Rustc's own dep-info in deps/ is read only
// when a unit compiles.
func readByNoOpBuild(path string) bool {
	name := filepath.Base(path)
	switch name {
	case "output", "root-output", ".rustc_info.json":
		return true
	}
	dir := filepath.Dir(path)
	if filepath.Ext(name) == ".d" && filepath.Base(dir) != "deps" {
		return true
	}
	return filepath.Base(filepath.Dir(dir)) == ".fingerprint"
}

// warmNoOpReads asks the kernel to read ahead the files of the target dir
// at root that a no-op cargo build reads (readByNoOpBuild, at most
// warmFileSize): an overlay agent's first build reads them from the base,
// whose pages nothing may have kept since the base was built. It looks
// only where those files are, in each profile dir (a dir holding
// .fingerprint, one or two levels down: debug/, <triple>/debug/): the
// profile dir's own files, .fingerprint/<unit>/, build/<unit>/, examples/.
// Advice only: what cannot be read is skipped.
func warmNoOpReads(root string) {
	advise := func(dir string) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			if !e.Type().IsRegular() || !readByNoOpBuild(path) {
				continue
			}
			if info, err := e.Info(); err != nil || info.Size() > warmFileSize {
				continue
			}
			fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			willRead(fd)
			unix.Close(fd)
		}
	}
	units := func(dir string) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.IsDir() {
				advise(filepath.Join(dir, e.Name()))
			}
		}
	}
	advise(root)
	for _, profile := range profileDirs(root) {
		advise(profile)
		advise(filepath.Join(profile, "examples"))
		units(filepath.Join(profile, ".fingerprint"))
		units(filepath.Join(profile, "build"))
	}
}

// profileDirs lists the dirs of the target dir at root that hold a
// .fingerprint: root/<profile> and root/<triple>/<profile>.
func profileDirs(root string) []string {
	var found []string
	var look func(dir string, depth int)
	look = func(dir string, depth int) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !e.IsDir() || e.Name() == ".fingerprint" {
				continue
			}
			sub := filepath.Join(dir, e.Name())
			if _, err := os.Lstat(filepath.Join(sub, ".fingerprint")); err == nil {
				found = append(found, sub)
			} else if depth < 2 {
				look(sub, depth+1)
			}
		}
	}
	look(root, 1)
	return found
}

// fileID names an inode.
type fileID struct{ dev, ino uint64 }

// tree forks one directory tree with one way of making files: filling a
// file it creates (fill), or, when clone is set, having clone make it.
type tree struct {
	fill  fillFunc
	clone cloneFunc
	stats Stats
	// links maps a base inode with more than one link to the fork path of
	// its first link, so later links are linked to that, inside the fork.
	// Only multiply-linked files are recorded (Cargo's uplifted artifacts),
	// so this stays small.
	links map[fileID]string
}

// filling is a tree whose regular files are created and filled with fill.
func filling(fill fillFunc) *tree { return &tree{fill: fill} }

// cloning is a tree whose regular files clone makes.
func cloning(clone cloneFunc) *tree { return &tree{clone: clone} }

// forkTree makes p.Target() a fork of p.BaseTarget, making regular files
// the way t does. It builds the fork in a temporary sibling and renames it
// into place last.
func forkTree(p Paths, t *tree) (st Stats, err error) {
	start := time.Now()
	target := p.Target()
	defer func() {
		if err != nil {
			err = fmt.Errorf("fork %s to %s: %w", p.BaseTarget, target, err)
		}
	}()
	if err := checkAbsent(target); err != nil {
		return Stats{}, err
	}
	var root unix.Stat_t
	if err := unix.Lstat(p.BaseTarget, &root); err != nil {
		return Stats{}, &os.PathError{Op: "lstat", Path: p.BaseTarget, Err: err}
	}
	if root.Mode&unix.S_IFMT != unix.S_IFDIR {
		return Stats{}, failure.New(failure.Refused, "", "base target %s is not a directory", p.BaseTarget)
	}
	tmp, err := os.MkdirTemp(p.AgentDir, ".target.tmp-")
	if err != nil {
		return Stats{}, err
	}
	defer func() {
		if err != nil {
			// The error that matters is the one that stopped the fork; a
			// failed cleanup leaves a .target.tmp-* that nothing reads.
			_ = platform.RemoveTree(tmp)
		}
	}()
	t.links = map[fileID]string{}
	if err := t.dir(p.BaseTarget, tmp, &root); err != nil {
		return Stats{}, err
	}
	if err := renameNoReplace(tmp, target); err != nil {
		return Stats{}, err
	}
	t.stats.Duration = time.Since(start)
	return t.stats, nil
}

// checkAbsent returns an error unless nothing exists at target.
func checkAbsent(target string) error {
	_, err := os.Lstat(target)
	if err == nil {
		return errTargetExists(target)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func errTargetExists(target string) error {
	return failure.Wrap(failure.Refused, fs.ErrExist,
		"remove the agent's old target first; a fork never merges into an existing directory",
		"%s", target)
}

// renameNoReplace renames the finished fork into place, failing if
// something appeared at target meanwhile (a plain rename would replace an
// empty directory).
func renameNoReplace(tmp, target string) error {
	err := renameExclusive(tmp, target)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOTEMPTY):
		return errTargetExists(target)
	case exclusiveUnsupported(err):
		// The filesystem does not rename exclusively: check, then rename.
		if err := checkAbsent(target); err != nil {
			return err
		}
		return os.Rename(tmp, target)
	}
	return &os.LinkError{Op: "rename", Old: tmp, New: target, Err: err}
}

// dir forks the contents of the base directory src into the existing,
// empty directory dst, then gives dst src's mode and times (st). Times come
// last: making the children changes a directory's mtime.
func (t *tree) dir(src, dst string, st *unix.Stat_t) error {
	t.stats.Dirs++
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		s := filepath.Join(src, e.Name())
		d := filepath.Join(dst, e.Name())
		var cst unix.Stat_t
		if err := unix.Lstat(s, &cst); err != nil {
			return &os.PathError{Op: "lstat", Path: s, Err: err}
		}
		switch cst.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			// Owner-writable until its children exist; its own mode is set
			// after them.
			if err := os.Mkdir(d, 0o700); err != nil {
				return err
			}
			err = t.dir(s, d, &cst)
		case unix.S_IFREG:
			err = t.file(s, d, &cst)
		case unix.S_IFLNK:
			err = t.symlink(s, d, &cst)
		default:
			err = SpecialFile(s, uint32(cst.Mode))
		}
		if err != nil {
			return err
		}
	}
	if err := unix.Chmod(dst, uint32(st.Mode)&0o7777); err != nil {
		return &os.PathError{Op: "chmod", Path: dst, Err: err}
	}
	return platform.SetTimes(dst, st)
}

// file forks the regular file src to dst.
func (t *tree) file(src, dst string, st *unix.Stat_t) error {
	t.stats.Files++
	if st.Nlink > 1 {
		id := fileID{dev: uint64(st.Dev), ino: st.Ino}
		if first, ok := t.links[id]; ok {
			return os.Link(first, dst)
		}
		t.links[id] = dst
	}
	t.stats.Bytes += st.Size

	out, err := t.create(src, dst)
	if err != nil {
		return err
	}
	if st.Size <= warmFileSize && readByNoOpBuild(dst) {
		// A clone (and a copy the kernel turned into one) is a new inode
		// none of whose pages are cached, and a no-op cargo build reads
		// every unit's fingerprint: ask for them to be read now, so the
		// agent's first build finds them in memory (see warmFileSize).
		// Advice only: an error changes nothing.
		willRead(out)
	}
	// fchmod, not the create mode: the umask would mask the create mode.
	if err := unix.Fchmod(out, uint32(st.Mode)&0o7777); err != nil {
		unix.Close(out)
		return &os.PathError{Op: "chmod", Path: dst, Err: err}
	}
	if err := unix.Close(out); err != nil {
		return &os.PathError{Op: "close", Path: dst, Err: err}
	}
	return platform.SetTimes(dst, st)
}

// create makes dst, new, with the bytes of the regular file src, and
// returns it open, for its mode to be set. A clone comes with src's mode,
// which may be read-only, and is opened for reading only.
func (t *tree) create(src, dst string) (int, error) {
	if t.clone != nil {
		if err := t.clone(src, dst); err != nil {
			return -1, fmt.Errorf("%s: %w", src, err)
		}
		out, err := unix.Open(dst, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: dst, Err: err}
		}
		return out, nil
	}
	in, err := unix.Open(src, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: src, Err: err}
	}
	defer unix.Close(in)
	out, err := unix.Open(dst, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return -1, &os.PathError{Op: "create", Path: dst, Err: err}
	}
	if err := t.fill(out, in); err != nil {
		unix.Close(out)
		return -1, fmt.Errorf("%s: %w", src, err)
	}
	return out, nil
}

// symlink recreates the link src at dst with the same text, never following it.
func (t *tree) symlink(src, dst string, st *unix.Stat_t) error {
	t.stats.Symlinks++
	text, err := os.Readlink(src)
	if err != nil {
		return err
	}
	if err := os.Symlink(text, dst); err != nil {
		return err
	}
	return platform.SetTimes(dst, st)
}

// SpecialFile refuses a file in the base target that is not a regular file,
// directory or symlink.
func SpecialFile(path string, mode uint32) error {
	kind := "special file"
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		kind = "fifo"
	case unix.S_IFSOCK:
		kind = "socket"
	case unix.S_IFCHR:
		kind = "character device"
	case unix.S_IFBLK:
		kind = "block device"
	}
	return failure.New(failure.Refused,
		"a Cargo target dir holds only files, directories and symlinks, so something else wrote into the base; "+
			"delete that base and build it again",
		"%s is a %s, which a fork cannot reproduce", path, kind)
}
