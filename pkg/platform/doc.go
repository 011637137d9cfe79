// Package platform names what a host does to Ferry's sandbox, as data.
//
// Ferry runs each Cargo build in a user and mount namespace that an ordinary
// user creates without help. Several host settings take that away: Debian's
// kernel.unprivileged_userns_clone, the user.max_user_namespaces budget,
// Ubuntu's kernel.apparmor_restrict_unprivileged_userns, and a container's
// seccomp filter. A bare EPERM tells the user none of this, so the package
// turns what it can read under /proc into a *Blocker: the one setting
// responsible, the value read, what it does to Ferry and the commands that
// fix it, now and across reboots.
//
// Two entry points. Host.UsernsBlocker is the static probe: it reads settings
// and reports the first one that blocks, or nil. It is best-effort in one
// direction only: a reported blocker really blocks, but nil does not promise
// that creation succeeds, because a seccomp filter or a security module can
// refuse invisibly, and the namespace budget can be spent by namespaces
// already alive, which only an attempt can count. Host.ExplainUsernsFailure
// covers that side: given the errno of a failed attempt, it names the blocker
// the errno points at.
//
// The same shape serves the store's needs. Host.OverlayBlocker tries an
// unprivileged overlay (userxattr) with its upper and work dirs in a given
// directory, in a child process in a new user and mount namespace, after the
// checks that need no attempt (kernel release, tmpfs before 6.6, user.*
// xattrs), and names the first blocker. ReflinkBlocker tries a clone in a
// directory and names the filesystem that refuses it; FilesystemType names
// a directory's filesystem. Host.AppArmor gathers the facts about AppArmor
// that `ferry setup apparmor` decides from, and Host.AppArmorProfile is the
// profile that lifts its restriction for Ferry's binaries only. Everything
// read under /proc/sys (the kernel release included) and /sys goes through
// the Host's roots, so tests point them at prepared files.
//
// On macOS there is nothing to probe for the sandbox: it has no user or
// mount namespaces, so UsernsBlocker, ExplainUsernsFailure and the overlay
// probe, which starts with it, report NoNamespaces, a blocker naming the
// operating system that unwraps to errors.ErrUnsupported (Host.OS lets a
// test on Linux ask as macOS). FilesystemType reads statfs's type name
// there and ReflinkBlocker clones with clonefile(2); both use build tags
// (*_linux.go, *_darwin.go).
//
// The package never prints; the command layer shows a Blocker through
// Blocker.AsError, whose hint is the remedy, or as data (ferry doctor). It
// only reads files, except that the overlay and reflink probes create and
// remove a throwaway directory or two files in the directory they test.
package platform
