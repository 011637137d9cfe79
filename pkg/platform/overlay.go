package platform

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// SettingPath is a path that an overlay mount cannot name: Value is the path.
const SettingPath = "path"

// The steps of the overlay probe's child, as its report and the blockers
// name them (after "Ferry could not").
const (
	stepPrivate   = "make / private"
	stepMount     = "mount an overlay with userxattr"
	stepWrite     = "write a file through the overlay"
	stepUpper     = "find the written file in the upper dir"
	stepWhiteout  = "delete a lower file through the overlay"
	stepOpaque    = "replace a lower directory through the overlay"
	stepReadProbe = "read the probe's layout"
)

// overlayMinKernel is the first kernel that mounts overlayfs in a user
// namespace and knows the userxattr option Ferry always mounts with.
var overlayMinKernel = kernelVersion{5, 11}

// tmpfsXattrKernel is the first kernel whose tmpfs stores user.* xattrs.
var tmpfsXattrKernel = kernelVersion{6, 6}

// OverlayBlocker reports whether Ferry can mount an unprivileged overlay
// whose upper and work dirs are in dir, the way its overlay backend mounts
// one: inside a new user and mount namespace, with the userxattr option. It
// returns the first blocker it finds, or nil; an error means the probe itself
// could not be made (dir missing or not writable, the child lost).
//
// In order:
//
//   - the user namespace, as UsernsBlocker sees it (Check CheckUserns): the
//     overlay is mounted from inside one;
//   - a kernel older than 5.11 (SettingKernelRelease), which refuses overlay
//     in a user namespace and does not know userxattr;
//   - a path the mount options cannot carry (SettingPath: , : or \ in dir);
//   - an upper dir on tmpfs on a kernel older than 6.6 (SettingKernelRelease),
//     whose tmpfs lacks user.* xattrs;
//   - a filesystem that refuses user.ferry on a file in dir
//     (SettingFilesystem), which an unprivileged overlay records its
//     whiteouts and opaque directories in;
//   - then the operation itself, in a child process (this binary
//     re-executed with a role marker this package recognises at start-up):
//     a throwaway overlay on dir is mounted in a new user and mount namespace,
//     and a file is written, a lower file deleted and a lower directory
//     replaced through it. A failure is explained: the namespace's own
//     failures as ExplainUsernsFailure does, a missing overlay module
//     (SettingOverlayModule), an upper on a filesystem overlayfs refuses such
//     as another overlay (SettingFilesystem), a refusal by policy (SettingSeccomp
//     or SettingLSM, Check CheckOverlay).
//
// The kernel release is read under the Host's root, so tests can prepare it;
// the filesystem and the attempt are those of dir on this machine. Like
// UsernsBlocker the probe is best-effort: a nil result does not guarantee
// that a later mount succeeds.
func (h Host) OverlayBlocker(dir string) (*Blocker, error) {
	if b := h.UsernsBlocker(); b != nil {
		return b, nil
	}
	release := h.KernelRelease()
	if v, ok := parseRelease(release); ok && v.before(overlayMinKernel.major, overlayMinKernel.minor) {
		return overlayKernelBlocker(release), nil
	}
	if strings.ContainsAny(dir, ",:\\") {
		return &Blocker{
			Check:   CheckOverlay,
			Setting: SettingPath,
			Value:   dir,
			Problem: "The path holds a comma, colon or backslash, which overlayfs's mount options use as separators, so an overlay cannot name an upper or work dir there.",
			Remedy:  "Move Ferry's store to a path without , : or \\, with FERRY_HOME or [store] dir in ferry.toml.",
		}, nil
	}
	fs, err := FilesystemType(dir)
	if err != nil {
		return nil, fmt.Errorf("overlay probe: %w", err)
	}
	if fs == FSTmpfs && h.kernelBefore(tmpfsXattrKernel.major, tmpfsXattrKernel.minor) {
		return tmpfsBlocker(dir, release), nil
	}

	probe, err := makeOverlayProbe(dir)
	if probe != "" {
		defer removeOverlayProbe(probe)
	}
	if err != nil {
		return nil, fmt.Errorf("overlay probe in %s: %w", dir, err)
	}
	if err := unix.Setxattr(filepath.Join(probe, "xattr"), "user.ferry", []byte("1"), 0); err != nil {
		if noXattr(err) {
			return h.xattrBlocker(dir, fs, err), nil
		}
		return nil, fmt.Errorf("overlay probe: set user.ferry on a file in %s: %w", dir, err)
	}
	step, cause, err := runOverlayChild(probe)
	if err != nil {
		return nil, err
	}
	if cause == nil {
		return nil, nil
	}
	return h.explainOverlay(step, cause, dir, fs), nil
}

