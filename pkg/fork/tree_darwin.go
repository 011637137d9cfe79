package fork

import (
	"errors"

	"golang.org/x/sys/unix"
)

// renameExclusive renames old to new unless new exists (renamex_np with
// RENAME_EXCL).
func renameExclusive(old, new string) error {
	return unix.RenameatxNp(unix.AT_FDCWD, old, unix.AT_FDCWD, new, unix.RENAME_EXCL)
}

// exclusiveUnsupported reports whether renameExclusive failed because the
// volume does not take RENAME_EXCL (ENOTSUP: not APFS or HFS+).
func exclusiveUnsupported(err error) bool {
	return errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS)
}

// willRead does nothing: macOS has no fadvise, and its read-ahead hint
// (F_RDADVISE) takes a byte range per call, not worth a call per file.
func willRead(int) {}
