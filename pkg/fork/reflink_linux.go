package fork

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/platform"
)

// reflinkTree fills each file of the fork by cloning (cloneFile).
func reflinkTree() *tree { return filling(cloneFile) }

// cloneFile makes dst share src's extents.
func cloneFile(dst, src int) error {
	err := unix.IoctlFileClone(dst, src)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EXDEV), errors.Is(err, unix.EOPNOTSUPP):
		return failure.Wrap(failure.Blocked, err,
			"reflink needs the base and the agent on one filesystem that clones files; use backend copy, or auto",
			"clone (FICLONE)")
	}
	return fmt.Errorf("clone (FICLONE): %w", err)
}

// unsharedBytes sums the lengths of path's extents not flagged shared.
func unsharedBytes(path string) (int64, error) {
	var total int64
	err := platform.Extents(path, func(e platform.Extent) {
		if !e.Shared {
			total += int64(e.Length)
		}
	})
	return total, err
}
