package platform

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// filesystems maps statfs's f_type to a name. ext2, ext3 and ext4 share one
// magic; ext4's driver serves all three today.
var filesystems = map[uint32]string{
	unix.EXT4_SUPER_MAGIC:      FSExt4,
	unix.XFS_SUPER_MAGIC:       FSXFS,
	unix.BTRFS_SUPER_MAGIC:     FSBtrfs,
	unix.TMPFS_MAGIC:           FSTmpfs,
	unix.RAMFS_MAGIC:           FSRamfs,
	unix.OVERLAYFS_SUPER_MAGIC: FSOverlay,
	unix.F2FS_SUPER_MAGIC:      "f2fs",
	unix.BCACHEFS_SUPER_MAGIC:  "bcachefs",
	0x2fc12fc1:                 "zfs",
	unix.NFS_SUPER_MAGIC:       "nfs",
	unix.FUSE_SUPER_MAGIC:      "fuse",
	unix.V9FS_MAGIC:            "9p",
	unix.CIFS_SUPER_MAGIC:      "cifs",
	unix.SMB2_SUPER_MAGIC:      "smb2",
	unix.MSDOS_SUPER_MAGIC:     "vfat",
	unix.EXFAT_SUPER_MAGIC:     "exfat",
	unix.SQUASHFS_MAGIC:        "squashfs",
	unix.ECRYPTFS_SUPER_MAGIC:  "ecryptfs",
	unix.REISERFS_SUPER_MAGIC:  "reiserfs",
	unix.NILFS_SUPER_MAGIC:     "nilfs2",
	unix.CEPH_SUPER_MAGIC:      "ceph",
	unix.AFS_FS_MAGIC:          "afs",
	unix.ZONEFS_MAGIC:          "zonefs",
}

// FilesystemType names the filesystem path is on, from statfs's magic
// number: "ext4", "xfs", "btrfs", "tmpfs", "overlay" …, or "0x…" for a type
// this package does not name.
func FilesystemType(path string) (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return "", &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	return filesystemName(uint32(st.Type)), nil
}

func filesystemName(magic uint32) string {
	if name, ok := filesystems[magic]; ok {
		return name
	}
	return fmt.Sprintf("0x%x", magic)
}

// Exchange swaps a and b atomically (renameat2 with RENAME_EXCHANGE).
func Exchange(a, b string) error {
	return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
}
