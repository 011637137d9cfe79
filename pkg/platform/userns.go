package platform

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// StepCreate is the step ExplainUsernsFailure is told about when creating the
// namespaces failed. Any other step is taken to run inside the new namespace.
const StepCreate = "create the user namespace"

// Host reads kernel settings below a root so tests can point it at prepared
// files.
type Host struct {
	// ProcSys is the sysctl tree; "" means /proc/sys. Its parent stands for
	// /proc, where self/status (seccomp), self/attr (AppArmor label) and
	// self/ns (kernel support) are read.
	ProcSys string
	// Uid is the caller's real uid. Root (0) holds CAP_SYS_ADMIN, which
	// exempts it from the checks that only bind unprivileged callers.
	Uid int
	// Exe is the resolved path of the running Ferry binary, which an AppArmor
	// profile in a remedy must attach to: AppArmor matches the executable's
	// real path, and the sandbox re-executes the same file. "" names the
	// default install location instead.
	Exe string
	// Sys is the sysfs root, where AppArmor's state is read
	// (module/apparmor, kernel/security/apparmor); "" means /sys.
	Sys string
	// OS is the operating system as runtime.GOOS names it; "" means the
	// one this binary runs on. Only Linux has the namespaces: elsewhere
	// UsernsBlocker reports the OS itself (see NoNamespaces).
	OS string
}

// Namespaces reports whether the Host's operating system has the user and
// mount namespaces Ferry's sandbox is made of (Linux alone).
func (h Host) Namespaces() bool { return h.os() == "linux" }

// os returns the Host's operating system.
func (h Host) os() string {
	if h.OS == "" {
		return runtime.GOOS
	}
	return h.OS
}

// Real describes the running process on this machine.
func Real() Host {
	h := Host{ProcSys: "/proc/sys", Sys: "/sys", Uid: os.Getuid()}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		h.Exe = exe
	}
	return h
}

// UsernsBlocker is the static, best-effort check: the first blocking
// configuration it can see by reading settings, or nil. In order:
//
//   - an operating system without user namespaces (macOS): NoNamespaces,
//     certain, with nothing to fix.
//   - kernel.unprivileged_userns_clone = 0, Debian's and older Ubuntu's
//     switch; binds only callers other than root, and an absent file (a
//     kernel without the patch) does not block.
//   - user.max_user_namespaces = 0 blocks everyone, root included; = 1 is
//     reported too, because a ceiling of one cannot admit Ferry, whose
//     sandboxes exist side by side (see the Problem it gives).
//   - user.max_mnt_namespaces, the budget of the mount namespace every
//     sandbox also creates, read the same way.
//   - kernel.apparmor_restrict_unprivileged_userns = 1, Ubuntu 23.10 and
//     later; binds only callers other than root that run unconfined. A
//     process under an AppArmor profile is left to what its profile says,
//     which this probe cannot read, so the fix this package suggests (a
//     profile for Ferry) stops being reported once installed.
//
// A nil result does not promise that creation succeeds: a seccomp filter or
// a security module can refuse it invisibly, and a budget above one can be
// spent by namespaces already alive. ExplainUsernsFailure names those once an
// attempt has failed.
func (h Host) UsernsBlocker() *Blocker {
	if !h.Namespaces() {
		return NoNamespaces(h.os())
	}
	if b := h.cloneBlocker(); b != nil {
		return b
	}
	if b := h.openat2Blocker(); b != nil {
		return b
	}
	if b := h.budgetBlocker(SettingMaxUserNamespaces, "user"); b != nil {
		return b
	}
	if b := h.budgetBlocker(SettingMaxMntNamespaces, "mount"); b != nil {
		return b
	}
	return h.apparmorBlocker(false)
}

