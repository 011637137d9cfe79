package platform

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/internal/unpriv"
)

const osreleaseFile = "sys/kernel/osrelease"

// ciXFS is where .ci/run mounts XFS with reflink=1.
const ciXFS = "/mnt/ferry-xfs"

// xfsDir returns a fresh directory on a filesystem that clones, or skips.
func xfsDir(t *testing.T) string {
	t.Helper()
	root := knobs.XFS()
	if root == "" && unpriv.IsChild() && unix.Access(ciXFS, unix.W_OK) == nil {
		// unpriv.Rerun passes FERRY_TEST_XFS on; an empty one means the
		// parent had none, but .ci/run's mount may still be there.
		root = ciXFS
	}
	if root == "" {
		t.Skip("FERRY_TEST_XFS is not set (.ci/run mounts XFS with reflink=1 and sets it)")
	}
	dir, err := os.MkdirTemp(root, "ferry-platform-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// checkBlockerOf checks the fields every blocker must fill.
func checkBlockerOf(t *testing.T, b *Blocker, check, setting, value string) {
	t.Helper()
	if b == nil {
		t.Fatalf("no blocker, want %s blocked by %s = %s", check, setting, value)
	}
	if b.Check != check || b.Setting != setting || b.Value != value {
		t.Errorf("got Check=%q Setting=%q Value=%q, want %q %q %q", b.Check, b.Setting, b.Value, check, setting, value)
	}
	if b.Problem == "" || !strings.HasSuffix(b.Problem, ".") || strings.Count(b.Problem, ". ") > 0 {
		t.Errorf("Problem is not one sentence: %q", b.Problem)
	}
	if b.Remedy == "" {
		t.Errorf("no remedy")
	}
	if msg := b.Error(); !strings.Contains(msg, check) || !strings.Contains(msg, setting) || !strings.Contains(msg, value) {
		t.Errorf("Error() = %q does not name %s, %s = %s", msg, check, setting, value)
	}
}

// noProbeLeft fails when a probe left its scratch files in dir.
func noProbeLeft(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".ferry-") {
			t.Errorf("the probe left %s in %s", e.Name(), dir)
		}
	}
}

func TestParseRelease(t *testing.T) {
	cases := []struct {
		release      string
		major, minor int
		ok           bool
	}{
		{"6.18.44-fc-v857", 6, 18, true},
		{"5.10.0-21-amd64", 5, 10, true},
		{"5.11", 5, 11, true},
		{"6.6.0-rc1", 6, 6, true},
		{"4.19.0+", 4, 19, true},
		{"", 0, 0, false},
		{"six.one", 0, 0, false},
		{"6", 0, 0, false},
	}
	for _, c := range cases {
		v, ok := parseRelease(c.release)
		if ok != c.ok || ok && (v.major != c.major || v.minor != c.minor) {
			t.Errorf("parseRelease(%q) = %+v, %v; want %d.%d, %v", c.release, v, ok, c.major, c.minor, c.ok)
		}
	}
	v := kernelVersion{5, 10}
	if !v.before(5, 11) || v.before(5, 10) || !v.before(6, 0) || (kernelVersion{6, 6}).before(6, 6) {
		t.Error("kernelVersion.before is wrong")
	}
	if h := fakeHost(t, 1000, map[string]string{osreleaseFile: "6.1.0-13-amd64\n"}); h.KernelRelease() != "6.1.0-13-amd64" {
		t.Errorf("KernelRelease() = %q", h.KernelRelease())
	}
	if h := fakeHost(t, 1000, nil); h.KernelRelease() != "" || h.kernelBefore(99, 0) {
		t.Errorf("an unreadable release must read as unknown and not older: %q", h.KernelRelease())
	}
}