// makeOverlayProbe lays out a throwaway overlay in a new directory of dir:
// lower/ with a file to delete and a directory to replace, upper/, work/,
// merged/, and a file for the xattr test. It returns the directory even on
// error, for removal.
func makeOverlayProbe(dir string) (string, error) {
	probe, err := os.MkdirTemp(dir, ".ferry-overlay-probe-*")
	if err != nil {
		return "", err
	}
	for _, d := range []string{"lower/dir", "upper", "work", "merged"} {
		if err := os.MkdirAll(filepath.Join(probe, filepath.FromSlash(d)), 0o755); err != nil {
			return probe, err
		}
	}
	for _, f := range []string{"xattr", "lower/gone", "lower/dir/file"} {
		if err := os.WriteFile(filepath.Join(probe, filepath.FromSlash(f)), []byte("ferry\n"), 0o644); err != nil {
			return probe, err
		}
	}
	return probe, nil
}

// removeOverlayProbe removes the probe. The kernel makes work/work with
// mode 0, which an unprivileged caller must open up before emptying it;
// WalkDir calls the function on a directory before reading it.
func removeOverlayProbe(probe string) {
	filepath.WalkDir(probe, func(path string, d os.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			os.Chmod(path, 0o755)
		}
		return nil
	})
	os.RemoveAll(probe)
}

// noXattr reports whether a setxattr error means the filesystem does not
// store user.* attributes.
func noXattr(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTSUP)
}

// overlayReport is the child's message: the step that failed and its errno.
type overlayReport struct {
	Step  string `json:"step"`
	Errno int    `json:"errno"`
	Msg   string `json:"msg"`
}

// explainOverlay turns a failed step of the child into a Blocker.
func (h Host) explainOverlay(step string, err error, dir, fs string) *Blocker {
	var b *Blocker
	switch {
	case step == StepCreate || step == stepPrivate:
		return h.ExplainUsernsFailure(step, err)
	case step == stepMount && errors.Is(err, unix.ENODEV):
		b = &Blocker{
			Check:   CheckOverlay,
			Setting: SettingOverlayModule,
			Value:   "not loaded",
			Problem: "The kernel does not know the overlay filesystem (ENODEV): it was built without overlayfs or its module is not loaded and was not loaded on demand.",
			Remedy: "Load the module now and at every boot:\n" +
				"  sudo modprobe overlay\n" +
				"  echo overlay | sudo tee /etc/modules-load.d/ferry-overlay.conf >/dev/null",
		}
	case step == stepMount && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP)) && !upperCapable(fs):
		b = &Blocker{
			Check:   CheckOverlay,
			Setting: SettingFilesystem,
			Value:   fs,
			Problem: fmt.Sprintf("overlayfs refuses a directory on %s, where %s is, as its upper layer (%s).", fs, dir, errnoName(err)),
			Remedy:  storeElsewhere("ext4, XFS or btrfs"),
		}
		if fs == FSOverlay {
			b.Problem = fmt.Sprintf("%s is itself on an overlay (as inside many containers), and overlayfs refuses another overlay's directory as its upper layer (%s).", dir, errnoName(err))
			b.Remedy = storeElsewhere("ext4, XFS or btrfs; in a container, a volume mounted from the host")
		}
	case step == stepMount && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EINVAL)) &&
		h.kernelBefore(overlayMinKernel.major, overlayMinKernel.minor):
		b = overlayKernelBlocker(h.KernelRelease())
	case step == stepMount && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)):
		b = h.overlayRefusal(errnoName(err))
	case noXattr(err):
		b = h.xattrBlocker(dir, fs, err)
	default:
		b = &Blocker{
			Check:   CheckOverlay,
			Setting: SettingErrno,
			Value:   errnoName(err),
			Problem: fmt.Sprintf("Ferry could not %s in %s (%s), which no known host setting explains.", step, dir, errDetail(err)),
			Remedy:  "Look for the cause in the kernel log (sudo dmesg | grep -i overlay); until it is fixed, use backend copy, or reflink on a filesystem that clones files.",
		}
	}
	b.err = err
	return b
}