// ExplainUsernsFailure turns a failed attempt into a Blocker. where is the
// step that failed, in words that follow "Ferry could not": StepCreate for
// the clone that creates the namespaces (exec.Cmd.Start's error), otherwise a
// step inside the namespace such as "mount inside the namespace". err may be
// wrapped (*os.PathError, *os.SyscallError, fmt.Errorf); the errno in it
// decides:
//
//   - ENOSPC when creating: the namespace budget, user.max_user_namespaces,
//     with the value read; how many namespaces are in use is not visible. A
//     ceiling of 0 or 1 on it or on user.max_mnt_namespaces is reported as
//     UsernsBlocker reports it.
//     ENOSPC inside the namespace: fs.mount-max, the per-namespace mount
//     ceiling a bind mount counts against.
//   - EPERM, EACCES: the static blocker that refuses with these errnos if one
//     is visible (see UsernsBlocker), else a seccomp filter when
//     /proc/self/status shows one, else a security module policy.
//   - EINVAL: a kernel without CONFIG_USER_NS when /proc/self/ns/user is
//     missing, else a request the kernel rejects as made (for example from a
//     multi-threaded process), which is Ferry's bug, not the host's.
//   - ENOSYS: a kernel without openat2 (before 5.6), which the sandbox
//     opens store paths with (Openat2Blocker).
//   - anything else: a generic blocker naming the errno.
//
// The returned blocker unwraps to err. It is never nil. On an operating
// system without namespaces it is NoNamespaces, whatever err says.
func (h Host) ExplainUsernsFailure(where string, err error) *Blocker {
	if !h.Namespaces() {
		return NoNamespaces(h.os())
	}
	var b *Blocker
	switch {
	case errors.Is(err, unix.ENOSPC):
		if where == StepCreate {
			b = h.budgetExhausted(where)
		} else {
			b = h.mountMaxReached(where)
		}
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		b = h.refusal(where, errnoName(err))
	case errors.Is(err, unix.EINVAL):
		b = h.invalid(where)
	case errors.Is(err, unix.ENOSYS):
		// A store path opened with openat2 on a kernel without it.
		b = Openat2Blocker(h.KernelRelease())
	default:
		b = generic(where, err)
	}
	b.err = err
	return b
}

// cloneBlocker checks Debian's kernel.unprivileged_userns_clone.
func (h Host) cloneBlocker() *Blocker {
	v, ok := h.readInt(SettingUnprivilegedClone)
	if !ok || v != 0 || h.Uid == 0 {
		return nil
	}
	return &Blocker{
		Check:   CheckUserns,
		Setting: SettingUnprivilegedClone,
		Value:   "0",
		Problem: fmt.Sprintf("The kernel lets only privileged processes create user namespaces, so Ferry, running as uid %d, cannot build its sandbox.", h.Uid),
		Remedy:  sysctlRemedy("Allow unprivileged user namespaces", SettingUnprivilegedClone, "1"),
	}
}

// budgetBlocker checks a namespace ceiling: kind is "user" or "mount".
func (h Host) budgetBlocker(setting, kind string) *Blocker {
	v, ok := h.readInt(setting)
	if !ok || v > 1 {
		return nil
	}
	b := &Blocker{
		Check:   CheckUserns,
		Setting: setting,
		Value:   strconv.Itoa(v),
		Remedy:  sysctlRemedy("Raise the ceiling", setting, suggestedBudget(v)),
	}
	if v <= 0 {
		b.Problem = fmt.Sprintf("No process, root included, may create a %s namespace, and every Ferry sandbox needs one.", kind)
	} else {
		b.Problem = fmt.Sprintf("A ceiling of one %s namespace per user cannot admit Ferry: every sandboxed cargo call creates one while the base builder's and other agents' sandboxes hold theirs.", kind)
	}
	return b
}

// apparmorBlocker checks Ubuntu's kernel.apparmor_restrict_unprivileged_userns.
// The static probe (explaining false) reports it only for an unconfined
// process; explaining a refusal, it also names the profile the process runs
// under, since that profile then evidently lacks a userns rule.
func (h Host) apparmorBlocker(explaining bool) *Blocker {
	v, ok := h.readInt(SettingAppArmorRestrict)
	if !ok || v != 1 || h.Uid == 0 {
		return nil
	}
	b := &Blocker{
		Check:   CheckUserns,
		Setting: SettingAppArmorRestrict,
		Value:   "1",
		Problem: "AppArmor takes every capability away inside a user namespace an unconfined, unprivileged program creates, so Ferry's sandbox cannot mount the worktree and target into place.",
		Remedy: h.apparmorProfileRemedy("Give Ferry's binaries an AppArmor profile that allows user namespaces, which keeps the restriction for every other program") +
			"\nor lift the restriction for every program:\n" + sysctlCommands(SettingAppArmorRestrict, "0") +
			"\n(`ferry setup apparmor` checks what this host needs and prints the profile's installation as one script to run with sudo.)",
	}
	label := h.apparmorLabel()
	if label == "" || label == "unconfined" {
		return b
	}
	if !explaining {
		return nil
	}
	name, _, _ := strings.Cut(label, " (")
	b.Problem = fmt.Sprintf("Ferry runs under the AppArmor profile %q, which does not allow it to create and use user namespaces while AppArmor restricts them.", name)
	return b
}

