package doctor

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/internal/unpriv"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
	"github.com/ferrydev/ferry/pkg/toolchain"
)

func TestMain(m *testing.M) {
	sandbox.Init()
	os.Exit(m.Run())
}

// Files under a prepared /proc, relative to it.
const (
	cloneFile     = "sys/kernel/unprivileged_userns_clone"
	maxUserFile   = "sys/user/max_user_namespaces"
	maxMntFile    = "sys/user/max_mnt_namespaces"
	apparmorFile  = "sys/kernel/apparmor_restrict_unprivileged_userns"
	osreleaseFile = "sys/kernel/osrelease"
	labelFile     = "self/attr/apparmor/current"
)

// preparedHost returns a Host reading a /proc made of files, as uid.
func preparedHost(t *testing.T, uid int, files map[string]string) platform.Host {
	t.Helper()
	proc := filepath.Join(t.TempDir(), "proc")
	os.MkdirAll(filepath.Join(proc, "sys"), 0o755)
	for rel, content := range files {
		p := filepath.Join(proc, filepath.FromSlash(rel))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return platform.Host{ProcSys: filepath.Join(proc, "sys"), Uid: uid, Exe: "/opt/ferry/bin/ferry"}
}

// inRepo is Options for a repository whose store parent is parent (the
// store itself is not created), with the given backend and sandbox mode.
func inRepo(h platform.Host, parent, backend, mode string) Options {
	return Options{
		Host:     h,
		Repo:     "/src/project",
		Settings: &config.Settings{StoreParent: parent, Backend: backend, SandboxMode: mode, Layered: true},
		Store:    testStore(parent),
	}
}

// jsonReport is the report as `ferry doctor --json` prints it, read back
// generically, so the tests check the JSON shape and not the Go one.
type jsonReport struct {
	Repository string `json:"repository"`
	Store      string `json:"store"`
	Note       string `json:"note"`
	Checks     []struct {
		Name    string `json:"name"`
		Status  string `json:"status"`
		Detail  string `json:"detail"`
		Path    string `json:"path"`
		Blocker *struct {
			Check, Setting, Value, Problem, Remedy string
		} `json:"blocker"`
	} `json:"checks"`
	Spawn *struct {
		Works           bool   `json:"works"`
		Backend         string `json:"backend"`
		BackendReason   string `json:"backend_reason"`
		Isolation       string `json:"isolation"`
		IsolationReason string `json:"isolation_reason"`
	} `json:"spawn"`
	ExitCode int `json:"exit_code"`
}

func viaJSON(t *testing.T, r *Report) jsonReport {
	t.Helper()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var j jsonReport
	if err := json.Unmarshal(data, &j); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	for _, key := range []string{`"checks"`, `"exit_code"`, `"host"`, `"kernel"`} {
		if !strings.Contains(string(data), key) {
			t.Errorf("the JSON lacks %s:\n%s", key, data)
		}
	}
	return j
}

// check returns the named check of a JSON report, failing when absent.
func (j jsonReport) check(t *testing.T, name string) (status, setting, value string) {
	t.Helper()
	for _, c := range j.Checks {
		if c.Name == name {
			if c.Blocker != nil {
				if c.Blocker.Check == "" || c.Blocker.Problem == "" || c.Blocker.Remedy == "" {
					t.Errorf("check %s: incomplete blocker %+v", name, c.Blocker)
				}
				return c.Status, c.Blocker.Setting, c.Blocker.Value
			}
			return c.Status, "", ""
		}
	}
	t.Fatalf("no check %q in %+v", name, j.Checks)
	return
}

func skipIfBlocked(t *testing.T) {
	t.Helper()
	if b := platform.Real().UsernsBlocker(); b != nil {
		t.Skipf("this host blocks user namespaces: %v", b)
	}
}

// TestPreparedRoots runs doctor against prepared /proc/sys roots, one per
// blocker, and checks through the JSON that each names the right one, with
// the exit code spawn would give.
func TestPreparedRoots(t *testing.T) {
	skipIfBlocked(t)
	const user = 1000
	shmTmpfs := func() bool {
		fs, err := platform.FilesystemType("/dev/shm")
		return err == nil && fs == platform.FSTmpfs && unix.Access("/dev/shm", unix.W_OK) == nil
	}()
	cases := []struct {
		name     string
		uid      int
		files    map[string]string
		onTmpfs  bool
		check    string // the check that names the blocker
		status   Status
		setting  string
		value    string
		exit     int
		isolated bool
	}{
		{name: "unprivileged_userns_clone=0", uid: user,
			files: map[string]string{cloneFile: "0\n"},
			check: CheckUserns, status: Blocked, setting: platform.SettingUnprivilegedClone, value: "0", exit: 4},
		{name: "max_user_namespaces=0", uid: 0,
			files: map[string]string{maxUserFile: "0\n"},
			check: CheckUserns, status: Blocked, setting: platform.SettingMaxUserNamespaces, value: "0", exit: 4},
		{name: "max_user_namespaces=1", uid: user,
			files: map[string]string{maxUserFile: "1\n"},
			check: CheckUserns, status: Blocked, setting: platform.SettingMaxUserNamespaces, value: "1", exit: 4},
		{name: "max_mnt_namespaces=0", uid: user,
			files: map[string]string{maxUserFile: "65536\n", maxMntFile: "0\n"},
			check: CheckUserns, status: Blocked, setting: platform.SettingMaxMntNamespaces, value: "0", exit: 4},
		{name: "apparmor restriction for an ordinary user", uid: user,
			files: map[string]string{apparmorFile: "1\n", labelFile: "unconfined\n"},
			check: CheckUserns, status: Blocked, setting: platform.SettingAppArmorRestrict, value: "1", exit: 4},
		{name: "apparmor restriction spares root", uid: 0,
			files: map[string]string{apparmorFile: "1\n", labelFile: "unconfined\n"},
			check: CheckUserns, status: OK, exit: 0, isolated: true},
		{name: "kernel older than 5.11: no overlay, spawn works", uid: user,
			files: map[string]string{osreleaseFile: "5.10.0-21-amd64\n"},
			check: CheckOverlay, status: Warning, setting: platform.SettingKernelRelease, value: "5.10.0-21-amd64", exit: 0, isolated: true},
		{name: "store on tmpfs below 6.6", uid: user, onTmpfs: true,
			files: map[string]string{osreleaseFile: "6.1.0-13-amd64\n"},
			check: CheckOverlay, status: Warning, setting: platform.SettingKernelRelease, value: "6.1.0-13-amd64", exit: 0, isolated: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			if c.onTmpfs {
				if !shmTmpfs {
					t.Skip("no writable tmpfs at /dev/shm")
				}
				var err error
				if parent, err = os.MkdirTemp("/dev/shm", "ferry-doctor-test-"); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(parent) })
			}
			r := Run(inRepo(preparedHost(t, c.uid, c.files), parent, "auto", "on"))
			j := viaJSON(t, r)
			status, setting, value := j.check(t, c.check)
			if Status(status) != c.status || setting != c.setting || value != c.value {
				t.Errorf("check %s: %s, blocker %s = %s; want %s, %s = %s", c.check, status, setting, value, c.status, c.setting, c.value)
			}
			if j.ExitCode != c.exit || r.ExitCode != c.exit {
				t.Errorf("exit code %d, want %d (err %v)", j.ExitCode, c.exit, r.Err())
			}
			if j.Spawn == nil {
				t.Fatal("no spawn section in a repository")
			}
			if got := j.Spawn.Isolation == IsolationSandbox; got != c.isolated || j.Spawn.Works != (c.exit == 0) {
				t.Errorf("spawn %+v", *j.Spawn)
			}
			if c.exit == 4 {
				if failure.KindOf(r.Err()) != failure.Blocked || !strings.Contains(j.Spawn.IsolationReason, c.setting) {
					t.Errorf("err %v (kind %v), isolation reason %q", r.Err(), failure.KindOf(r.Err()), j.Spawn.IsolationReason)
				}
				// The overlay cannot be tried without the namespace: it names
				// the same blocker.
				if _, s, v := j.check(t, CheckOverlay); s != c.setting || v != c.value {
					t.Errorf("overlay names %s = %s", s, v)
				}
				// Under mode auto spawn works at host paths: the blocker
				// is a warning, and the isolation reason names it and
				// what host paths cost.
				r := Run(inRepo(preparedHost(t, c.uid, c.files), parent, "auto", "auto"))
				j := viaJSON(t, r)
				status, setting, _ := j.check(t, c.check)
				if Status(status) != Warning || setting != c.setting || r.ExitCode != 0 || !j.Spawn.Works ||
					j.Spawn.Isolation != IsolationHost || !strings.Contains(j.Spawn.IsolationReason, c.setting) ||
					!strings.Contains(j.Spawn.IsolationReason, "incremental") || j.Spawn.Backend == "overlay" {
					t.Errorf("mode auto: check %s %s (%s), exit %d, spawn %+v", c.check, status, setting, r.ExitCode, *j.Spawn)
				}
			}
			if _, err := os.Stat(r.Store); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("doctor created the store %s", r.Store)
			}
			entries, _ := os.ReadDir(parent)
			if len(entries) != 0 {
				t.Errorf("doctor left %d entries in the store parent", len(entries))
			}
		})
	}
}

