package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// SyncTree makes the files below dir durable. macOS has no syncfs, and its
// sync(2) only schedules the writes, so each regular file is fsynced (which
// hands its data to the drive) and then one F_FULLFSYNC on dir asks the
// drive to write its cache out, as syncfs does on Linux.
func SyncTree(dir string) error {
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: path, Err: err}
		}
		defer unix.Close(fd)
		if err := unix.Fsync(fd); err != nil {
			return &os.PathError{Op: "fsync", Path: path, Err: err}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, &os.PathError{Op: "open", Path: dir, Err: err})
	}
	defer unix.Close(fd)
	_, err = unix.FcntlInt(uintptr(fd), unix.F_FULLFSYNC, 0)
	if err != nil && !errors.Is(err, unix.ENOTSUP) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("sync %s: F_FULLFSYNC: %w", dir, err)
	}
	// A volume without F_FULLFSYNC (a network one) has the fsyncs alone.
	return nil
}
