package fork

import (
	"errors"

	"golang.org/x/sys/unix"
)

// renameExclusive renames old to new unless new exists
// (RENAME_NOREPLACE).
func renameExclusive(old, new string) error {
	return unix.Renameat2(unix.AT_FDCWD, old, unix.AT_FDCWD, new, unix.RENAME_NOREPLACE)
}

// exclusiveUnsupported reports whether renameExclusive failed because the
// filesystem or kernel does not take RENAME_NOREPLACE.
func exclusiveUnsupported(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS)
}

// willRead asks the kernel to read fd's pages ahead (fadvise WILLNEED).
func willRead(fd int) { unix.Fadvise(fd, 0, 0, unix.FADV_WILLNEED) }