// TestRealMachine diagnoses this machine: user namespaces and the overlay
// work, and auto picks overlay on ext4 and reflink on XFS with reflink=1.
func TestRealMachine(t *testing.T) {
	skipIfBlocked(t)
	h := platform.Real()
	if v := h.KernelRelease(); strings.HasPrefix(v, "5.") || strings.HasPrefix(v, "4.") {
		t.Skipf("Linux %s: the overlay needs 5.11 or later, and this test expects it to work", v)
	}
	stores := []struct {
		fs, backend string
		parent      func(t *testing.T) string
	}{
		{platform.FSExt4, "overlay", func(t *testing.T) string {
			dir := t.TempDir()
			if fs, _ := platform.FilesystemType(dir); fs != platform.FSExt4 {
				t.Skipf("the temp dir is on %s, not ext4", fs)
			}
			return dir
		}},
		{platform.FSXFS, "reflink", xfsParent},
	}
	for _, s := range stores {
		t.Run(s.fs, func(t *testing.T) {
			parent := s.parent(t)
			r := Run(inRepo(h, filepath.Join(parent, "ferry"), "auto", "auto"))
			j := viaJSON(t, r)
			if st, set, val := j.check(t, CheckUserns); st != "ok" {
				t.Errorf("userns: %s (%s = %s)", st, set, val)
			}
			if st, set, val := j.check(t, CheckOverlay); st != "ok" {
				t.Errorf("overlay: %s (%s = %s)", st, set, val)
			}
			if st, _, _ := j.check(t, CheckFilesystem); st != "ok" || r.Check(CheckFilesystem).Detail != s.fs {
				t.Errorf("filesystem: %s %q", st, r.Check(CheckFilesystem).Detail)
			}
			wantReflink := "ok"
			if s.backend != "reflink" {
				wantReflink = "warning"
			}
			if st, _, _ := j.check(t, CheckReflink); st != wantReflink {
				t.Errorf("reflink: %s, want %s", st, wantReflink)
			}
			if j.Spawn == nil || j.Spawn.Backend != s.backend || j.Spawn.Isolation != IsolationSandbox || !j.Spawn.Works ||
				!strings.HasPrefix(j.Spawn.BackendReason, "auto: ") || !strings.Contains(j.Spawn.BackendReason, s.fs) {
				t.Errorf("spawn %+v", j.Spawn)
			}
			// The overlay mounts on both: a refresh builds on a layer,
			// where the store clones files too (base.SeedMethod).
			if c := r.Check(CheckRefresh); c.Status != OK || !strings.Contains(c.Detail, "(layered)") {
				t.Errorf("refresh: %s %q, want ok naming layered", c.Status, c.Detail)
			}
			if j.ExitCode != 0 || r.Err() != nil {
				t.Errorf("exit %d: %v", j.ExitCode, r.Err())
			}
			t.Logf("uid %d, store on %s: backend %s (%s)", h.Uid, s.fs, j.Spawn.Backend, j.Spawn.BackendReason)
		})
	}
}

