package fork

import (
	"io"
	"os"

	"github.com/ferrydev/ferry/pkg/platform"
	"golang.org/x/sys/unix"
)

// cloningCopy is the copy backend forking the way the reflink backend does
// on macOS: the walk hands each regular file to a cloneFunc, which makes the
// file itself (as clonefile does), instead of filling a file the walk
// created. Its forks are copies, so the suite holds it to copy's promises.
// It is also the new backend TestAddingABackend adds, under its own name.
type cloningCopy struct{ copyBackend }

func (cloningCopy) Name() string { return "clonewalk" }

func (cloningCopy) Cost() string {
	return "each fork is a full copy of the base's target, file by file"
}

func (cloningCopy) Fork(p Paths) (Stats, error) { return forkTree(p, cloning(copyAsClone)) }

// copyAsClone does what clonefile(2) with CLONE_NOFOLLOW does, by copying:
// it makes dst, which must not exist, with src's bytes, mode (read-only
// included) and times, and never follows a link at src.
func copyAsClone(src, dst string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: src, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		text, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(text, dst)
	}
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(os.FileMode(st.Mode & 0o777)); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return platform.SetTimes(dst, &st)
}

// CloningWalk is cloningCopy, for the external tests (conformance_test.go).
var CloningWalk Backend = cloningCopy{}

// RegisterForTest adds b to the registered backends, as a new backend's
// one line in registry.go does, until undo.
func RegisterForTest(b Backend) (undo func()) {
	saved := backends
	backends = append(append([]Backend(nil), backends...), b)
	return func() { backends = saved }
}
