package fork

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// copyChunk bounds one copy_file_range call.
const copyChunk = 1 << 30

// copyFile copies src to dst from their current offsets to src's end.
func copyFile(dst, src int) error {
	for {
		n, err := unix.CopyFileRange(src, nil, dst, nil, copyChunk, 0)
		if err != nil {
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) ||
				errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
				// Across filesystems on kernels that refuse it, or a
				// filesystem without it: the offsets moved by what was
				// copied, so read/write picks up from there.
				return readWrite(dst, src)
			}
			return fmt.Errorf("copy_file_range: %w", err)
		}
		if n == 0 {
			return nil
		}
	}
}
