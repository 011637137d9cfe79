package platform

import (
	"os"

	"golang.org/x/sys/unix"
)

// FilesystemType names the filesystem path is on as statfs's f_fstypename
// gives it: "apfs", "hfs", "smbfs", "msdos" ….
func FilesystemType(path string) (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return "", &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	return unix.ByteSliceToString(st.Fstypename[:]), nil
}

// Exchange swaps a and b atomically (renamex_np with RENAME_SWAP).
func Exchange(a, b string) error {
	return unix.RenameatxNp(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_SWAP)
}