// TestOverlayBlockerPrepared runs the whole probe against prepared /proc/sys
// roots: every blocker the probe names before it tries anything.
func TestOverlayBlockerPrepared(t *testing.T) {
	shm := "/dev/shm"
	shmIsTmpfs := false
	if fs, err := FilesystemType(shm); err == nil && fs == FSTmpfs && unix.Access(shm, unix.W_OK) == nil {
		shmIsTmpfs = true
	}
	tmpfsDir := func(t *testing.T) string {
		if !shmIsTmpfs {
			t.Skip("no writable tmpfs at /dev/shm")
		}
		dir, err := os.MkdirTemp(shm, "ferry-platform-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	comma := filepath.Join(t.TempDir(), "a,b")
	os.Mkdir(comma, 0o755)

	cases := []struct {
		name                  string
		uid                   int
		files                 map[string]string
		dir                   func(t *testing.T) string
		check, setting, value string
		want                  []string // substrings of Problem+Remedy
	}{
		{name: "user namespaces blocked: their blocker first", uid: 1000,
			files: map[string]string{cloneFile: "0\n", osreleaseFile: "5.4.0\n"},
			check: CheckUserns, setting: SettingUnprivilegedClone, value: "0"},
		{name: "AppArmor restriction for an ordinary user", uid: 1000,
			files: map[string]string{apparmorFile: "1\n", labelFile: "unconfined\n"},
			check: CheckUserns, setting: SettingAppArmorRestrict, value: "1"},
		{name: "kernel older than 5.11", uid: 1000,
			files: map[string]string{osreleaseFile: "5.10.0-21-amd64\n"},
			check: CheckOverlay, setting: SettingKernelRelease, value: "5.10.0-21-amd64",
			want: []string{"Linux 5.10.0-21-amd64 refuses overlay mounts inside a user namespace", "5.11"}},
		{name: "kernel older than 5.11, as root", uid: 0,
			files: map[string]string{osreleaseFile: "5.8.0\n"},
			check: CheckOverlay, setting: SettingKernelRelease, value: "5.8.0"},
		{name: "kernel older than 5.6: no sandbox, so no overlay", uid: 0,
			files: map[string]string{osreleaseFile: "4.19.0\n"},
			check: CheckUserns, setting: SettingKernelRelease, value: "4.19.0",
			want: []string{"lacks openat2", "5.6"}},
		{name: "tmpfs below 6.6", uid: 1000, dir: tmpfsDir,
			files: map[string]string{osreleaseFile: "6.1.0-13-amd64\n"},
			check: CheckOverlay, setting: SettingKernelRelease, value: "6.1.0-13-amd64",
			want: []string{"on tmpfs", "6.6", "FERRY_HOME"}},
		{name: "tmpfs from 6.6 works", uid: 1000, dir: tmpfsDir,
			files: map[string]string{osreleaseFile: "6.6.0\n"}},
		{name: "ext4 below 6.6 works", uid: 1000,
			files: map[string]string{osreleaseFile: "6.1.0\n"}},
		{name: "a path with a comma", uid: 1000, dir: func(*testing.T) string { return comma },
			files: map[string]string{osreleaseFile: "6.8.0\n"},
			check: CheckOverlay, setting: SettingPath, value: comma},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.check == "" {
				if b := Real().UsernsBlocker(); b != nil {
					t.Skipf("this host blocks user namespaces: %v", b)
				}
			}
			dir := t.TempDir()
			if c.dir != nil {
				dir = c.dir(t)
			}
			b, err := fakeHost(t, c.uid, c.files).OverlayBlocker(dir)
			if err != nil {
				t.Fatal(err)
			}
			noProbeLeft(t, dir)
			if c.check == "" {
				if b != nil {
					t.Fatalf("got blocker %v, want none", b)
				}
				return
			}
			checkBlockerOf(t, b, c.check, c.setting, c.value)
			for _, w := range c.want {
				if !strings.Contains(b.Problem+"\n"+b.Remedy, w) {
					t.Errorf("neither problem nor remedy contains %q:\n%s\n%s", w, b.Problem, b.Remedy)
				}
			}
		})
	}
}

