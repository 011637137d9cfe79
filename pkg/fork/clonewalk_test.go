package fork

import (
	"github.com/ferrydev/ferry/internal/treetest"
	"io"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// cloningCopy is the copy backend forking the way the reflink backend does
// on macOS: the walk hands each regular file to a cloneFunc, which makes the
// file itself (as clonefile does), instead of filling a file the walk
// created. Its forks are copies, so the suite holds it to copy's promises.
type cloningCopy struct{ copyBackend }

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
	return SetTimes(dst, &st)
}

// TestCloningWalk runs the conformance suite over the walk macOS's reflink
// backend takes (cloneFunc, clonefile), which Linux never takes on its own:
// the tree, hard links, modes (a clone comes read-only when its source is),
// times, refusals and cleanup must be the same as when the walk fills the
// files.
func TestCloningWalk(t *testing.T) {
	b := cloningCopy{}
	for _, c := range conformance {
		t.Run(c.name, func(t *testing.T) { c.fn(t, b, treetest.Dir(t, os.TempDir())) })
	}
}