func xfsParent(t *testing.T) string {
	root := knobs.XFS()
	if root == "" && unpriv.IsChild() && unix.Access("/mnt/ferry-xfs", unix.W_OK) == nil {
		root = "/mnt/ferry-xfs"
	}
	if root == "" {
		t.Skip("FERRY_TEST_XFS is not set (.ci/run mounts XFS with reflink=1 and sets it)")
	}
	dir, err := os.MkdirTemp(root, "ferry-doctor-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestRealMachineUnprivileged diagnoses this machine again as an ordinary
// user when the tests run as root.
func TestRealMachineUnprivileged(t *testing.T) {
	unpriv.Rerun(t, "^(TestRealMachine|TestPreparedRoots)$")
}

// TestWhatSpawnWouldDo covers the settings that make spawn refuse.
func TestWhatSpawnWouldDo(t *testing.T) {
	skipIfBlocked(t)
	h := platform.Real()
	ext4 := t.TempDir()
	if fs, _ := platform.FilesystemType(ext4); fs == platform.FSBtrfs || fs == platform.FSXFS {
		t.Skipf("the temp dir is on %s, which may clone", fs)
	}
	cases := []struct {
		name, backend, mode string
		exit                int
		spawnBackend        string
		reflinkStatus       Status
		isolation           string
		refresh             Status // layered (ok) in the sandbox; a copy (warning) at host paths
	}{
		{"copy set", "copy", "auto", 0, "copy", Warning, IsolationSandbox, OK},
		{"reflink set where the store cannot clone", "reflink", "auto", 4, "", Blocked, IsolationSandbox, OK},
		{"overlay set", "overlay", "on", 0, "overlay", Warning, IsolationSandbox, OK},
		{"auto: overlay where clones do not work", "auto", "auto", 0, "overlay", Warning, IsolationSandbox, OK},
		{"sandbox off: auto picks copy, never the overlay", "auto", "off", 0, "copy", Warning, IsolationHost, Warning},
		{"sandbox off: the overlay is refused", "overlay", "off", 6, "", Warning, IsolationHost, Warning},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Run(inRepo(h, filepath.Join(ext4, c.name), c.backend, c.mode))
			if r.ExitCode != c.exit || r.Spawn.Backend != c.spawnBackend || r.Spawn.Isolation != c.isolation ||
				r.Check(CheckReflink).Status != c.reflinkStatus || r.Spawn.Works != (c.exit == 0) {
				t.Errorf("exit %d, spawn %+v, reflink %s; want exit %d, backend %q, isolation %s, reflink %s",
					r.ExitCode, *r.Spawn, r.Check(CheckReflink).Status, c.exit, c.spawnBackend, c.isolation, c.reflinkStatus)
			}
			if rc := r.Check(CheckRefresh); rc.Status != c.refresh || (rc.Status == Warning && !strings.Contains(rc.Detail, "host paths")) {
				t.Errorf("refresh check %+v, want %s", rc, c.refresh)
			}
		})
	}
	t.Run("overlay set and unavailable", func(t *testing.T) {
		old := preparedHost(t, h.Uid, map[string]string{osreleaseFile: "5.8.0\n"})
		r := Run(inRepo(old, filepath.Join(ext4, "old"), "overlay", "auto"))
		if c := r.Check(CheckOverlay); c.Status != Blocked || c.Blocker == nil || c.Blocker.Setting != platform.SettingKernelRelease {
			t.Errorf("overlay check %+v", c)
		}
		// A refresh copies then, and says why.
		if c := r.Check(CheckRefresh); c.Status != Warning || !strings.Contains(c.Detail, "copies") || !strings.Contains(c.Detail, "overlay") || c.Hint == "" {
			t.Errorf("refresh check %+v", c)
		}
	})
	// A kernel without openat2 (before 5.6) is a named blocker: auto falls
	// back to host paths and says why; "on" is refused with it.
	t.Run("a kernel without openat2", func(t *testing.T) {
		old := preparedHost(t, h.Uid, map[string]string{osreleaseFile: "5.4.0-150-generic\n"})
		r := Run(inRepo(old, filepath.Join(ext4, "openat2"), "auto", "auto"))
		c := r.Check(CheckUserns)
		if c.Status != Warning || c.Blocker == nil || c.Blocker.Setting != platform.SettingKernelRelease || !strings.Contains(c.Blocker.Problem, "openat2") {
			t.Errorf("userns check %+v", c)
		}
		if r.Spawn.Isolation != IsolationHost || r.ExitCode != 0 || !strings.Contains(r.Spawn.IsolationReason, "host paths") {
			t.Errorf("auto: exit %d, spawn %+v", r.ExitCode, *r.Spawn)
		}
		r = Run(inRepo(old, filepath.Join(ext4, "openat2-on"), "auto", "on"))
		if r.ExitCode != 4 || r.Spawn.Isolation != IsolationRefused || !strings.Contains(r.Spawn.IsolationReason, "openat2") {
			t.Errorf("on: exit %d, spawn %+v", r.ExitCode, *r.Spawn)
		}
	})
	t.Run("layered off", func(t *testing.T) {
		o := inRepo(h, filepath.Join(ext4, "flat"), "auto", "auto")
		o.Settings.Layered = false
		r := Run(o)
		if c := r.Check(CheckRefresh); c.Status != Warning || !strings.Contains(c.Detail, "[base] layered is off") || !strings.Contains(c.Hint, "layered = true") {
			t.Errorf("refresh check %+v", c)
		}
	})
}