// budgetExhausted explains ENOSPC from creating the namespaces.
func (h Host) budgetExhausted(where string) *Blocker {
	v, ok := h.readInt(SettingMaxUserNamespaces)
	value := "unknown"
	if ok {
		value = strconv.Itoa(v)
	}
	// A ceiling of 0 or 1 is what the static probe reports; say it the same way.
	if b := h.budgetBlocker(SettingMaxUserNamespaces, "user"); b != nil {
		return b
	}
	if b := h.budgetBlocker(SettingMaxMntNamespaces, "mount"); b != nil {
		return b
	}
	remedy := sysctlRemedy("Raise the ceiling", SettingMaxUserNamespaces, suggestedBudget(v)) +
		"\n`lsns -t user` lists the user namespaces alive now; if raising the ceiling does not help, " +
		SettingMaxMntNamespaces + " is the other budget this step draws on, and nesting deeper than 32 user namespaces fails the same way."
	return &Blocker{
		Check:   CheckUserns,
		Setting: SettingMaxUserNamespaces,
		Value:   value,
		Problem: fmt.Sprintf("Ferry could not %s (ENOSPC): the user namespaces already alive for this user have used up the budget, though how many are in use is not visible to Ferry.", where),
		Remedy:  remedy,
	}
}

// mountMaxReached explains ENOSPC from a mount inside the namespace.
func (h Host) mountMaxReached(where string) *Blocker {
	v, ok := h.readInt(SettingMountMax)
	value, next := "unknown", "200000"
	if ok {
		value = strconv.Itoa(v)
		next = strconv.Itoa(max(2*v, 200000))
	}
	return &Blocker{
		Check:   CheckUserns,
		Setting: SettingMountMax,
		Value:   value,
		Problem: fmt.Sprintf("Ferry could not %s (ENOSPC): the sandbox's mount namespace starts with a copy of every host mount, and one more would exceed the per-namespace ceiling.", where),
		Remedy:  sysctlRemedy("Raise the ceiling", SettingMountMax, next),
	}
}

// refusal explains EPERM and EACCES.
func (h Host) refusal(where, errno string) *Blocker {
	if b := h.cloneBlocker(); b != nil {
		return b
	}
	if b := h.apparmorBlocker(true); b != nil {
		return b
	}
	mode, filters, known := h.seccompMode()
	switch {
	case known && mode != "0":
		return &Blocker{
			Check:   CheckUserns,
			Setting: SettingSeccomp,
			Value:   mode,
			Problem: fmt.Sprintf("Ferry could not %s (%s) although no sysctl forbids it: this process runs under %s seccomp filter(s), the way a container runtime's default profile or systemd's RestrictNamespaces= refuses namespaces.", where, errno, filters),
			Remedy:  seccompRemedy,
		}
	case known:
		return &Blocker{
			Check:   CheckUserns,
			Setting: SettingLSM,
			Problem: fmt.Sprintf("Ferry could not %s (%s) although no sysctl forbids it and no seccomp filter applies, so a security module policy (SELinux or AppArmor) refused it, or Ferry runs inside a chroot.", where, errno),
			Remedy:  h.lsmRemedy(),
		}
	}
	return &Blocker{
		Check:   CheckUserns,
		Setting: SettingSeccomp,
		Value:   "unknown",
		Problem: fmt.Sprintf("Ferry could not %s (%s) although no sysctl forbids it, so a seccomp filter or a security module policy refused it.", where, errno),
		Remedy:  "If Ferry runs under a seccomp filter:\n" + seccompRemedy + "\nOtherwise:\n" + h.lsmRemedy(),
	}
}

// invalid explains EINVAL.
func (h Host) invalid(where string) *Blocker {
	ns := filepath.Join(h.proc(), "self", "ns")
	if _, err := os.Lstat(ns); err == nil {
		if _, err := os.Lstat(filepath.Join(ns, "user")); errors.Is(err, os.ErrNotExist) {
			return &Blocker{
				Check:   CheckUserns,
				Setting: SettingKernelConfig,
				Value:   "not set",
				Problem: fmt.Sprintf("Ferry could not %s (EINVAL): this kernel was built without user namespaces (no /proc/self/ns/user).", where),
				Remedy:  "Boot a kernel built with CONFIG_USER_NS=y, as every major distribution's kernel is.",
			}
		}
	}
	return &Blocker{
		Check:   CheckUserns,
		Setting: SettingErrno,
		Value:   "EINVAL",
		Problem: fmt.Sprintf("Ferry could not %s (EINVAL) although the kernel supports user namespaces: the request was made in a way the kernel rejects, for example from a multi-threaded process, which is a bug in Ferry rather than a host setting.", where),
		Remedy:  "Report this message to Ferry's maintainers; no host setting fixes it.",
	}
}

