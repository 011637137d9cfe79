package platform

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ReflinkBlocker reports whether files in dir can be cloned (FICLONE), by
// cloning a temporary file into another there and removing both. It returns
// nil when the clone works, a Blocker of Check CheckReflink naming the
// filesystem when the filesystem refuses it, and an error when the probe
// itself could not be made (dir missing or not writable).
//
// The missing capability does not stop Ferry: a store that cannot clone
// forks by copying, which costs a full copy of the base's target per agent.
// The probe is the same operation package fork's CanReflink tries; it lives
// here too, with the errno kept, so that the blocker can say what refused,
// and so that fork can later consult this package without a cycle.
func ReflinkBlocker(dir string) (*Blocker, error) {
	src, err := os.CreateTemp(dir, ".ferry-clone-probe-*")
	if err != nil {
		return nil, fmt.Errorf("probe for clones: %w", err)
	}
	defer os.Remove(src.Name())
	defer src.Close()
	dst, err := os.CreateTemp(dir, ".ferry-clone-probe-*")
	if err != nil {
		return nil, fmt.Errorf("probe for clones: %w", err)
	}
	defer os.Remove(dst.Name())
	defer dst.Close()
	// A block of data, so that extents are cloned and not only an empty inode.
	if _, err := src.Write(make([]byte, 4096)); err != nil {
		return nil, fmt.Errorf("probe for clones: %w", err)
	}
	err = unix.IoctlFileClone(int(dst.Fd()), int(src.Fd()))
	if err == nil {
		return nil, nil
	}
	if !noClone(err) {
		return nil, fmt.Errorf("probe for clones in %s: FICLONE: %w", dir, err)
	}
	fs, ferr := FilesystemType(dir)
	if ferr != nil {
		fs = "unknown"
	}
	return reflinkBlocker(dir, fs, err), nil
}

// noClone reports whether a FICLONE error means the filesystem cannot clone:
// EOPNOTSUPP is the usual answer (ext4, XFS without reflink=1, tmpfs), the
// others come from filesystems and kernels without the ioctl at all.
func noClone(err error) bool {
	for _, errno := range []unix.Errno{unix.EOPNOTSUPP, unix.ENOTTY, unix.EINVAL, unix.EXDEV, unix.ENOSYS, unix.EPERM} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// reflinkBlocker explains a refused clone in dir, on filesystem fs.
func reflinkBlocker(dir, fs string, err error) *Blocker {
	b := &Blocker{
		Check:   CheckReflink,
		Setting: SettingFilesystem,
		Value:   fs,
		Problem: fmt.Sprintf("The %s filesystem holding %s cannot clone files (FICLONE: %s), so every agent's fork copies the base's target in full instead of sharing its blocks.", fs, dir, errnoName(err)),
		Remedy:  reflinkRemedy,
		err:     err,
	}
	if fs == FSXFS {
		b.Problem = fmt.Sprintf("The XFS filesystem holding %s was made without reflink=1 (FICLONE: %s), so every agent's fork copies the base's target in full instead of sharing its blocks.", dir, errnoName(err))
		b.Remedy = "XFS cannot turn reflink on in place (`xfs_info <mountpoint>` shows reflink=0); make a new one with it:\n" +
			"  sudo mkfs.xfs -m reflink=1 <device>\n" + reflinkRemedy
	}
	return b
}

const reflinkRemedy = `Put Ferry's store on a filesystem that clones files (XFS made with mkfs.xfs -m reflink=1, or btrfs), for example:
  export FERRY_HOME=/mnt/xfs/ferry
or set [store] dir in ferry.toml. Until then use backend auto or copy: each fork is then a copy, which works but costs the target's size and time per agent.`