func TestOutsideRepository(t *testing.T) {
	skipIfBlocked(t)
	notRepo := failure.New(failure.Prereq, "run Ferry inside a git worktree", "not inside a git repository: /srv")
	r := Run(Options{Host: platform.Real(), NotRepo: notRepo})
	j := viaJSON(t, r)
	if j.Repository != "" || j.Spawn != nil || j.Store != "" ||
		!strings.Contains(j.Note, "not inside a git repository: /srv") || !strings.Contains(j.Note, "host checks only") {
		t.Errorf("report %+v", j)
	}
	var names []string
	for _, c := range j.Checks {
		names = append(names, c.Name)
	}
	if strings.Join(names, " ") != "userns overlay" || j.ExitCode != 0 {
		t.Errorf("checks %v, exit %d", names, j.ExitCode)
	}

	blocked := preparedHost(t, 1000, map[string]string{cloneFile: "0\n"})
	r = Run(Options{Host: blocked, NotRepo: notRepo})
	if r.ExitCode != 4 || failure.KindOf(r.Err()) != failure.Blocked {
		t.Errorf("blocked host outside a repository: exit %d, %v", r.ExitCode, r.Err())
	}
}

func TestBrokenConfiguration(t *testing.T) {
	skipIfBlocked(t)
	bad := failure.New(failure.Usage, "fix the key", "ferry.toml:3: unknown key %q", "base.wram")
	r := Run(Options{Host: platform.Real(), Repo: "/src/project", ConfigErr: bad})
	c := r.Check(CheckConfig)
	if c == nil || c.Status != Blocked || c.Detail != `ferry.toml:3: unknown key "base.wram"` || c.Hint != "fix the key" {
		t.Errorf("config check %+v", c)
	}
	if r.ExitCode != 2 || r.Spawn != nil || !strings.Contains(r.Note, "host checks only") {
		t.Errorf("exit %d, spawn %+v, note %q", r.ExitCode, r.Spawn, r.Note)
	}
}