// TestExplainOverlay checks the blocker named for each way the child's
// steps can fail, with prepared roots for what the explanation reads.
func TestExplainOverlay(t *testing.T) {
	const user = 1000
	mountErr := func(errno syscall.Errno) error { return errno }
	cases := []struct {
		name                  string
		uid                   int
		files                 map[string]string
		step                  string
		err                   error
		fs                    string
		check, setting, value string
		want                  []string
	}{
		{name: "no overlay module", uid: user, files: map[string]string{osreleaseFile: "6.8.0\n"},
			step: stepMount, err: mountErr(unix.ENODEV), fs: FSExt4,
			check: CheckOverlay, setting: SettingOverlayModule, value: "not loaded",
			want: []string{"sudo modprobe overlay", "/etc/modules-load.d/"}},
		{name: "upper on another overlay", uid: user, files: map[string]string{osreleaseFile: "6.8.0\n"},
			step: stepMount, err: mountErr(unix.EINVAL), fs: FSOverlay,
			check: CheckOverlay, setting: SettingFilesystem, value: FSOverlay,
			want: []string{"itself on an overlay", "FERRY_HOME"}},
		{name: "upper on NFS", uid: user, files: map[string]string{osreleaseFile: "6.8.0\n"},
			step: stepMount, err: mountErr(unix.EINVAL), fs: "nfs",
			check: CheckOverlay, setting: SettingFilesystem, value: "nfs",
			want: []string{"overlayfs refuses a directory on nfs"}},
		{name: "kernel refusing overlay in a user namespace: too old", uid: user,
			files: map[string]string{osreleaseFile: "5.4.0-150-generic\n"},
			step:  stepMount, err: mountErr(unix.EPERM), fs: FSExt4,
			check: CheckOverlay, setting: SettingKernelRelease, value: "5.4.0-150-generic"},
		{name: "kernel too old for userxattr", uid: user,
			files: map[string]string{osreleaseFile: "5.10.0\n"},
			step:  stepMount, err: mountErr(unix.EINVAL), fs: FSXFS,
			check: CheckOverlay, setting: SettingKernelRelease, value: "5.10.0"},
		{name: "kernel refusing overlay in a user namespace: policy", uid: user,
			files: map[string]string{osreleaseFile: "6.8.0\n", statusFile: status("0", "0")},
			step:  stepMount, err: mountErr(unix.EPERM), fs: FSExt4,
			check: CheckOverlay, setting: SettingLSM, value: "EPERM",
			want: []string{"security module policy", "dmesg"}},
		{name: "a seccomp filter on mount", uid: user,
			files: map[string]string{osreleaseFile: "6.8.0\n", statusFile: status("2", "1")},
			step:  stepMount, err: mountErr(unix.EACCES), fs: FSExt4,
			check: CheckOverlay, setting: SettingSeccomp, value: "2",
			want: []string{"seccomp=unconfined"}},
		{name: "no user xattrs where the whiteout goes", uid: user,
			files: map[string]string{osreleaseFile: "6.8.0\n"},
			step:  stepWhiteout, err: mountErr(unix.EOPNOTSUPP), fs: "fuse",
			check: CheckOverlay, setting: SettingFilesystem, value: "fuse",
			want: []string{"does not store user.* extended attributes", "user_xattr"}},
		{name: "no user xattrs on tmpfs below 6.6", uid: user,
			files: map[string]string{osreleaseFile: "6.5.0\n"},
			step:  stepOpaque, err: mountErr(unix.EOPNOTSUPP), fs: FSTmpfs,
			check: CheckOverlay, setting: SettingKernelRelease, value: "6.5.0"},
		{name: "an unexplained errno", uid: user,
			files: map[string]string{osreleaseFile: "6.8.0\n"},
			step:  stepWrite, err: &os.PathError{Op: "open", Path: "/x/merged/new", Err: unix.EIO}, fs: FSExt4,
			check: CheckOverlay, setting: SettingErrno, value: "EIO",
			want: []string{"could not write a file through the overlay", "(EIO)"}},
		{name: "creating the namespace: the budget", uid: user,
			files: map[string]string{maxUserFile: "40\n"},
			step:  StepCreate, err: mountErr(unix.ENOSPC), fs: FSExt4,
			check: CheckUserns, setting: SettingMaxUserNamespaces, value: "40"},
		{name: "making / private under AppArmor's restriction", uid: user,
			files: map[string]string{apparmorFile: "1\n", labelFile: "unconfined\n"},
			step:  stepPrivate, err: mountErr(unix.EPERM), fs: FSExt4,
			check: CheckUserns, setting: SettingAppArmorRestrict, value: "1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := fakeHost(t, c.uid, c.files).explainOverlay(c.step, c.err, "/home/dev/.cache/ferry/repo-0123", c.fs)
			checkBlockerOf(t, b, c.check, c.setting, c.value)
			if !errors.Is(b, c.err) {
				t.Errorf("the blocker does not unwrap to %v", c.err)
			}
			for _, w := range c.want {
				if !strings.Contains(b.Problem+"\n"+b.Remedy, w) {
					t.Errorf("neither problem nor remedy contains %q:\n%s\n%s", w, b.Problem, b.Remedy)
				}
			}
		})
	}
}

func TestRealReflink(t *testing.T) {
	dir := t.TempDir()
	fs, _ := FilesystemType(dir)
	b, err := ReflinkBlocker(dir)
	if err != nil {
		t.Fatal(err)
	}
	noProbeLeft(t, dir)
	switch {
	case fs == FSExt4 || fs == FSTmpfs:
		checkBlockerOf(t, b, CheckReflink, SettingFilesystem, fs)
		if !strings.Contains(b.Remedy, "mkfs.xfs -m reflink=1") {
			t.Errorf("remedy: %s", b.Remedy)
		}
	default:
		t.Logf("the temp dir is on %s: %v", fs, b)
	}

	t.Run("xfs", func(t *testing.T) {
		dir := xfsDir(t)
		b, err := ReflinkBlocker(dir)
		if err != nil || b != nil {
			t.Fatalf("XFS with reflink=1: %v, %v", b, err)
		}
		noProbeLeft(t, dir)
	})

	if _, err := ReflinkBlocker(filepath.Join(dir, "absent")); err == nil {
		t.Error("a missing directory gave no error")
	}
}