// generic names an errno no setting explains.
func generic(where string, err error) *Blocker {
	name := errnoName(err)
	detail := name
	if err == nil {
		detail = "no error given"
	} else if name == "unknown" {
		detail = err.Error()
	}
	return &Blocker{
		Check:   CheckUserns,
		Setting: SettingErrno,
		Value:   name,
		Problem: fmt.Sprintf("Ferry could not %s (%s), which no known host setting explains.", where, detail),
		Remedy:  "Look for the cause in the kernel log (sudo dmesg | tail -n 50); if nothing there explains it, report this message to Ferry's maintainers.",
	}
}

const seccompRemedy = `In a container, start it without the filter: docker run --security-opt seccomp=unconfined … (podman takes the same option), or give it a seccomp profile that allows unshare, and clone with CLONE_NEWUSER; in Kubernetes set securityContext.seccompProfile.type: Unconfined.
Under systemd, let the unit create the namespaces Ferry uses: RestrictNamespaces=user mnt pid (or no RestrictNamespaces= at all), and no SystemCallFilter= that removes @mount; then systemctl daemon-reload and restart it.`

func (h Host) lsmRemedy() string {
	return "Find the denial in the kernel's audit log: sudo dmesg | grep -iE 'apparmor=\"DENIED\"|avc: +denied'.\n" +
		"For SELinux, turn the logged denial into a local policy module, which persists:\n" +
		"  sudo ausearch -m avc -ts recent | audit2allow -M ferry-userns\n" +
		"  sudo semodule -i ferry-userns.pp\n" +
		h.apparmorProfileRemedy("For AppArmor, give Ferry's binaries a profile that allows user namespaces") + "\n" +
		"In a chroot, run Ferry outside it: the kernel refuses user namespaces to chrooted processes."
}

// apparmorProfileRemedy gives the commands that install a profile for Ferry's
// binaries with a userns rule. The file under /etc/apparmor.d is loaded again
// at every boot, so loading it now is also the persistent form. It is written
// with printf rather than a here-document so that the lines survive being
// indented in a hint.
func (h Host) apparmorProfileRemedy(intro string) string {
	file, text := h.AppArmorProfile()
	var cmd strings.Builder
	cmd.WriteString("printf '%s\\n'")
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		cmd.WriteString(" ")
		cmd.WriteString(shellQuote(line))
	}
	cmd.WriteString(" | sudo tee " + shellQuote(file) + " >/dev/null")
	return intro + " (it applies to Ferry processes started afterwards, and is loaded again at boot):\n" +
		"  " + cmd.String() + "\n" +
		"  sudo apparmor_parser -r " + shellQuote(file)
}

// AppArmorProfile returns the AppArmor profile that lets Ferry's binaries
// create and use user namespaces while AppArmor restricts them for other
// programs, and the file under /etc/apparmor.d it belongs in. It attaches to
// ferry and every ferry-* binary (ferry-base, ferry-spawn, ferry-shim,
// ferry-watch, ferry-gc, ferry-rustc) in the resolved directory of Exe, since
// AppArmor matches an executable's real path; see apparmorTarget. The
// profile is otherwise unconfined: it adds the userns permission and takes
// nothing away.
func (h Host) AppArmorProfile() (path, text string) {
	name, attach := h.apparmorTarget()
	return "/etc/apparmor.d/" + name, "abi <abi/4.0>,\n" +
		"profile " + name + " " + attach + " flags=(unconfined) {\n" +
		"  userns,\n" +
		"}\n"
}

// apparmorTarget returns the profile name and the path it attaches to: all of
// ferry and ferry-* beside the running binary when it is one of them, else
// the running binary itself (the shim may be installed under another name).
func (h Host) apparmorTarget() (name, attach string) {
	if h.Exe == "" {
		return "ferry", "/usr/local/bin/ferry{,-*}"
	}
	dir, base := filepath.Split(h.Exe)
	if base == "ferry" || strings.HasPrefix(base, "ferry-") {
		return "ferry", dir + "ferry{,-*}"
	}
	return "ferry-" + profileName(base), h.Exe
}

// profileName keeps the characters that are safe in a profile and file name.
func profileName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '-'
	}, s)
}

// sysctlRemedy is intro followed by the commands that set a sysctl now and
// across reboots.
func sysctlRemedy(intro, setting, value string) string {
	return intro + ", now and across reboots:\n" + sysctlCommands(setting, value)
}