func TestExistingAncestor(t *testing.T) {
	dir := t.TempDir()
	if got, err := existingAncestor(filepath.Join(dir, "a", "b", "c")); err != nil || got != dir {
		t.Errorf("got %q, %v; want %q", got, err, dir)
	}
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	if _, err := existingAncestor(filepath.Join(file, "x")); err == nil {
		t.Error("a file on the way gave no error")
	}
}

// TestStoreOthersCanChange: a store parent others can write is a blocked
// check with its fix, spawn would be refused (exit 6), and the store is not
// probed, since the probes would write into it.
func TestStoreOthersCanChange(t *testing.T) {
	skipIfBlocked(t)
	parent := filepath.Join(t.TempDir(), "shared")
	os.Mkdir(parent, 0o755)
	os.Chmod(parent, 0o777)
	o := inRepo(platform.Real(), parent, "auto", "auto")
	r := Run(o)
	c := r.Check(CheckOwner)
	if c == nil || c.Status != Blocked || !strings.Contains(c.Detail, parent+" is writable by group and others") ||
		!strings.Contains(c.Hint, "chmod go-w "+parent) {
		t.Fatalf("owner check %+v", c)
	}
	if r.ExitCode != 6 || failure.KindOf(r.Err()) != failure.Refused || r.Spawn == nil || r.Spawn.Works ||
		r.Spawn.Isolation != IsolationRefused {
		t.Fatalf("exit %d, spawn %+v, %v", r.ExitCode, r.Spawn, r.Err())
	}
	if r.Check(CheckOverlay) != nil || r.Check(CheckReflink) != nil {
		t.Fatalf("the refused store was probed: %+v", r.Checks)
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 0 {
		t.Fatalf("doctor wrote into the refused store parent: %v", ents)
	}

	// Made the caller's alone, it is an ok check and the probes run.
	os.Chmod(parent, 0o755)
	r = Run(o)
	if c := r.Check(CheckOwner); c == nil || c.Status != OK || r.Check(CheckOverlay) == nil {
		t.Fatalf("after chmod: %+v", r.Checks)
	}
}

// testStore is the store of a repository at /src/project under parent
// (nothing is created).
func testStore(parent string) *store.Store {
	return must(store.Open(parent, "/src/project/.git", "/src/project"))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The remap check asks this machine's toolchain (stable 1.95 fails the
// probe: its rustc drops the incremental state when the directory moves)
// and words what that means for the repository's settings: blocked when
// remap-paths is on at host paths (ferry base refuses), a warning at host
// paths without it, ok in the namespace sandbox.
func TestRemapCheck(t *testing.T) {
	dir := t.TempDir()
	if _, err := exec.LookPath("rustc"); err != nil {
		t.Skip("no rustc on PATH")
	}
	tc, err := toolchain.Detect(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	available := tc.ProbeRemap(dir, nil) == nil
	for _, c := range []struct {
		on        bool
		isolation string
		want      Status // when the probe fails
	}{
		{true, IsolationHost, Blocked},
		{false, IsolationHost, Warning},
		{true, IsolationSandbox, OK},
	} {
		got := checkRemap(dir, c.on, c.isolation)
		want := c.want
		if available {
			want = OK
		}
		if got.Status != want || !strings.Contains(got.Detail, tc.RustcVersion) {
			t.Errorf("remap-paths %t, %s: %s %q; want %s, naming rustc %s", c.on, c.isolation, got.Status, got.Detail, want, tc.RustcVersion)
		}
		if !available && (!strings.Contains(got.Detail, "needs Rust "+toolchain.RemapVersion) || !strings.Contains(got.Hint, toolchain.RemapVersion)) {
			t.Errorf("remap-paths %t, %s: the detail %q or hint %q does not name Rust %s", c.on, c.isolation, got.Detail, got.Hint, toolchain.RemapVersion)
		}
	}
	// Through Run: the repository's setting decides the exit code.
	o := inRepo(platform.Real(), filepath.Join(dir, "ferry"), "auto", "off")
	o.Repo = dir
	o.Settings.RemapPaths = true
	r := Run(o)
	if c := r.Check(CheckRemap); c == nil || (!available && (r.ExitCode != failure.Prereq.ExitCode() || r.Spawn.Works)) {
		t.Errorf("remap check %+v, exit %d: want exit %d", c, r.ExitCode, failure.Prereq.ExitCode())
	}
	t.Logf("rustc %s: %s", tc.RustcVersion, r.Check(CheckRemap).Detail)
}

// TestFreshnessCheck: mtime needs nothing; checksum is ok with the nightly
// a rust-toolchain.toml selects and blocked, with ferry base's reason and
// fix, on the stable default.
func TestFreshnessCheck(t *testing.T) {
	skipIfBlocked(t)
	if _, err := exec.LookPath("cargo"); err != nil {
		t.Skip("no cargo on PATH")
	}
	h := platform.Real()
	parent := t.TempDir()
	run := func(repo, mode string) *Report {
		o := inRepo(h, filepath.Join(parent, "store"), "auto", "auto")
		o.Repo, o.Settings.Freshness = repo, mode
		o.Git = gitRepo(t, repo)
		return Run(o)
	}
	stable := t.TempDir()
	if r := run(stable, ""); r.Check(CheckFreshness).Status != OK || !strings.HasPrefix(r.Check(CheckFreshness).Detail, "mtime") {
		t.Errorf("mtime: %+v", r.Check(CheckFreshness))
	}
	if out, _ := exec.Command("cargo", "-V").Output(); !strings.Contains(string(out), "nightly") {
		r := run(stable, config.FreshnessChecksum)
		if c := r.Check(CheckFreshness); c.Status != Blocked || !strings.Contains(c.Detail, "not a nightly") || !strings.Contains(c.Hint, "rust-toolchain.toml") || r.ExitCode != failure.Prereq.ExitCode() {
			t.Errorf("checksum on stable: %+v, exit %d", c, r.ExitCode)
		}
	}
	if out, err := exec.Command("rustup", "toolchain", "list").Output(); err != nil || !strings.Contains(string(out), "nightly") {
		t.Skip("no rustup nightly toolchain")
	}
	// The toolchain file as committed is what ferry base builds with.
	nightly := t.TempDir()
	if err := os.WriteFile(filepath.Join(nightly, "rust-toolchain.toml"), []byte("[toolchain]\nchannel = \"nightly\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(nightly, "Cargo.toml"), []byte("[workspace]\n"), 0o644)
	commitAll(t, nightly)
	r := run(nightly, config.FreshnessChecksum)
	if c := r.Check(CheckFreshness); c.Status != OK || !strings.Contains(c.Detail, "CARGO_UNSTABLE_CHECKSUM_FRESHNESS=true") || r.ExitCode != 0 {
		t.Errorf("checksum on the nightly: %+v, exit %d", c, r.ExitCode)
	}
}

// gitRepo makes dir a git repository (with a first commit of what it
// holds) unless it is one, and opens it.
func gitRepo(t *testing.T, dir string) *git.Repo {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, ".git")); err != nil {
		if _, err := os.Stat(filepath.Join(dir, "Cargo.toml")); err != nil {
			os.WriteFile(filepath.Join(dir, "Cargo.toml"), []byte("[workspace]\n"), 0o644)
		}
		gitT(t, dir, "init", "-q")
		commitAll(t, dir)
	}
	return must(git.Open(dir))
}

// A repository whose HEAD has no Cargo.toml at its root, or no HEAD at
// all, is blocked (exit 3) by the workspace check, with what to do: ferry
// base would refuse it.
func TestWorkspaceCheck(t *testing.T) {
	skipIfBlocked(t)
	parent := t.TempDir()
	run := func(repo string) *Report {
		o := inRepo(platform.Real(), filepath.Join(parent, "store"), "auto", "auto")
		o.Repo, o.Git = repo, must(git.Open(repo))
		return Run(o)
	}
	empty := t.TempDir()
	gitT(t, empty, "init", "-q")
	noCargo := t.TempDir()
	os.WriteFile(filepath.Join(noCargo, "README"), []byte("not rust\n"), 0o644)
	commitAll(t, noCargo)
	// A Cargo.toml in the working tree that is not committed builds nothing.
	os.WriteFile(filepath.Join(noCargo, "Cargo.toml"), []byte("[workspace]\n"), 0o644)
	for _, tc := range []struct{ repo, detail string }{
		{empty, "no commit yet"},
		{noCargo, "no Cargo.toml at the repository root"},
	} {
		r := run(tc.repo)
		c := r.Check(CheckWorkspace)
		if c == nil || c.Status != Blocked || !strings.Contains(c.Detail, tc.detail) || !strings.Contains(c.Hint, "Cargo.toml") {
			t.Errorf("%s: workspace check %+v", tc.detail, c)
		}
		if r.ExitCode != failure.Prereq.ExitCode() || r.Spawn == nil || r.Spawn.Works {
			t.Errorf("%s: exit %d, spawn %+v; want exit 3 and spawn not working", tc.detail, r.ExitCode, r.Spawn)
		}
	}
	gitT(t, noCargo, "add", "Cargo.toml")
	gitT(t, noCargo, "commit", "-qm", "workspace")
	if c := run(noCargo).Check(CheckWorkspace); c == nil || c.Status != OK {
		t.Errorf("with Cargo.toml committed: %+v", c)
	}
}

// commitAll commits everything in dir, a repository made by gitRepo or
// to be made by it.
func commitAll(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, ".git")); err != nil {
		gitT(t, dir, "init", "-q")
	}
	gitT(t, dir, "add", "-A")
	gitT(t, dir, "commit", "-q", "--allow-empty", "-m", "commit")
}

func gitT(t *testing.T, dir string, args ...string) {
	t.Helper()
	c := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "core.hooksPath=/dev/null", "-C", dir}, args...)...)
	c.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// Doctor runs outside every sandbox, in the working directory's worktree,