// overlayRefusal explains EPERM or EACCES from the mount on a kernel new
// enough to allow it: a seccomp filter on the mount call, or policy.
func (h Host) overlayRefusal(errno string) *Blocker {
	if mode, filters, known := h.seccompMode(); known && mode != "0" {
		return &Blocker{
			Check:   CheckOverlay,
			Setting: SettingSeccomp,
			Value:   mode,
			Problem: fmt.Sprintf("The kernel refused an overlay mount inside Ferry's user namespace (%s) although it allows the namespace, and this process runs under %s seccomp filter(s), which may refuse mount.", errno, filters),
			Remedy:  seccompRemedy,
		}
	}
	return &Blocker{
		Check:   CheckOverlay,
		Setting: SettingLSM,
		Value:   errno,
		Problem: fmt.Sprintf("The kernel refused an overlay mount inside Ferry's user namespace (%s) although it allows the namespace and is new enough, so a security module policy or a kernel patched to keep overlayfs out of user namespaces refused it.", errno),
		Remedy: "Find the denial: sudo dmesg | grep -iE 'overlay|apparmor=\"DENIED\"|avc: +denied'.\n" +
			"If policy refuses it, allow overlay mounts in user namespaces for Ferry's binaries; otherwise use backend copy, or reflink on a filesystem that clones files.",
	}
}

// overlayKernelBlocker names a kernel older than 5.11.
func overlayKernelBlocker(release string) *Blocker {
	return &Blocker{
		Check:   CheckOverlay,
		Setting: SettingKernelRelease,
		Value:   release,
		Problem: fmt.Sprintf("Linux %s refuses overlay mounts inside a user namespace and lacks the userxattr option Ferry mounts with, which both came in Linux 5.11.", release),
		Remedy:  "Boot Linux 5.11 or later (your distribution's newer or hardware-enablement kernel); until then Ferry forks with copy, or reflink on a filesystem that clones files.",
	}
}

// tmpfsBlocker names an upper dir on tmpfs before Linux 6.6.
func tmpfsBlocker(dir, release string) *Blocker {
	return &Blocker{
		Check:   CheckOverlay,
		Setting: SettingKernelRelease,
		Value:   release,
		Problem: fmt.Sprintf("The overlay's upper dir would be on tmpfs (%s), whose user.* extended attributes, where an unprivileged overlay records whiteouts, came only in Linux 6.6.", dir),
		Remedy:  storeElsewhere("ext4, XFS or btrfs") + "\nor boot Linux 6.6 or later.",
	}
}

// xattrBlocker names a filesystem without user.* xattrs.
func (h Host) xattrBlocker(dir, fs string, err error) *Blocker {
	if fs == FSTmpfs && h.kernelBefore(tmpfsXattrKernel.major, tmpfsXattrKernel.minor) {
		b := tmpfsBlocker(dir, h.KernelRelease())
		b.err = err
		return b
	}
	return &Blocker{
		Check:   CheckOverlay,
		Setting: SettingFilesystem,
		Value:   fs,
		Problem: fmt.Sprintf("The %s filesystem holding %s does not store user.* extended attributes (%s), where an unprivileged overlay records its whiteouts and opaque directories.", fs, dir, errnoName(err)),
		Remedy:  storeElsewhere("ext4, XFS, btrfs, or tmpfs from Linux 6.6") + "\nor, if it is mounted with nouser_xattr, remount it with user_xattr.",
		err:     err,
	}
}

// storeElsewhere is the remedy of moving the store to a filesystem of kinds.
func storeElsewhere(kinds string) string {
	return "Put Ferry's store on a filesystem that works (" + kinds + "), for example:\n" +
		"  export FERRY_HOME=\"$HOME/.cache/ferry\"\n" +
		"or set [store] dir in ferry.toml; meanwhile Ferry forks with copy, or reflink where the store clones files."
}

// upperCapable reports whether overlayfs takes an upper dir on fs: the
// on-disk filesystems with xattrs and d_type do; overlay, network and FUSE
// filesystems may not, and are named when the mount is refused.
func upperCapable(fs string) bool {
	switch fs {
	case FSExt4, FSXFS, FSBtrfs, FSTmpfs, "f2fs", "bcachefs", "zfs":
		return true
	}
	return false
}

// errDetail is an errno's name, or the error's text when it has none.
func errDetail(err error) string {
	if name := errnoName(err); name != "unknown" {
		return name
	}
	return err.Error()
}
