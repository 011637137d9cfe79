package platform

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ReflinkBlocker reports whether files in dir can be cloned (FICLONE on
// Linux, clonefile on macOS), by cloning a temporary file into another there
// and removing both. It returns nil when the clone works, a Blocker of Check
// CheckReflink naming the filesystem when the filesystem refuses it, and an
// error when the probe itself could not be made (dir missing or not
// writable).
//
// This is the one reflink probe: package fork's ReflinkBlocker, which spawn
// (fork.Select) and ferry doctor both ask, is this function. It lives here,
// beside the overlay probe, because what it reports is a fact about the
// host's filesystem, with the errno kept so the blocker can say what
// refused. What the missing capability costs is not this package's to say:
// a store that cannot clone forks with another backend (auto picks the
// overlay where it mounts, else copy), and the blocker's Problem names only
// the cause, for the caller to add what spawn will do instead.
func ReflinkBlocker(dir string) (*Blocker, error) {
	src, err := os.CreateTemp(dir, ".ferry-clone-probe-*")
	if err != nil {
		return nil, fmt.Errorf("probe for clones: %w", err)
	}
	defer os.Remove(src.Name())
	defer src.Close()
	// A block of data, so that extents are cloned and not only an empty inode.
	if _, err := src.Write(make([]byte, 4096)); err != nil {
		return nil, fmt.Errorf("probe for clones: %w", err)
	}
	refused, err := cloneProbe(dir, src)
	if err != nil {
		return nil, fmt.Errorf("probe for clones: %w", err)
	}
	if refused == nil {
		return nil, nil
	}
	if !noClone(refused) {
		return nil, fmt.Errorf("probe for clones in %s: %s: %w", dir, cloneCall, refused)
	}
	fs, ferr := FilesystemType(dir)
	if ferr != nil {
		fs = "unknown"
	}
	return reflinkBlocker(dir, fs, refused), nil
}

// noClone reports whether a clone's error means the filesystem cannot clone:
// EOPNOTSUPP is the usual answer on Linux (ext4, XFS without reflink=1,
// tmpfs), ENOTSUP on macOS (HFS+, FAT, network volumes: a different errno
// there, the same one on Linux), and the others come from filesystems and
// kernels without the call at all.
func noClone(err error) bool {
	for _, errno := range []unix.Errno{unix.EOPNOTSUPP, unix.ENOTSUP, unix.ENOTTY, unix.EINVAL, unix.EXDEV, unix.ENOSYS, unix.EPERM} {
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
		Problem: fmt.Sprintf("The %s filesystem holding %s cannot clone files (%s: %s).", fs, dir, cloneCall, errnoName(err)),
		Remedy:  reflinkRemedy,
		err:     err,
	}
	if fs == FSXFS {
		b.Problem = fmt.Sprintf("The XFS filesystem holding %s was made without reflink=1 (FICLONE: %s), so it cannot clone files.", dir, errnoName(err))
		b.Remedy = "XFS cannot turn reflink on in place (`xfs_info <mountpoint>` shows reflink=0); make a new one with it:\n" +
			"  sudo mkfs.xfs -m reflink=1 <device>\n" + reflinkRemedy
	}
	return b
}

// reflinkRemedy moves the store to a filesystem that clones, named by
// cloningFS with an example FERRY_HOME.
const reflinkRemedy = `Put Ferry's store on a filesystem that clones files (` + cloningFS + `), for example:
  export FERRY_HOME=` + cloningHome + `
or set [store] dir in ferry.toml. Until then use backend auto, which forks another way (` + "`ferry doctor`" + ` says which, and what it costs), or copy.`
