package sandbox

import (
	"os"
	"syscall"
)

// namespaces reports whether this host's kernel has the namespaces a
// sandbox is made of: Linux's has (whether a setting blocks them is for
// Start to find out).
func namespaces() error { return nil }

// namespaceAttr starts the sandbox child of p in a new user and mount
// namespace, with the caller's uid and gid mapped to themselves and what
// the mounts need carried over the exec as ambient capabilities.
func namespaceAttr(p Plan) *syscall.SysProcAttr {
	uid, gid := os.Getuid(), os.Getgid()
	attr := &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		GidMappingsEnableSetgroups: false,
		AmbientCaps:                []uintptr{capSysAdmin},
	}
	if len(p.Overlays) > 0 || len(p.Private) > 0 {
		// Overlayfs works in its work dir (work/work, mode 0) with the
		// mounter's credentials, which for a uid mapped to itself need
		// CAP_DAC_OVERRIDE as well (see platform.OverlayBlocker).
		attr.AmbientCaps = append(attr.AmbientCaps, capDacOverride)
	}
	if p.KillOnParentDeath {
		attr.Cloneflags |= syscall.CLONE_NEWPID
		attr.Pdeathsig = syscall.SIGKILL
	}
	return attr
}

// diesWithParent reports whether a command started with attr gets a
// parent-death signal.
func diesWithParent(attr *syscall.SysProcAttr) bool {
	return attr != nil && attr.Pdeathsig != 0
}
