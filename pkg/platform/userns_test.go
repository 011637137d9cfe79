package platform

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ferrydev/ferry/pkg/failure"
	"golang.org/x/sys/unix"
)

// Files under a fake /proc, relative to it.
const (
	cloneFile    = "sys/kernel/unprivileged_userns_clone"
	maxUserFile  = "sys/user/max_user_namespaces"
	maxMntFile   = "sys/user/max_mnt_namespaces"
	apparmorFile = "sys/kernel/apparmor_restrict_unprivileged_userns"
	mountMaxFile = "sys/fs/mount-max"
	statusFile   = "self/status"
	labelFile    = "self/attr/apparmor/current"
	nsUserFile   = "self/ns/user"
	nsMntFile    = "self/ns/mnt"
)

const testExe = "/opt/ferry/bin/ferry-shim"

// fakeHost builds a /proc holding files (path relative to /proc: content)
// and returns a Linux Host reading it as uid.
func fakeHost(t *testing.T, uid int, files map[string]string) Host {
	t.Helper()
	proc := filepath.Join(t.TempDir(), "proc")
	if err := os.MkdirAll(filepath.Join(proc, "sys"), 0o755); err != nil {
		t.Fatal(err)
	}
	for rel, content := range files {
		p := filepath.Join(proc, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Host{ProcSys: filepath.Join(proc, "sys"), Uid: uid, Exe: testExe, OS: "linux"}
}

// status is a /proc/self/status excerpt with the given seccomp mode.
func status(mode, filters string) string {
	return "Name:\tferry\nUid:\t1000\t1000\t1000\t1000\nSeccomp:\t" + mode + "\nSeccomp_filters:\t" + filters + "\n"
}

// forkExecErr is what exec.Cmd.Start returns when clone fails with errno.
func forkExecErr(errno syscall.Errno) error {
	return &os.PathError{Op: "fork/exec", Path: "/proc/self/exe", Err: errno}
}

func TestUsernsBlockerStatic(t *testing.T) {
	const user = 1000
	cases := []struct {
		name    string
		uid     int
		files   map[string]string
		setting string // "" means no blocker
		value   string
		remedy  []string // substrings the remedy must contain
	}{
		{name: "nothing to read", uid: user},
		{name: "defaults of a permissive host", uid: user, files: map[string]string{
			cloneFile: "1\n", maxUserFile: "96364\n", maxMntFile: "96364\n", apparmorFile: "0\n"}},

		{name: "unprivileged_userns_clone=0", uid: user,
			files:   map[string]string{cloneFile: "0\n", maxUserFile: "96364\n"},
			setting: SettingUnprivilegedClone, value: "0",
			remedy: []string{"sudo sysctl -w kernel.unprivileged_userns_clone=1",
				"echo 'kernel.unprivileged_userns_clone = 1' | sudo tee /etc/sysctl.d/99-ferry-kernel-unprivileged-userns-clone.conf"}},
		{name: "unprivileged_userns_clone=0 spares root", uid: 0,
			files: map[string]string{cloneFile: "0\n"}},

		{name: "max_user_namespaces=0", uid: user,
			files:   map[string]string{maxUserFile: "0\n"},
			setting: SettingMaxUserNamespaces, value: "0",
			remedy: []string{"sudo sysctl -w user.max_user_namespaces=16384",
				"/etc/sysctl.d/99-ferry-user-max-user-namespaces.conf"}},
		{name: "max_user_namespaces=0 blocks root too", uid: 0,
			files:   map[string]string{maxUserFile: "0\n"},
			setting: SettingMaxUserNamespaces, value: "0"},
		{name: "max_user_namespaces=1 cannot admit Ferry", uid: user,
			files:   map[string]string{maxUserFile: "1\n"},
			setting: SettingMaxUserNamespaces, value: "1",
			remedy: []string{"sudo sysctl -w user.max_user_namespaces=16384"}},
		{name: "max_user_namespaces=2 is not visibly blocking", uid: user,
			files: map[string]string{maxUserFile: "2\n"}},
		{name: "max_mnt_namespaces=0", uid: 0,
			files:   map[string]string{maxUserFile: "96364\n", maxMntFile: "0\n"},
			setting: SettingMaxMntNamespaces, value: "0",
			remedy: []string{"sudo sysctl -w user.max_mnt_namespaces=16384"}},

		{name: "apparmor restriction, unconfined", uid: user,
			files:   map[string]string{apparmorFile: "1\n", labelFile: "unconfined\n"},
			setting: SettingAppArmorRestrict, value: "1",
			remedy: []string{"userns,", "sudo apparmor_parser -r '/etc/apparmor.d/ferry'",
				"sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
				"/etc/sysctl.d/99-ferry-kernel-apparmor-restrict-unprivileged-userns.conf"}},
		{name: "apparmor restriction, label unreadable", uid: user,
			files:   map[string]string{apparmorFile: "1\n"},
			setting: SettingAppArmorRestrict, value: "1"},
		{name: "apparmor restriction, Ferry has its profile", uid: user,
			files: map[string]string{apparmorFile: "1\n", labelFile: "ferry (unconfined)\n"}},
		{name: "apparmor restriction spares root", uid: 0,
			files: map[string]string{apparmorFile: "1\n"}},
		{name: "apparmor restriction off", uid: user,
			files: map[string]string{apparmorFile: "0\n"}},

		{name: "order: the clone switch first", uid: user,
			files:   map[string]string{cloneFile: "0\n", maxUserFile: "0\n", apparmorFile: "1\n"},
			setting: SettingUnprivilegedClone, value: "0"},
		{name: "order: root skips to the budget", uid: 0,
			files:   map[string]string{cloneFile: "0\n", maxUserFile: "0\n", apparmorFile: "1\n"},
			setting: SettingMaxUserNamespaces, value: "0"},
		{name: "order: the budget before AppArmor", uid: user,
			files:   map[string]string{cloneFile: "1\n", maxUserFile: "1\n", apparmorFile: "1\n"},
			setting: SettingMaxUserNamespaces, value: "1"},
		{name: "a kernel without openat2", uid: user,
			files:   map[string]string{"sys/kernel/osrelease": "5.4.0-150-generic\n", maxUserFile: "96364\n"},
			setting: SettingKernelRelease, value: "5.4.0-150-generic",
			remedy: []string{"Linux 5.6 or later", "sandbox mode auto builds at host paths", "FERRY_SANDBOX=off"}},
		{name: "openat2 from 5.6", uid: user,
			files: map[string]string{"sys/kernel/osrelease": "5.6.0\n"}},
		{name: "unparsable values are not seen", uid: user,
			files: map[string]string{cloneFile: "x\n", maxUserFile: "\n", apparmorFile: "on\n"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := fakeHost(t, c.uid, c.files).UsernsBlocker()
			if c.setting == "" {
				if b != nil {
					t.Fatalf("got blocker %v, want none", b)
				}
				return
			}
			if b == nil {
				t.Fatalf("got no blocker, want %s = %s", c.setting, c.value)
			}
			checkBlocker(t, b, c.setting, c.value)
			if b.Unwrap() != nil {
				t.Errorf("a static blocker unwraps to %v, want nil", b.Unwrap())
			}
			for _, want := range c.remedy {
				if !strings.Contains(b.Remedy, want) {
					t.Errorf("remedy lacks %q:\n%s", want, b.Remedy)
				}
			}
		})
	}
}

// checkBlocker checks the fields every blocker must fill.
func checkBlocker(t *testing.T, b *Blocker, setting, value string) {
	t.Helper()
	if b.Check != CheckUserns || b.Setting != setting || b.Value != value {
		t.Errorf("got Check=%q Setting=%q Value=%q, want %q %q %q", b.Check, b.Setting, b.Value, CheckUserns, setting, value)
	}
	if b.Problem == "" || !strings.HasSuffix(b.Problem, ".") || strings.Count(b.Problem, ". ") > 0 {
		t.Errorf("Problem is not one sentence: %q", b.Problem)
	}
	if b.Remedy == "" {
		t.Errorf("no remedy")
	}
	if msg := b.Error(); !strings.Contains(msg, setting) || !strings.Contains(msg, value) {
		t.Errorf("Error() = %q does not name %s = %s", msg, setting, value)
	}
}

func TestBlockerAsError(t *testing.T) {
	b := fakeHost(t, 1000, map[string]string{cloneFile: "0"}).UsernsBlocker()
	err := fmt.Errorf("spawn agent: %w", b.AsError())
	if k := failure.KindOf(err); k != failure.Blocked {
		t.Errorf("kind %v, want %v", k, failure.Blocked)
	}
	if h := failure.HintOf(err); h != b.Remedy {
		t.Errorf("hint %q, want the remedy %q", h, b.Remedy)
	}
	var got *Blocker
	if !errors.As(err, &got) || got != b {
		t.Errorf("errors.As does not find the blocker in %v", err)
	}
	want := "cannot create Ferry's build sandbox: userns blocked by kernel.unprivileged_userns_clone = 0: The kernel lets only privileged processes create user namespaces, so Ferry, running as uid 1000, cannot build its sandbox"
	if b.AsError().Error() != want {
		t.Errorf("message\n got %q\nwant %q", b.AsError().Error(), want)
	}
	var none *Blocker
	if err := none.AsError(); err != nil {
		t.Errorf("nil blocker gives error %v, want nil", err)
	}

	// An explained failure keeps its errno reachable through AsError.
	e := fakeHost(t, 1000, nil).ExplainUsernsFailure(StepCreate, forkExecErr(unix.ENOSPC)).AsError()
	if !errors.Is(e, unix.ENOSPC) {
		t.Errorf("errors.Is(%v, ENOSPC) = false", e)
	}
}

// TestNoNamespaces: on macOS the sandbox's namespaces do not exist, and
// every probe says so with the one typed blocker, whatever /proc holds and
// whatever errno an attempt met: nothing on the host can fix it.
func TestNoNamespaces(t *testing.T) {
	h := fakeHost(t, 1000, map[string]string{maxUserFile: "0\n"})
	h.OS = "darwin"
	if h.Namespaces() {
		t.Fatal("macOS reported as having namespaces")
	}
	dir := t.TempDir()
	overlay, err := h.OverlayBlocker(dir)
	if err != nil {
		t.Fatal(err)
	}
	noProbeLeft(t, dir)
	for name, b := range map[string]*Blocker{
		"static":    h.UsernsBlocker(),
		"explained": h.ExplainUsernsFailure(StepCreate, forkExecErr(unix.EPERM)),
		"overlay":   overlay,
	} {
		t.Run(name, func(t *testing.T) {
			if b == nil {
				t.Fatal("no blocker on macOS")
			}
			checkBlocker(t, b, SettingOS, "darwin")
			if !errors.Is(b, errors.ErrUnsupported) || !errors.Is(b.AsError(), errors.ErrUnsupported) {
				t.Errorf("the blocker does not unwrap to errors.ErrUnsupported: %v", b.Unwrap())
			}
			if failure.KindOf(b.AsError()) != failure.Blocked {
				t.Errorf("kind %v, want blocked", failure.KindOf(b.AsError()))
			}
			if !strings.Contains(b.Problem, "macOS") || !strings.Contains(b.Remedy, "sandbox") || strings.Contains(b.Remedy, "sudo") {
				t.Errorf("problem or remedy does not fit macOS:\n%s\n%s", b.Problem, b.Remedy)
			}
		})
	}
	// Linux is judged by its settings, and a host that allows namespaces
	// has no blocker.
	if b := fakeHost(t, 1000, nil).UsernsBlocker(); b != nil {
		t.Errorf("Linux without settings: %v", b)
	}
}

func TestExplainUsernsFailure(t *testing.T) {
	const user = 1000
	const mountStep = "mount inside the namespace"
	withNS := map[string]string{nsUserFile: "", nsMntFile: ""}
	cases := []struct {
		name    string
		uid     int
		files   map[string]string
		where   string
		err     error
		setting string
		value   string
		want    []string // substrings of Problem+Remedy
	}{
		{name: "ENOSPC: the namespace budget is spent", uid: user,
			files: map[string]string{maxUserFile: "5\n"}, where: StepCreate, err: forkExecErr(unix.ENOSPC),
			setting: SettingMaxUserNamespaces, value: "5",
			want: []string{"could not create the user namespace (ENOSPC)", "not visible",
				"sudo sysctl -w user.max_user_namespaces=16384", "lsns -t user"}},
		{name: "ENOSPC: a large budget is doubled", uid: user,
			files: map[string]string{maxUserFile: "96364\n"}, where: StepCreate, err: forkExecErr(unix.ENOSPC),
			setting: SettingMaxUserNamespaces, value: "96364",
			want: []string{"sudo sysctl -w user.max_user_namespaces=192728"}},
		{name: "ENOSPC: budget unreadable", uid: user,
			where: StepCreate, err: unix.ENOSPC,
			setting: SettingMaxUserNamespaces, value: "unknown"},
		{name: "ENOSPC: a ceiling of 1 is said as the probe says it", uid: user,
			files: map[string]string{maxUserFile: "1\n"}, where: StepCreate, err: forkExecErr(unix.ENOSPC),
			setting: SettingMaxUserNamespaces, value: "1", want: []string{"cannot admit Ferry"}},
		{name: "ENOSPC from a mount: fs.mount-max", uid: user,
			files: map[string]string{mountMaxFile: "100000\n"}, where: mountStep, err: &os.SyscallError{Syscall: "mount", Err: unix.ENOSPC},
			setting: SettingMountMax, value: "100000", want: []string{"sudo sysctl -w fs.mount-max=200000"}},

		{name: "EPERM with the clone switch visible", uid: user,
			files: map[string]string{cloneFile: "0\n", statusFile: status("2", "1")}, where: StepCreate, err: forkExecErr(unix.EPERM),
			setting: SettingUnprivilegedClone, value: "0", want: []string{"sudo sysctl -w kernel.unprivileged_userns_clone=1"}},
		{name: "EPERM from the mount under AppArmor's restriction", uid: user,
			files: map[string]string{apparmorFile: "1\n", labelFile: "unconfined"}, where: mountStep,
			err:     &os.SyscallError{Syscall: "mount", Err: unix.EPERM},
			setting: SettingAppArmorRestrict, value: "1", want: []string{"userns,", "apparmor_parser -r"}},
		{name: "EACCES under a profile without userns", uid: user,
			files: map[string]string{apparmorFile: "1\n", labelFile: "snap.tool (enforce)\n"}, where: StepCreate, err: forkExecErr(unix.EACCES),
			setting: SettingAppArmorRestrict, value: "1", want: []string{`profile "snap.tool"`}},
		{name: "EPERM, nothing visible, seccomp filter", uid: user,
			files: map[string]string{maxUserFile: "96364\n", statusFile: status("2", "3")}, where: StepCreate, err: forkExecErr(unix.EPERM),
			setting: SettingSeccomp, value: "2",
			want: []string{"(EPERM)", "3 seccomp filter", "--security-opt seccomp=unconfined", "CLONE_NEWUSER", "RestrictNamespaces="}},
		{name: "EPERM as root, the clone switch does not apply", uid: 0,
			files: map[string]string{cloneFile: "0\n", statusFile: status("2", "1")}, where: StepCreate, err: forkExecErr(unix.EPERM),
			setting: SettingSeccomp, value: "2"},
		{name: "EACCES, nothing visible, no seccomp: a security module", uid: user,
			files: map[string]string{statusFile: status("0", "0")}, where: StepCreate, err: forkExecErr(unix.EACCES),
			setting: SettingLSM, value: "",
			want: []string{"(EACCES)", "audit2allow", "semodule -i", "userns,", "chroot"}},
		{name: "EPERM, status unreadable: seccomp or a security module", uid: user,
			where: StepCreate, err: fmt.Errorf("start: %w", forkExecErr(unix.EPERM)),
			setting: SettingSeccomp, value: "unknown", want: []string{"seccomp=unconfined", "audit2allow"}},

		{name: "EINVAL, kernel supports user namespaces", uid: user,
			files: withNS, where: StepCreate, err: forkExecErr(unix.EINVAL),
			setting: SettingErrno, value: "EINVAL", want: []string{"multi-threaded"}},
		{name: "EINVAL, kernel without CONFIG_USER_NS", uid: user,
			files: map[string]string{nsMntFile: ""}, where: StepCreate, err: forkExecErr(unix.EINVAL),
			setting: SettingKernelConfig, value: "not set", want: []string{"CONFIG_USER_NS=y"}},

		{name: "another errno", uid: user,
			files: withNS, where: StepCreate, err: forkExecErr(unix.ENOMEM),
			setting: SettingErrno, value: "ENOMEM", want: []string{"(ENOMEM)", "dmesg"}},
		{name: "no errno at all", uid: user,
			where: mountStep, err: errors.New("child vanished"),
			setting: SettingErrno, value: "unknown", want: []string{"child vanished"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := fakeHost(t, c.uid, c.files).ExplainUsernsFailure(c.where, c.err)
			if b == nil {
				t.Fatal("no blocker")
			}
			checkBlocker(t, b, c.setting, c.value)
			if !errors.Is(b, c.err) {
				t.Errorf("blocker does not unwrap to %v", c.err)
			}
			for _, w := range c.want {
				if !strings.Contains(b.Problem+"\n"+b.Remedy, w) {
					t.Errorf("neither problem nor remedy contains %q:\n%s\n%s", w, b.Problem, b.Remedy)
				}
			}
		})
	}
}

// TestRemediesRun runs the command lines of the sysctl and AppArmor remedies
// with sudo replaced by a stub, so a remedy is known to be valid shell and to
// write the files it promises.
func TestRemediesRun(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	cases := []struct {
		name  string
		host  Host
		files map[string]string // path under the fake root: exact content
		calls []string          // sudo invocations other than tee
	}{
		{
			name: "unprivileged_userns_clone",
			host: fakeHost(t, 1000, map[string]string{cloneFile: "0"}),
			files: map[string]string{
				"/etc/sysctl.d/99-ferry-kernel-unprivileged-userns-clone.conf": "kernel.unprivileged_userns_clone = 1\n"},
			calls: []string{"sysctl -w kernel.unprivileged_userns_clone=1"},
		},
		{
			name: "apparmor, Ferry's binaries",
			host: fakeHost(t, 1000, map[string]string{apparmorFile: "1"}),
			files: map[string]string{
				"/etc/apparmor.d/ferry": "abi <abi/4.0>,\nprofile ferry /opt/ferry/bin/ferry{,-*} flags=(unconfined) {\n  userns,\n}\n",
				"/etc/sysctl.d/99-ferry-kernel-apparmor-restrict-unprivileged-userns.conf": "kernel.apparmor_restrict_unprivileged_userns = 0\n"},
			calls: []string{"apparmor_parser -r /etc/apparmor.d/ferry", "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"},
		},
		{
			name: "apparmor, a shim installed as cargo",
			host: func() Host {
				h := fakeHost(t, 1000, map[string]string{apparmorFile: "1"})
				h.Exe = "/home/dev/.cache/ferry/bin/cargo"
				return h
			}(),
			files: map[string]string{
				"/etc/apparmor.d/ferry-cargo": "abi <abi/4.0>,\nprofile ferry-cargo /home/dev/.cache/ferry/bin/cargo flags=(unconfined) {\n  userns,\n}\n"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.host.UsernsBlocker()
			if b == nil {
				t.Fatal("no blocker")
			}
			root := t.TempDir()
			bin := filepath.Join(root, "bin")
			os.Mkdir(bin, 0o755)
			stub := `#!/bin/sh
if [ "$1" = tee ]; then mkdir -p "$FAKEROOT$(dirname "$2")"; exec cat >"$FAKEROOT$2"; fi
echo "$*" >>"$FAKEROOT/calls"
`
			if err := os.WriteFile(filepath.Join(bin, "sudo"), []byte(stub), 0o755); err != nil {
				t.Fatal(err)
			}
			var script []string
			for line := range strings.SplitSeq(b.Remedy, "\n") {
				if cmd, ok := strings.CutPrefix(line, "  "); ok {
					script = append(script, cmd)
				}
			}
			sh := exec.Command("sh", "-ec", strings.Join(script, "\n"))
			sh.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "FAKEROOT=" + root}
			if out, err := sh.CombinedOutput(); err != nil {
				t.Fatalf("remedy failed: %v\n%s\nscript:\n%s", err, out, strings.Join(script, "\n"))
			}
			for path, want := range c.files {
				got, err := os.ReadFile(filepath.Join(root, path))
				if err != nil {
					t.Errorf("remedy did not write %s: %v", path, err)
				} else if string(got) != want {
					t.Errorf("%s:\n got %q\nwant %q", path, got, want)
				}
			}
			calls, _ := os.ReadFile(filepath.Join(root, "calls"))
			for _, want := range c.calls {
				if !strings.Contains(string(calls), want+"\n") {
					t.Errorf("remedy did not run sudo %s; ran:\n%s", want, calls)
				}
			}
		})
	}
}
