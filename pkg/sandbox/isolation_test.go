package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/platform"
)

// blockedChild marks the test binary rerun in a user namespace whose
// user.max_user_namespaces is 0 (see TestDecideOnABlockedHost).
const blockedChild = "FERRY_TEST_BLOCKED_CHILD"

// TestDecideOnABlockedHost decides the three modes on a host that blocks
// user namespaces for real: the test binary runs again in a user namespace
// whose user.max_user_namespaces is 0, so every sandbox it tries fails
// with ENOSPC, as on a restricted host.
func TestDecideOnABlockedHost(t *testing.T) {
	if os.Getenv(blockedChild) != "" {
		decideBlocked(t)
		return
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare")
	}
	cmd := exec.Command("unshare", "--user", "--map-root-user", "sh", "-c",
		`echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" -test.run '^TestDecideOnABlockedHost$' -test.v`, os.Args[0])
	cmd.Env = append(os.Environ(), blockedChild+"=1")
	out, err := cmd.CombinedOutput()
	if strings.Contains(string(out), "max_user_namespaces: Permission denied") || strings.Contains(string(out), "unshare failed") {
		t.Skipf("cannot make a blocked user namespace here: %s", out)
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: TestDecideOnABlockedHost") {
		t.Fatalf("in the blocked namespace: %v\n%s", err, out)
	}
}

func decideBlocked(t *testing.T) {
	d, err := Decide(ModeAuto)
	if err != nil || d.Isolation != IsolationOff || d.Fallback == nil || d.Fallback.Setting != platform.SettingMaxUserNamespaces {
		t.Fatalf("auto on a blocked host: %+v, %v; want off, falling back for %s", d, err, platform.SettingMaxUserNamespaces)
	}
	w := d.Warning()
	for _, want := range []string{platform.SettingMaxUserNamespaces + " = 0", "host paths", "`ferry doctor`"} {
		if !strings.Contains(w, want) {
			t.Errorf("the warning %q does not say %q", w, want)
		}
	}
	_, err = Decide(ModeOn)
	var b *platform.Blocker
	// The spent budget is ENOSPC, which is not a full disk: the kind stays
	// Blocked (exit 4), and the blocker stays reachable.
	if failure.KindOf(err) != failure.Blocked || !errors.As(err, &b) || b.Setting != platform.SettingMaxUserNamespaces ||
		!strings.Contains(failure.HintOf(err), "sysctl") {
		t.Errorf("on on a blocked host: %v (kind %v, hint %q)", err, failure.KindOf(err), failure.HintOf(err))
	}
	if d, err := Decide(ModeOff); err != nil || d.Isolation != IsolationOff || d.Fallback != nil || d.Warning() != "" {
		t.Errorf("off: %+v, %v", d, err)
	}
}

// TestDecide: where the sandbox works, auto and on use it; off never
// probes.
func TestDecide(t *testing.T) {
	if err := probe(); err != nil {
		t.Skipf("the sandbox does not work here: %v", err)
	}
	for _, mode := range []string{ModeAuto, ModeOn} {
		if d, err := Decide(mode); err != nil || d.Isolation != IsolationNamespace || d.Warning() != "" {
			t.Errorf("%s: %+v, %v", mode, d, err)
		}
	}
	old := probe
	defer func() { probe = old }()
	probe = func() error { t.Error("mode off probed"); return nil }
	if d, err := Decide(ModeOff); err != nil || d.Isolation != IsolationOff {
		t.Errorf("off: %+v, %v", d, err)
	}
}

// On an operating system without namespaces (macOS) auto builds at host
// paths without a warning: there is no setting to fix, and the warning
// would repeat on every call. Mode on still refuses.
func TestDecideWithoutNamespaces(t *testing.T) {
	old := probe
	defer func() { probe = old }()
	probe = func() error {
		return &SetupError{Step: platform.StepCreate, Err: errors.ErrUnsupported, Blocker: platform.NoNamespaces("darwin")}
	}
	if d, err := Decide(ModeAuto); err != nil || d.Isolation != IsolationOff || d.Fallback != nil || d.Warning() != "" {
		t.Errorf("auto: %+v, %v", d, err)
	}
	if _, err := Decide(ModeOn); failure.KindOf(err) != failure.Blocked {
		t.Errorf("on: %v", err)
	}
}