func TestReflinkBlockerText(t *testing.T) {
	b := reflinkBlocker("/srv/ferry", FSXFS, unix.EOPNOTSUPP)
	checkBlockerOf(t, b, CheckReflink, SettingFilesystem, FSXFS)
	if !strings.Contains(b.Problem, "without reflink=1") || !strings.Contains(b.Remedy, "xfs_info") {
		t.Errorf("XFS without reflink: %s\n%s", b.Problem, b.Remedy)
	}
	b = reflinkBlocker("/home/dev/.cache/ferry", FSExt4, unix.EOPNOTSUPP)
	checkBlockerOf(t, b, CheckReflink, SettingFilesystem, FSExt4)
	if !strings.Contains(b.Remedy, "FERRY_HOME") || !errors.Is(b, unix.EOPNOTSUPP) {
		t.Errorf("ext4: %s (unwraps to %v)", b.Remedy, b.Unwrap())
	}
}

// TestRealProbesUnprivileged runs the real overlay and reflink probes again
// as an ordinary user when the tests run as root.
func TestRealProbesUnprivileged(t *testing.T) {
	unpriv.Rerun(t, "^(TestRealOverlay|TestRealReflink|TestOverlayBlockerPrepared)$")
}

func TestAppArmorFacts(t *testing.T) {
	yes, no := true, false
	one := 1
	cases := []struct {
		name     string
		proc     map[string]string
		sys      map[string]string // relative to the sys root; "-" makes an unreadable file
		enabled  *bool
		restrict *int
		loaded   *bool
		label    string
	}{
		{name: "no AppArmor at all"},
		{name: "Ubuntu 24.04 without the profile",
			proc:    map[string]string{apparmorFile: "1\n", labelFile: "unconfined\n"},
			sys:     map[string]string{"module/apparmor/parameters/enabled": "Y\n", "kernel/security/apparmor/profiles": "/usr/bin/man (enforce)\nlsb_release (complain)\n"},
			enabled: &yes, restrict: &one, loaded: &no, label: "unconfined"},
		{name: "the profile loaded and in use",
			proc:    map[string]string{apparmorFile: "1\n", labelFile: "ferry (unconfined)\n"},
			sys:     map[string]string{"module/apparmor/parameters/enabled": "Y\n", "kernel/security/apparmor/profiles": "ferry (unconfined)\n"},
			enabled: &yes, restrict: &one, loaded: &yes, label: "ferry (unconfined)"},
		{name: "profiles unreadable",
			proc:    map[string]string{apparmorFile: "1\n"},
			sys:     map[string]string{"module/apparmor/parameters/enabled": "Y\n", "kernel/security/apparmor/profiles": "-"},
			enabled: &yes, restrict: &one},
		{name: "disabled on the command line",
			sys:     map[string]string{"module/apparmor/parameters/enabled": "N\n"},
			enabled: &no},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := fakeHost(t, 1000, c.proc)
			h.Exe = "/opt/ferry/bin/ferry"
			h.Sys = t.TempDir()
			for rel, content := range c.sys {
				p := filepath.Join(h.Sys, filepath.FromSlash(rel))
				os.MkdirAll(filepath.Dir(p), 0o755)
				if content == "-" {
					// A directory where the file should be reads as an error
					// for root too.
					os.Mkdir(p, 0o755)
					continue
				}
				os.WriteFile(p, []byte(content), 0o644)
			}
			a := h.AppArmor()
			if !samePtr(a.Enabled, c.enabled) || !samePtr(a.Restrict, c.restrict) || !samePtr(a.Loaded, c.loaded) || a.Label != c.label {
				t.Errorf("got enabled %v restrict %v loaded %v label %q; want %v %v %v %q",
					show(a.Enabled), show(a.Restrict), show(a.Loaded), a.Label, show(c.enabled), show(c.restrict), show(c.loaded), c.label)
			}
			if a.Loaded == nil && a.LoadedError == "" {
				t.Error("an unknown Loaded without a reason")
			}
			if a.Profile != "ferry" || a.Path != "/etc/apparmor.d/ferry" || !strings.Contains(a.Text, "profile ferry /opt/ferry/bin/ferry{,-*} flags=(unconfined) {\n  userns,\n}") {
				t.Errorf("profile %q at %q:\n%s", a.Profile, a.Path, a.Text)
			}
		})
	}
	if got := ConfinedBy("ferry (unconfined)"); got != "ferry" {
		t.Errorf("ConfinedBy: %q", got)
	}
	if got := ConfinedBy("unconfined"); got != "" {
		t.Errorf("ConfinedBy(unconfined): %q", got)
	}
}

func samePtr[T comparable](a, b *T) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

func show[T any](p *T) any {
	if p == nil {
		return "nil"
	}
	return *p
}
