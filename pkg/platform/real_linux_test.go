package platform

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/ferrydev/ferry/internal/unpriv"
	"golang.org/x/sys/unix"
)

// childEnv makes the test binary act as the inside of a namespace attempt:
// it does the one privileged thing Ferry's sandbox does first, and reports
// the errno on stdout if that fails.
const childEnv = "FERRY_PLATFORM_USERNS_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		// Ferry's sandbox starts by making / recursively private.
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			var errno syscall.Errno
			errors.As(err, &errno)
			os.Stdout.WriteString(strconv.Itoa(int(errno)))
			os.Exit(1)
		}
		os.Exit(0)
	}
	if setting := os.Getenv(zeroEnv); setting != "" {
		// Inside a user namespace of our own, its namespace budgets are ours
		// to set: close one, then run the tests against the real kernel.
		path := "/proc/sys/" + strings.ReplaceAll(setting, ".", "/")
		if err := os.WriteFile(path, []byte("0\n"), 0o644); err != nil {
			os.Stdout.WriteString("setting " + setting + ": " + err.Error() + "\n")
			os.Exit(1)
		}
	}
	if os.Getenv(seccompEnv) == "1" {
		if err := denyUserns(); err != nil {
			os.Stdout.WriteString("installing the seccomp filter: " + err.Error() + "\n")
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// seccompEnv makes a child install a seccomp filter that refuses new user
// namespaces, as Docker's default profile does, before running TestRealHost
// (see TestRealHostSeccompFilter).
const seccompEnv = "FERRY_PLATFORM_SECCOMP"

// denyUserns installs, on every thread of this process, a seccomp filter
// that fails clone and unshare with EPERM when they ask for CLONE_NEWUSER, and
// clone3, whose flags a filter cannot read, with ENOSYS. It reads the low
// half of the first argument, so it is only right on little-endian machines.
func denyUserns() error {
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	filter := []unix.SockFilter{
		{Code: ld, K: 0}, // seccomp_data.nr
		{Code: jeq, K: unix.SYS_CLONE3, Jt: 6},
		{Code: jeq, K: unix.SYS_CLONE, Jt: 1},
		{Code: jeq, K: unix.SYS_UNSHARE, Jf: 2},
		{Code: ld, K: 16}, // seccomp_data.args[0], low 32 bits
		{Code: jset, K: unix.CLONE_NEWUSER, Jt: 1},
		{Code: ret, K: unix.SECCOMP_RET_ALLOW},
		{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		return errno
	}
	return nil
}

// zeroEnv names a namespace budget for a child to set to 0 in its own user
// namespace before running TestRealHost (see TestRealHostClosedBudget).
const zeroEnv = "FERRY_PLATFORM_ZERO_BUDGET"

// nsAttr is the sandbox's SysProcAttr: a user and mount namespace with the
// caller mapped to itself.
func nsAttr() *syscall.SysProcAttr {
	uid, gid := os.Getuid(), os.Getgid()
	return &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		GidMappingsEnableSetgroups: false,
	}
}

// attempt creates the namespaces for real, twice: around /bin/true, which
// shows whether creation succeeds, and around this binary making / private,
// which shows whether the namespace is usable (Ubuntu's AppArmor restriction
// lets creation succeed and refuses the mount). It returns the failing step
// and its error, or "" and nil.
func attempt(t *testing.T) (string, error) {
	t.Helper()
	c := exec.Command("/bin/true")
	c.SysProcAttr = nsAttr()
	if err := c.Run(); err != nil {
		return StepCreate, err
	}

	var out bytes.Buffer
	c = exec.Command(os.Args[0])
	c.Env = []string{childEnv + "=1"}
	c.Stdout = &out
	c.SysProcAttr = nsAttr()
	// As in the sandbox: keep CAP_SYS_ADMIN over the exec, which an
	// unprivileged uid would otherwise lose.
	c.SysProcAttr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
	err := c.Run()
	if err == nil {
		return "", nil
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return StepCreate, err
	}
	n, perr := strconv.Atoi(out.String())
	if perr != nil {
		t.Fatalf("namespace child failed without an errno: %v, output %q", err, out.String())
	}
	return "mount inside the namespace", syscall.Errno(n)
}

// TestRealHost checks the static probe against this machine: when it names a
// blocker the attempt must fail, and when it names none the attempt must
// succeed unless the refusal is of the invisible kind (seccomp, a security
// module), which only an attempt can see.
func TestRealHost(t *testing.T) {
	h := Real()
	if h.ProcSys != "/proc/sys" || h.Uid != os.Getuid() || h.Exe == "" {
		t.Errorf("Real() = %+v", h)
	}
	for _, s := range []string{SettingUnprivilegedClone, SettingMaxUserNamespaces, SettingMaxMntNamespaces, SettingAppArmorRestrict} {
		if v, ok := h.readInt(s); ok {
			t.Logf("%s = %d", s, v)
		} else {
			t.Logf("%s: absent", s)
		}
	}
	static := h.UsernsBlocker()
	step, err := attempt(t)
	t.Logf("uid %d: static probe %v; attempt: step %q, error %v", h.Uid, static, step, err)

	if zero := os.Getenv(zeroEnv); zero != "" {
		if static == nil || static.Setting != zero || static.Value != "0" || err == nil {
			t.Fatalf("with %s = 0: static probe %v, attempt error %v; want the probe to name it and the attempt to fail", zero, static, err)
		}
	}

	if os.Getenv(seccompEnv) == "1" {
		b := h.ExplainUsernsFailure(step, err)
		if static != nil || err == nil || b.Setting != SettingSeccomp || b.Value != "2" {
			t.Fatalf("under a seccomp filter: static probe %v, attempt error %v, explained as %v; want no static blocker, a failure, and seccomp = 2", static, err, b)
		}
		t.Logf("explained as: %v\nhint:\n%s", b, b.Remedy)
		return
	}

	switch {
	case static != nil && err == nil:
		t.Fatalf("the static probe reports %v, yet the namespaces were created and used", static)
	case static != nil:
		b := h.ExplainUsernsFailure(step, err)
		if b.Setting != static.Setting {
			t.Errorf("the attempt failed (%s: %v), explained as %s, but the probe names %s", step, err, b.Setting, static.Setting)
		}
	case err != nil:
		b := h.ExplainUsernsFailure(step, err)
		if b.Setting == SettingSeccomp || b.Setting == SettingLSM {
			t.Skipf("this host refuses user namespaces invisibly to the static probe: %v\nhint: %s", b, b.Remedy)
		}
		t.Fatalf("the static probe saw nothing, yet %s failed: %v\nexplained as: %v", step, err, b)
	}
}

// TestRealHostUnprivileged runs TestRealHost again as an ordinary user when
// the tests run as root, since root is exempt from two of the checks, and
// the closed-budget and seccomp cases with it.
func TestRealHostUnprivileged(t *testing.T) {
	unpriv.Rerun(t, "^TestRealHost(|ClosedBudget|SeccompFilter)$")
}

// TestRealHostClosedBudget closes a namespace budget for real, inside a user
// namespace of the test's own where the kernel lets the caller set it, and
// runs TestRealHost there: the probe must name the budget and the kernel must
// refuse, with ENOSPC explained as that same setting.
func TestRealHostClosedBudget(t *testing.T) {
	for _, setting := range []string{SettingMaxUserNamespaces, SettingMaxMntNamespaces} {
		t.Run(setting, func(t *testing.T) {
			if os.Getenv(zeroEnv) != "" || os.Getenv(seccompEnv) != "" {
				t.Skip("already inside a closed budget")
			}
			var out bytes.Buffer
			c := exec.Command(os.Args[0], "-test.run=^TestRealHost$", "-test.v", "-test.count=1")
			c.Env = append(os.Environ(), zeroEnv+"="+setting)
			c.Stdout, c.Stderr = &out, &out
			c.SysProcAttr = nsAttr()
			// Writing the budget takes CAP_SYS_RESOURCE in the namespace,
			// which an unprivileged uid would lose over the exec.
			c.SysProcAttr.AmbientCaps = []uintptr{unix.CAP_SYS_RESOURCE}
			err := c.Run()
			t.Logf("in a user namespace with %s = 0:\n%s", setting, out.String())
			if err != nil {
				if Real().UsernsBlocker() != nil {
					t.Skipf("this host blocks user namespaces already: %v", Real().UsernsBlocker())
				}
				t.Fatalf("%v", err)
			}
			if !strings.Contains(out.String(), "--- PASS: TestRealHost ") {
				t.Fatalf("TestRealHost did not pass inside the namespace")
			}
		})
	}
}

// TestRealHostSeccompFilter runs TestRealHost under a seccomp filter that
// refuses user namespaces the way a container runtime's default profile does:
// no setting shows it, and the EPERM must be explained as seccomp.
func TestRealHostSeccompFilter(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("the test filter reads clone's flags little-endian; %s is not covered", runtime.GOARCH)
	}
	if os.Getenv(seccompEnv) != "" || os.Getenv(zeroEnv) != "" {
		t.Skip("already inside a restricted child")
	}
	if b := Real().UsernsBlocker(); b != nil {
		t.Skipf("this host blocks user namespaces already: %v", b)
	}
	var out bytes.Buffer
	c := exec.Command(os.Args[0], "-test.run=^TestRealHost$", "-test.v", "-test.count=1")
	c.Env = append(os.Environ(), seccompEnv+"=1")
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	t.Logf("under a seccomp filter:\n%s", out.String())
	if err != nil || !strings.Contains(out.String(), "--- PASS: TestRealHost ") {
		t.Fatalf("TestRealHost did not pass under the filter: %v", err)
	}
}

// TestRealEINVAL makes the kernel refuse a clone with EINVAL (a new user
// namespace cannot share its filesystem information with the parent) and
// checks that the error as exec.Cmd.Start wraps it is explained.
func TestRealEINVAL(t *testing.T) {
	c := exec.Command("/bin/true")
	c.SysProcAttr = nsAttr()
	c.SysProcAttr.Cloneflags |= syscall.CLONE_FS
	err := c.Start()
	if err == nil {
		c.Wait()
		t.Skip("the kernel accepted CLONE_NEWUSER|CLONE_FS")
	}
	if !errors.Is(err, unix.EINVAL) {
		t.Fatalf("Start: %v (%T), want EINVAL", err, err)
	}
	b := Real().ExplainUsernsFailure(StepCreate, err)
	if b.Setting != SettingErrno || b.Value != "EINVAL" || !strings.Contains(b.Problem, "multi-threaded") {
		t.Errorf("explained as %+v", b)
	}
	if !errors.Is(b, unix.EINVAL) {
		t.Errorf("blocker does not unwrap to EINVAL")
	}
}
