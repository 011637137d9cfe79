package fork

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/platform"
)

// reflinkTree makes each file of the fork a clone (cloneFile).
func reflinkTree() *tree { return cloning(cloneFile) }

// cloneFile makes dst, which must not exist, a clone of src with
// clonefile(2): a new inode sharing src's blocks copy-on-write, with src's
// mode, times and extended attributes. CLONE_NOFOLLOW clones a link that
// replaced src since the walk saw a file as the link itself, never what it
// points to.
func cloneFile(src, dst string) error {
	err := unix.Clonefile(src, dst, unix.CLONE_NOFOLLOW)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ENOTSUP):
		return failure.Wrap(failure.Blocked, err,
			"reflink needs the base and the agent on one APFS volume; use backend copy, or auto",
			"clone (clonefile)")
	}
	return fmt.Errorf("clone (clonefile): %w", err)
}

// unsharedBytes is not known on macOS: APFS tells no file's shared extents
// (there is no FIEMAP), so PrivateBytes counts the allocated size.
func unsharedBytes(string) (int64, error) { return 0, platform.ErrNoExtents }
