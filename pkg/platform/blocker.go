package platform

import (
	"errors"
	"strings"

	"github.com/ferrydev/ferry/pkg/failure"
)

// The Check of a Blocker: what it blocks.
const (
	// CheckUserns is the Check of every blocker about user namespaces.
	CheckUserns = "userns"
	// CheckOverlay is an unprivileged overlay mount (see Host.OverlayBlocker).
	CheckOverlay = "overlay"
	// CheckReflink is cloning files in the store (see ReflinkBlocker): its
	// absence makes Ferry fork with another backend rather than blocking it.
	CheckReflink = "reflink"
)

// The Setting of a Blocker: a sysctl by its dotted name, or one of the
// non-sysctl causes below.
const (
	SettingUnprivilegedClone = "kernel.unprivileged_userns_clone"
	SettingMaxUserNamespaces = "user.max_user_namespaces"
	SettingMaxMntNamespaces  = "user.max_mnt_namespaces"
	SettingAppArmorRestrict  = "kernel.apparmor_restrict_unprivileged_userns"
	SettingMountMax          = "fs.mount-max"

	// SettingSeccomp is a seccomp filter on the process; Value is the
	// Seccomp: field of /proc/self/status ("2" is filter mode), or "unknown"
	// when it could not be read and a security module is as likely.
	SettingSeccomp = "seccomp"
	// SettingLSM is a security module policy (SELinux, AppArmor), named when
	// no sysctl and no seccomp filter explains a refusal.
	SettingLSM = "lsm"
	// SettingKernelConfig is a kernel built without CONFIG_USER_NS.
	SettingKernelConfig = "CONFIG_USER_NS"
	// SettingErrno is no known setting: Value is the errno's name.
	SettingErrno = "errno"

	// SettingKernelRelease is the kernel's release (the kernel.osrelease
	// sysctl), named when a feature Ferry needs came in a later kernel.
	SettingKernelRelease = "kernel.osrelease"
	// SettingFilesystem is the type of the filesystem a directory is on
	// (Value: its name, as FilesystemType gives it).
	SettingFilesystem = "filesystem"
	// SettingOverlayModule is a kernel without overlayfs, built in or as a
	// module.
	SettingOverlayModule = "CONFIG_OVERLAY_FS"
	// SettingOS is an operating system without the facility (Value: its
	// name as runtime.GOOS gives it, "darwin"): nothing on the host can
	// turn it on.
	SettingOS = "os"
)

// NoNamespaces is the blocker of an operating system without user and
// mount namespaces, goos as runtime.GOOS names it: on macOS Ferry builds
// without the sandbox, at host paths. It unwraps to errors.ErrUnsupported,
// so callers tell "not on this platform" from a host setting Ferry could
// name a fix for.
func NoNamespaces(goos string) *Blocker {
	name := goos
	if goos == "darwin" {
		name = "macOS"
	}
	return &Blocker{
		Check:   CheckUserns,
		Setting: SettingOS,
		Value:   goos,
		Problem: name + " has no user or mount namespaces, so Ferry cannot build in its namespace sandbox there.",
		Remedy: "Nothing on this host turns namespaces on: build without the sandbox, at host paths (sandbox mode auto picks that here, or set [sandbox] mode = \"off\"); " +
			"each fork then drops the units that recorded the base's paths. `ferry doctor` says what this mode costs.",
		err: errors.ErrUnsupported,
	}
}

// Blocker names the one host setting that blocks an operation, and the fix.
type Blocker struct {
	Check   string `json:"check"`   // what was blocked: CheckUserns, CheckOverlay, CheckReflink
	Setting string `json:"setting"` // the responsible setting, e.g. SettingAppArmorRestrict
	Value   string `json:"value"`   // what was read, e.g. "1"
	Problem string `json:"problem"` // one sentence: what the setting does to Ferry
	Remedy  string `json:"remedy"`  // the commands that fix it, now and across reboots

	// err is the failure this blocker explains, when it came from
	// ExplainUsernsFailure, or errors.ErrUnsupported (NoNamespaces);
	// Unwrap returns it so errors.Is still finds the errno.
	err error
}

// Error names the setting, its value and the problem. It does not repeat the
// error of the failed step: callers that report the step already show it,
// and Unwrap keeps it reachable.
func (b *Blocker) Error() string {
	var s strings.Builder
	s.WriteString(b.Check)
	s.WriteString(" blocked by ")
	s.WriteString(b.Setting)
	if b.Value != "" {
		s.WriteString(" = ")
		s.WriteString(b.Value)
	}
	if b.Problem != "" {
		s.WriteString(": ")
		s.WriteString(strings.TrimSuffix(b.Problem, "."))
	}
	return s.String()
}

// Unwrap returns the failure the blocker explains, or nil for a blocker found
// by the static probe (errors.ErrUnsupported for NoNamespaces).
func (b *Blocker) Unwrap() error { return b.err }

// AsError wraps the blocker as a *failure.Error of Kind failure.Blocked whose
// Hint is the Remedy. A nil blocker gives a nil error, so
// `return h.UsernsBlocker().AsError()` reads as intended.
func (b *Blocker) AsError() error {
	if b == nil {
		return nil
	}
	return failure.Wrap(failure.Blocked, b, b.Remedy, "cannot create Ferry's build sandbox")
}

// Opaque returns b as an error whose chain ends at b: errors.As finds the
// blocker, errors.Is finds no errno under it. A namespace budget that is
// spent fails with ENOSPC, which is not a full disk, and failure.KindOf
// takes any chain holding ENOSPC for one.
func (b *Blocker) Opaque() error { return opaque{b} }

type opaque struct{ b *Blocker }

func (o opaque) Error() string { return o.b.Error() }

func (o opaque) As(target any) bool {
	if t, ok := target.(**Blocker); ok {
		*t = o.b
		return true
	}
	return false
}