// sysctlCommands sets setting to value now and in its own /etc/sysctl.d file,
// named to sort after distribution defaults such as Ubuntu's
// 10-apparmor.conf, and separate per setting so that fixing one blocker never
// overwrites the fix for another.
func sysctlCommands(setting, value string) string {
	file := "/etc/sysctl.d/99-ferry-" + strings.NewReplacer(".", "-", "_", "-").Replace(setting) + ".conf"
	return "  sudo sysctl -w " + setting + "=" + value + "\n" +
		"  echo '" + setting + " = " + value + "' | sudo tee " + file + " >/dev/null"
}

// suggestedBudget is a namespace ceiling to suggest when the current one is v:
// double it, and never less than 16384, roomy for any number of agents.
func suggestedBudget(v int) string {
	return strconv.Itoa(max(2*v, 16384))
}

// openat2MinKernel is the first kernel with openat2, with which the sandbox
// opens store paths without following links (RESOLVE_NO_SYMLINKS).
var openat2MinKernel = kernelVersion{5, 6}

// openat2Blocker reports a kernel without openat2: one whose release is
// before 5.6, or, on this machine (ProcSys unset), whose openat2 answers
// ENOSYS (a kernel that names a later release but lacks it).
func (h Host) openat2Blocker() *Blocker {
	release := h.KernelRelease()
	v, ok := parseRelease(release)
	missing := ok && v.before(openat2MinKernel.major, openat2MinKernel.minor)
	if !missing && h.ProcSys == "" {
		missing = openat2Missing()
	}
	if !missing {
		return nil
	}
	return Openat2Blocker(release)
}

// Openat2Blocker is the blocker of a kernel (release, as it names itself)
// without openat2.
func Openat2Blocker(release string) *Blocker {
	return &Blocker{
		Check:   CheckUserns,
		Setting: SettingKernelRelease,
		Value:   release,
		Problem: fmt.Sprintf("Linux %s lacks openat2, which came in Linux 5.6: the sandbox opens every path in the store with it, never following a symbolic link planted there.", release),
		Remedy:  "Boot Linux 5.6 or later (your distribution's newer or hardware-enablement kernel); until then sandbox mode auto builds at host paths, and FERRY_SANDBOX=off (or [sandbox] mode = \"off\") does so without this warning.",
	}
}

// procSys returns the sysctl root.
func (h Host) procSys() string {
	if h.ProcSys == "" {
		return "/proc/sys"
	}
	return h.ProcSys
}

// proc returns the /proc the sysctl root belongs to.
func (h Host) proc() string { return filepath.Dir(h.procSys()) }

// sysctlPath is the file of a sysctl, by its dotted name, under the root.
func (h Host) sysctlPath(setting string) string {
	return filepath.Join(h.procSys(), filepath.FromSlash(strings.ReplaceAll(setting, ".", "/")))
}

// sys returns the sysfs root.
func (h Host) sys() string {
	if h.Sys == "" {
		return "/sys"
	}
	return h.Sys
}

// readInt reads a sysctl by its dotted name. A file that is absent,
// unreadable or not an integer reads as not set: the probe reports only what
// it can see.
func (h Host) readInt(setting string) (int, bool) {
	data, err := os.ReadFile(h.sysctlPath(setting))
	if err != nil {
		return 0, false
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, false
	}
	return v, true
}

// apparmorLabel returns this process's AppArmor label ("unconfined",
// "ferry (unconfined)", "foo (enforce)"), or "" when it cannot be read. The
// AppArmor-specific file comes first: with stacked modules the generic one
// may belong to another.
func (h Host) apparmorLabel() string {
	for _, rel := range []string{"self/attr/apparmor/current", "self/attr/current"} {
		data, err := os.ReadFile(filepath.Join(h.proc(), filepath.FromSlash(rel)))
		if err == nil {
			if label := strings.TrimRight(string(data), "\x00\n "); label != "" {
				return label
			}
		}
	}
	return ""
}

// seccompMode returns the Seccomp: and Seccomp_filters: fields of
// /proc/self/status. A filter is inherited by every child and applies to the
// clone that creates the namespaces, so this process's mode is the one that
// matters. known is false when the status cannot be read or lacks the field.
func (h Host) seccompMode() (mode, filters string, known bool) {
	data, err := os.ReadFile(filepath.Join(h.proc(), "self", "status"))
	if err != nil {
		return "", "", false
	}
	filters = "one or more"
	for line := range strings.SplitSeq(string(data), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch key {
		case "Seccomp":
			mode, known = strings.TrimSpace(val), true
		case "Seccomp_filters":
			filters = strings.TrimSpace(val)
		}
	}
	return mode, filters, known
}

// errnoName returns the symbolic name of the errno in err, or "unknown".
func errnoName(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if name := unix.ErrnoName(errno); name != "" {
			return name
		}
		return "errno " + strconv.Itoa(int(errno))
	}
	return "unknown"
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