// perhaps an agent's, where any build can write. Its toolchain checks ask
// the toolchain HEAD's committed files select, never one a build planted
// there: neither a rust-toolchain.toml whose [toolchain] path names
// programs rustup would run for cargo and rustc, nor a .cargo/config.toml
// whose alias named clippy would make `cargo clippy --version` run a
// cargo subcommand of the build's choosing.
func TestToolchainChecksIgnoreTheWorktree(t *testing.T) {
	cargo, err := exec.LookPath("cargo")
	if err != nil {
		t.Skip("no cargo on PATH")
	}
	if _, err := exec.LookPath("rustup"); err != nil {
		t.Skip("no rustup: a rust-toolchain file selects nothing")
	}
	log := filepath.Join(t.TempDir(), "ran")
	logger := func(path, name, then string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte("#!/bin/sh\necho \""+name+" $*\" >>'"+log+"'\n"+then+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The planted toolchain's programs log and pass on to the real ones
	// (whichever rustup gives in a directory without toolchain files).
	real := func(tool string) string {
		c := exec.Command("rustup", "which", tool)
		c.Dir = t.TempDir()
		out, err := c.Output()
		if err != nil {
			t.Skipf("rustup which %s: %v", tool, err)
		}
		return strings.TrimSpace(string(out))
	}
	evil := filepath.Join(t.TempDir(), "evil")
	logger(filepath.Join(evil, "bin", "cargo"), "planted cargo", `exec `+real("cargo")+` "$@"`)
	logger(filepath.Join(evil, "bin", "rustc"), "planted rustc", `exec `+real("rustc")+` "$@"`)
	sub := t.TempDir()
	logger(filepath.Join(sub, "cargo-planted"), "planted alias", "echo clippy 0.1.0")
	t.Setenv("PATH", sub+string(filepath.ListSeparator)+os.Getenv("PATH"))

	for _, c := range []struct{ name, path, text string }{
		{"rust-toolchain.toml", "rust-toolchain.toml", "[toolchain]\npath = \"" + evil + "\"\n"},
		{".cargo/config.toml", ".cargo/config.toml", "[alias]\nclippy = [\"planted\"]\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			repo := t.TempDir()
			if err := os.WriteFile(filepath.Join(repo, "Cargo.toml"), []byte("[workspace]\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			g := gitRepo(t, repo)
			planted := filepath.Join(repo, filepath.FromSlash(c.path))
			os.MkdirAll(filepath.Dir(planted), 0o755)
			if err := os.WriteFile(planted, []byte(c.text), 0o644); err != nil {
				t.Fatal(err)
			}
			// Live: cargo run there obeys the planted file.
			probe := exec.Command(cargo, "clippy", "--version")
			probe.Dir = repo
			probe.Run()
			if b, _ := os.ReadFile(log); !strings.Contains(string(b), "planted") {
				t.Fatalf("cargo clippy --version in the worktree did not obey the planted %s (log %q): the test shows nothing", c.name, b)
			}
			os.Remove(log)

			o := inRepo(platform.Real(), filepath.Join(t.TempDir(), "store"), "auto", "auto")
			o.Repo, o.Git = repo, g
			o.Settings.Freshness = config.FreshnessChecksum
			r := Run(o)
			if b, _ := os.ReadFile(log); len(b) > 0 {
				t.Errorf("ferry doctor obeyed the planted %s:\n%s", c.name, b)
			}
			if c := r.Check(CheckRemap); c == nil || strings.HasPrefix(c.Detail, "could not probe") {
				t.Errorf("remap check %+v: the toolchain was not asked", c)
			}
			os.Remove(log)
		})
	}
}

// The shim-path check is ok exactly when the shim's directory comes before
// every other cargo on the search path, and says the profile line otherwise.
func TestCheckShimPath(t *testing.T) {
	parent := t.TempDir()
	s := must(store.Open(parent, "/src/project/.git", "/src/project"))
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "cargo"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path   string
		status Status
		detail string
	}{
		{s.ShimDir() + ":" + other, OK, "is Ferry's shim"},
		{other + ":" + s.ShimDir(), Warning, "not Ferry's shim"},
		{t.TempDir(), Warning, "no cargo on PATH"},
	} {
		c := checkShimPath(s, tc.path)
		if c.Status != tc.status || !strings.Contains(c.Detail, tc.detail) {
			t.Errorf("PATH %s: %+v", tc.path, c)
		}
		if c.Status != OK && !strings.Contains(c.Hint, "export PATH="+s.ShimDir()+`:"$PATH"`) {
			t.Errorf("PATH %s: the hint gives no line: %q", tc.path, c.Hint)
		}
	}
	if c := checkGitHook(GitHook{Path: "/x/post-checkout"}); c.Status != Warning || !strings.Contains(c.Hint, "ferry hook git install") {
		t.Errorf("no git hook: %+v", c)
	}
	if c := checkGitHook(GitHook{Path: "/x/post-checkout", Installed: true}); c.Status != OK {
		t.Errorf("git hook installed: %+v", c)
	}
}

// The disk-floor check says what is free beside the floor, and warns, with
// the fix, when the store's filesystem is under it (spawns are refused);
// with no floor it passes.
func TestDiskFloorCheck(t *testing.T) {
	parent := t.TempDir()
	for _, c := range []struct {
		floor  config.Floor
		status Status
		says   string
	}{
		{config.Floor{}, OK, "the floor is 0 B ([gc] min-free 0)"},
		{config.AutoMinFree, OK, "([gc] min-free auto)"},
		{config.Floor{Bytes: 1 << 60}, Warning, "under the floor, spawns and base builds are refused: "},
	} {
		o := inRepo(platform.Real(), parent, "copy", "auto")
		o.Settings.MinFree = c.floor
		r := Run(o)
		ch := r.Check(CheckDiskFloor)
		if ch.Status != c.status || !strings.Contains(ch.Detail, c.says) || !strings.Contains(ch.Detail, " free of ") {
			t.Errorf("floor %v: %s %q, want %s saying %q", c.floor, ch.Status, ch.Detail, c.status, c.says)
		}
		if (c.status == Warning) != strings.Contains(ch.Hint, "FERRY_MIN_FREE") {
			t.Errorf("floor %v: hint %q", c.floor, ch.Hint)
		}
	}
}
