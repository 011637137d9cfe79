package platform

import (
	"os"
	"strconv"
	"strings"
)

// KernelRelease is the running kernel's release as the kernel.osrelease
// sysctl under the Host's root gives it ("6.18.44-fc-v857"), or "" when it
// cannot be read.
func (h Host) KernelRelease() string {
	data, err := os.ReadFile(h.sysctlPath(SettingKernelRelease))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// kernelVersion is the major and minor number of a release.
type kernelVersion struct{ major, minor int }

// parseRelease reads the leading major.minor of a kernel release; ok is
// false when the release does not start with two numbers.
func parseRelease(release string) (v kernelVersion, ok bool) {
	majorText, rest, found := strings.Cut(release, ".")
	if !found {
		return v, false
	}
	minorText := rest
	if i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorText = rest[:i]
	}
	major, err1 := strconv.Atoi(majorText)
	minor, err2 := strconv.Atoi(minorText)
	if err1 != nil || err2 != nil {
		return v, false
	}
	return kernelVersion{major, minor}, true
}

// before reports whether v is older than major.minor.
func (v kernelVersion) before(major, minor int) bool {
	return v.major < major || v.major == major && v.minor < minor
}

// kernelBefore reports whether the Host's kernel is known to be older than
// major.minor; an unreadable release is not known to be older.
func (h Host) kernelBefore(major, minor int) bool {
	v, ok := parseRelease(h.KernelRelease())
	return ok && v.before(major, minor)
}

// Filesystem names, as /proc/filesystems spells them.
const (
	FSExt4    = "ext4"
	FSXFS     = "xfs"
	FSBtrfs   = "btrfs"
	FSTmpfs   = "tmpfs"
	FSRamfs   = "ramfs"
	FSOverlay = "overlay"
	FSAPFS    = "apfs" // macOS: the filesystem that clones (clonefile)
)
