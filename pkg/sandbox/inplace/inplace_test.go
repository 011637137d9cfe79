//go:build linux && cgo

package inplace

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ferrydev/ferry/internal/confinetest"
	"github.com/ferrydev/ferry/internal/unpriv"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/sandbox"
)

// envPlan hands a helper process (this test binary again) the plan it
// enters in place; envKeep names a file it opens (close-on-exec, as Go
// opens every file) and passes in ExtraFiles.
const (
	envPlan = "INPLACE_TEST_PLAN"
	envKeep = "INPLACE_TEST_KEEP"
	envJoin = "INPLACE_TEST_JOIN" // the pid whose namespaces the plan joins
)

// report is what a helper prints when the constructor reported a failure.
type report struct {
	Step    string `json:"step"`
	Path    string `json:"path"`
	Blocked bool   `json:"blocked"`
	Kind    string `json:"kind"`
	Msg     string `json:"msg"`
}

func TestMain(m *testing.M) {
	sandbox.Init()
	if err := Failure(os.Args[1:]); err != nil {
		var se *sandbox.SetupError
		errors.As(err, &se)
		json.NewEncoder(os.Stdout).Encode(report{Step: se.Step, Path: se.Path, Blocked: se.Blocker != nil,
			Kind: failure.KindOf(err).String(), Msg: err.Error()})
		os.Exit(3)
	}
	if data := os.Getenv(envPlan); data != "" {
		os.Exit(helper(data))
	}
	os.Exit(m.Run())
}

// helper enters the plan in place, as the shim does.
func helper(data string) int {
	var p sandbox.Plan
	if err := json.Unmarshal([]byte(data), &p); err != nil {
		return 100
	}
	var keep *os.File
	if name := os.Getenv(envKeep); name != "" {
		f, err := os.Open(name)
		if err != nil {
			return 101
		}
		keep = f
		p.Env = append(p.Env, "KEEP_FD="+strconv.Itoa(int(f.Fd())))
	}
	enter := Exec
	if pid := os.Getenv(envJoin); pid != "" {
		user, err1 := os.Open("/proc/" + pid + "/ns/user")
		mnt, err2 := os.Open("/proc/" + pid + "/ns/mnt")
		if errors.Join(err1, err2) != nil {
			return 103
		}
		p.Join, enter = &sandbox.Namespace{User: user, Mount: mnt}, ExecJoin
	}
	c, err := sandbox.Command(p)
	if err != nil {
		return 102
	}
	if keep != nil {
		c.ExtraFiles = append(c.ExtraFiles, keep)
	}
	err = enter(c)
	os.Stderr.WriteString(err.Error() + "\n")
	return 104
}

type layout struct {
	root, src, target, mntSrc, mntTarget, keep string
}

// newLayout is a store with the canonical mountpoints, a base-like
// checkout and target below it, and a writable directory that is not
// Ferry's.
func newLayout(t *testing.T) layout {
	t.Helper()
	root := t.TempDir()
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	l := layout{
		root:      root,
		src:       filepath.Join(root, "bases", "b1", "src"),
		target:    filepath.Join(root, "bases", "b1", "target"),
		mntSrc:    filepath.Join(root, "mnt", "src"),
		mntTarget: filepath.Join(root, "mnt", "target"),
		keep:      filepath.Join(root, "worktrees"),
	}
	for _, d := range []string{l.src, l.target, l.mntSrc, l.mntTarget, l.keep} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(l.src, "hello.txt"), []byte("from the checkout\n"), 0o644)
	// Secrets the plan hides (store.Secrets): a directory and a file.
	os.MkdirAll(filepath.Join(root, "bus"), 0o700)
	os.WriteFile(filepath.Join(root, "bus", "token"), []byte("s3cret\n"), 0o600)
	os.WriteFile(filepath.Join(root, "signing.key"), []byte("k3y\n"), 0o600)
	return l
}

// plan runs script with sh (by its absolute path, as the shim names cargo).
func (l layout) plan(script string) sandbox.Plan {
	return sandbox.Plan{
		Binds:    []sandbox.Bind{{Source: l.src, Target: l.mntSrc}, {Source: l.target, Target: l.mntTarget}},
		Dir:      l.mntSrc,
		Argv:     []string{"/bin/sh", "-c", script},
		Env:      []string{"PATH=/usr/bin:/bin", "T=" + l.mntTarget},
		Store:    l.root,
		Writable: []string{l.keep, filepath.Join(l.root, "not-there")},
		Masked:   []string{filepath.Join(l.root, "bus"), filepath.Join(l.root, "signing.key"), filepath.Join(l.root, "keys")},
	}
}

// inPlace runs the plan through a helper that enters it in place; it
// returns the helper's pid, its output and its error.
func inPlace(t *testing.T, p sandbox.Plan, keep string, wrap ...string) (int, string, error) {
	t.Helper()
	return helperRun(t, p, keep, nil, wrap...)
}

// joinInPlace runs the plan through a helper that joins the namespaces of
// the process pid in place.
func joinInPlace(t *testing.T, p sandbox.Plan, keep string, pid int) (int, string, error) {
	t.Helper()
	return helperRun(t, p, keep, []string{envJoin + "=" + strconv.Itoa(pid)})
}

func helperRun(t *testing.T, p sandbox.Plan, keep string, env []string, wrap ...string) (int, string, error) {
	t.Helper()
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	argv := append(wrap, os.Args[0])
	c := exec.Command(argv[0], argv[1:]...)
	c.Env = append(append(os.Environ(), envPlan+"="+string(data), envKeep+"="+keep), env...)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err = c.Run()
	return c.Process.Pid, out.String(), err
}

// child runs the plan in a sandbox child, the way every other command
// enters a sandbox.
func child(t *testing.T, p sandbox.Plan) (string, error) {
	t.Helper()
	c, err := sandbox.Command(p)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err = c.Run()
	return out.String(), err
}

// describe is a script that prints what a command sees of its sandbox:
// where it starts, what the canonical mounts show, which paths it can
// write, and the store's mounts with their read-only flags.
func (l layout) describe() string {
	return `pwd; cat hello.txt; id -u; id -g
		for f in "$T/mine" ` + l.mntSrc + `/new.txt ` + l.keep + `/kept ` + l.target + `/direct ` + l.src + `/direct ` + l.root + `/planted ` + l.root + `/bases/planted; do
			if { echo X > "$f"; } 2>/dev/null; then echo "writable $f"; rm -f "$f"; else echo "read-only $f"; fi
		done
		echo "bus holds: $(ls -A ` + l.root + `/bus)"; cat ` + l.root + `/bus/token 2>/dev/null || echo "no token"
		echo "key: $(cat ` + l.root + `/signing.key)"; { echo X > ` + l.root + `/signing.key; } 2>/dev/null
		{ echo X > ` + l.root + `/bus/token; } 2>/dev/null && echo "bus writable"
		awk -v r=` + l.root + ` 'index($5, r) == 1 { split($6, o, ","); print $5, o[1] }' /proc/self/mountinfo | sort`
}

// Entering in place gives the command exactly what a sandbox child gives
// it (the canonical mounts, a sealed store with its writable exceptions,
// no capabilities), and the command is the helper process itself: no
// process is left waiting between the caller and the command.
func TestInPlaceMatchesSandboxChild(t *testing.T) {
	l := newLayout(t)
	p := l.plan(l.describe())
	want, err := child(t, p)
	if err != nil {
		t.Fatalf("sandbox child: %v\n%s", err, want)
	}
	if !strings.Contains(want, "read-only "+l.root+"/planted") || !strings.Contains(want, "writable "+l.mntTarget+"/mine") {
		t.Fatalf("the sandbox child's view is not a sealed store:\n%s", want)
	}
	// The secrets are hidden: the bus dir shows empty, the key file as
	// /dev/null (a write to it reaches nothing), and the host's are as
	// they were.
	if !strings.Contains(want, "bus holds: \nno token\nkey: \n") || strings.Contains(want, "s3cret") || strings.Contains(want, "bus writable") {
		t.Fatalf("the sandbox child sees the secrets:\n%s", want)
	}
	if b, _ := os.ReadFile(filepath.Join(l.root, "signing.key")); string(b) != "k3y\n" {
		t.Fatalf("the key file on the host holds %q after the sandbox wrote to its mask", b)
	}
	_, got, err := inPlace(t, p, "")
	if err != nil {
		t.Fatalf("in place: %v\n%s", err, got)
	}
	if got != want {
		t.Fatalf("in place the command sees\n%s\nwhere a sandbox child sees\n%s", got, want)
	}

	p = l.plan(`echo "pid $$"; grep CapEff /proc/self/status`)
	pid, out, err := inPlace(t, p, "")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "pid "+strconv.Itoa(pid)+"\n") {
		t.Errorf("the command is not the process that entered (pid %d):\n%s", pid, out)
	}
	if os.Getuid() != 0 && !strings.Contains(out, "CapEff:\t0000000000000000") {
		t.Errorf("the command kept capabilities:\n%s", out)
	}
}

// The files the caller hands over (the shim's busy.lock) stay open in the
// command at their own numbers, though Go opened them close-on-exec.
func TestInPlaceKeepsFiles(t *testing.T) {
	l := newLayout(t)
	keep := filepath.Join(l.root, "busy.lock")
	os.WriteFile(keep, nil, 0o644)
	_, out, err := inPlace(t, l.plan(`readlink /proc/self/fd/$KEEP_FD`), keep)
	if err != nil || strings.TrimSpace(out) != keep {
		t.Fatalf("fd of %s in the command: %q, %v", keep, out, err)
	}
}

// A failure is reported as the sandbox child reports it: a symbolic link
// planted below the store is refused as an unsafe store path naming it,
// not explained as a host blocker, and nothing runs.
func TestInPlaceStoreLinkRefused(t *testing.T) {
	l := newLayout(t)
	other := filepath.Join(l.root, "bases", "b2", "target")
	os.MkdirAll(other, 0o755)
	os.Rename(l.target, l.target+".real")
	if err := os.Symlink(other, l.target); err != nil {
		t.Fatal(err)
	}
	_, out, err := inPlace(t, l.plan(`echo X > "$T/through-link"`), "")
	r := parseReport(t, out, err)
	if r.Path != l.target || r.Blocked || r.Kind != failure.Refused.String() || !strings.Contains(r.Msg, "symbolic link") {
		t.Fatalf("report %+v, want a refused store path %s", r, l.target)
	}
	if _, err := os.Stat(filepath.Join(other, "through-link")); err == nil {
		t.Fatal("the command ran and wrote through the link")
	}
}

// A command that cannot be executed is reported at the exec step.
func TestInPlaceExecFailure(t *testing.T) {
	l := newLayout(t)
	p := l.plan("")
	p.Argv = []string{filepath.Join(l.root, "no-such-cargo")}
	_, out, err := inPlace(t, p, "")
	if r := parseReport(t, out, err); r.Step != "exec" || !strings.Contains(r.Msg, syscall.ENOENT.Error()) {
		t.Fatalf("report %+v", r)
	}
}

// On a host that blocks user namespaces the failure names the blocker, as
// a sandbox child's does: here a namespace whose max_user_namespaces is 0,
// so creating another fails with ENOSPC.
func TestInPlaceBlockedHost(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("util-linux unshare is not installed")
	}
	l := newLayout(t)
	_, out, err := inPlace(t, l.plan("echo ran"), "",
		"unshare", "--user", "--map-root-user", "sh", "-c", `echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"`, "sh")
	r := parseReport(t, out, err)
	if r.Step != platform.StepCreate || !r.Blocked || !strings.Contains(r.Msg, "max_user_namespaces") {
		t.Fatalf("report %+v", r)
	}
}

// The constructor's step names are the sandbox's, so platform explains a
// refusal of either the same way.
func TestStepNames(t *testing.T) {
	if stepCreate != platform.StepCreate {
		t.Fatalf("the constructor creates namespaces at step %q, package platform explains %q", stepCreate, platform.StepCreate)
	}
	if childArg != sandbox.ChildArg || joinArg != sandbox.JoinArg || stepJoin != sandbox.StepJoin {
		t.Fatalf("the constructor joins %q %q at step %q; package sandbox starts %q %q, step %q",
			childArg, joinArg, stepJoin, sandbox.ChildArg, sandbox.JoinArg, sandbox.StepJoin)
	}
	if !sandbox.JoinInConstructor {
		t.Fatal("linking the constructor did not tell package sandbox that it joins namespaces")
	}
}

// A sandbox child joins a live namespace through the constructor, without
// nsenter (none is on PATH here), and sees that namespace's mounts; a
// namespace it may not enter is reported at the join step.
func TestJoinInConstructor(t *testing.T) {
	l := newLayout(t)
	p := l.plan("")
	p.Argv = []string{"/bin/sleep", "30"}
	live, err := sandbox.Command(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { live.Process.Kill(); live.Wait() }()
	ns := func(name string) *os.File {
		f, err := os.Open("/proc/" + strconv.Itoa(live.Process.Pid) + "/ns/" + name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	t.Setenv("PATH", t.TempDir())
	os.WriteFile(filepath.Join(l.target, "made-there"), []byte("x"), 0o644)
	q := l.plan(`ls "$T"; { echo X > /proc/1/no; } 2>/dev/null; readlink /proc/self/ns/mnt`)
	q.Join = &sandbox.Namespace{User: ns("user"), Mount: ns("mnt")}
	out, err := child(t, q)
	wantNS, _ := os.Readlink("/proc/" + strconv.Itoa(live.Process.Pid) + "/ns/mnt")
	if err != nil || !strings.Contains(out, "made-there\n") || !strings.HasSuffix(out, wantNS+"\n") {
		t.Fatalf("joined: %v\n%s(want the mount namespace %s)", err, out, wantNS)
	}

	// Descriptors of another kind: setns refuses, and the child reports it.
	q.Join = &sandbox.Namespace{User: ns("mnt"), Mount: ns("user")}
	_, err = child(t, q)
	var se *sandbox.SetupError
	if !errors.As(err, &se) || se.Step != sandbox.StepJoin || !errors.Is(se.Err, syscall.EINVAL) {
		t.Fatalf("joining with swapped descriptors: %v", err)
	}
}

// An overlay agent's later calls join its live namespace in place: the
// command is the process that joined (no child between), runs in that
// namespace and sees its overlay, keeps the caller's files and no
// descriptor of the namespace. A namespace whose mounts are not the
// plan's, or whose store is not sealed, is refused at the check step with
// the reason, and nothing runs.
func TestExecJoin(t *testing.T) {
	l := newLayout(t)
	upper, work := filepath.Join(l.root, "agents", "a1", "upper"), filepath.Join(l.root, "agents", "a1", "work")
	for _, d := range []string{upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(work, "work"), 0o700) })
	p := l.plan("")
	p.Binds = p.Binds[1:] // the target; the overlay shows the checkout
	p.Overlays = []sandbox.Overlay{{Lower: l.src, Upper: upper, Work: work, Target: l.mntSrc}}
	p.Argv = []string{"/bin/sleep", "30"}
	live, err := sandbox.Command(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { live.Process.Kill(); live.Wait() }()
	wantNS, _ := os.Readlink("/proc/" + strconv.Itoa(live.Process.Pid) + "/ns/mnt")

	keep := filepath.Join(l.root, "busy.lock")
	os.WriteFile(keep, nil, 0o644)
	q := p
	q.Argv = []string{"/bin/sh", "-c", `echo "pid $$"; readlink /proc/self/ns/mnt; cat hello.txt; echo X > from-agent; readlink /proc/self/fd/$KEEP_FD
		for f in /proc/self/fd/*; do readlink "$f"; done | grep -c -e '^mnt:' -e '^user:' || :`}
	pid, out, err := joinInPlace(t, q, keep, live.Process.Pid)
	want := "pid " + strconv.Itoa(pid) + "\n" + wantNS + "\nfrom the checkout\n" + keep + "\n0\n"
	if err != nil || out != want {
		t.Fatalf("joined in place: %v\n%q\nwant\n%q", err, out, want)
	}
	if _, err := os.Stat(filepath.Join(upper, "from-agent")); err != nil {
		t.Fatalf("the command's write did not reach the agent's upper dir: %v", err)
	}

	other := filepath.Join(l.root, "agents", "a2", "upper")
	os.MkdirAll(other, 0o755)
	for name, c := range map[string]struct {
		change func(*sandbox.Plan)
		msg    string
	}{
		"another upper":  {func(p *sandbox.Plan) { p.Overlays[0].Upper = other }, l.mntSrc + " is not the overlay on " + other},
		"another bind":   {func(p *sandbox.Plan) { p.Binds[0].Source = l.src }, l.mntTarget + " is not " + l.src},
		"no seal":        {func(p *sandbox.Plan) { p.Store = l.keep }, "the store " + l.keep + " is writable"},
		"a secret shown": {func(p *sandbox.Plan) { p.Masked = append(p.Masked, l.keep) }, l.keep + " is not hidden"},
	} {
		r := q
		r.Binds = slices.Clone(q.Binds)
		r.Overlays = slices.Clone(q.Overlays)
		r.Argv = []string{"/bin/sh", "-c", "echo ran > " + l.keep + "/ran"}
		c.change(&r)
		_, out, err := joinInPlace(t, r, "", live.Process.Pid)
		rep := parseReport(t, out, err)
		if rep.Step != "check the joined namespace" || !strings.Contains(rep.Msg, c.msg) || rep.Blocked {
			t.Errorf("%s: report %+v, want a check failure saying %q", name, rep, c.msg)
		}
		if _, err := os.Stat(filepath.Join(l.keep, "ran")); err == nil {
			t.Fatalf("%s: the command ran", name)
		}
	}
}

// A plan the constructor does not take is refused before anything execs.
func TestExecRefusesOtherPlans(t *testing.T) {
	l := newLayout(t)
	for name, p := range map[string]sandbox.Plan{
		"overlay": func() sandbox.Plan {
			p := l.plan("true")
			p.Overlays = []sandbox.Overlay{{Lower: l.src, Upper: l.target, Work: l.keep, Target: l.mntTarget}}
			return p
		}(),
		"relative": func() sandbox.Plan { p := l.plan("true"); p.Argv = []string{"sh", "-c", "true"}; return p }(),
		"unclean":  func() sandbox.Plan { p := l.plan("true"); p.Dir = l.mntSrc + "/"; return p }(),
		"probe":    func() sandbox.Plan { p := l.plan("true"); p.Argv = nil; return p }(),
	} {
		c, err := sandbox.Command(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := Exec(c); err == nil || !strings.HasPrefix(err.Error(), "inplace:") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func parseReport(t *testing.T, out string, err error) report {
	t.Helper()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("want a reported failure (exit 3), got %v\n%s", err, out)
	}
	var r report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	return r
}

// The same, for an ordinary user.
func TestAsUnprivilegedUser(t *testing.T) {
	unpriv.Rerun(t, "^Test(InPlace(MatchesSandboxChild|KeepsFiles|StoreLinkRefused|ExecFailure|BlockedHost|ConfinedWorld)|JoinInConstructor|ExecJoin)$")
}

// The constructor makes the confined sandbox the sandbox child makes
// (package sandbox's TestConfinedWorld), from the same steps.
func TestInPlaceConfinedWorld(t *testing.T) {
	for _, inHome := range []bool{true, false} {
		w := confinetest.New(t, inHome)
		w.Plan.Argv[0] = "/bin/sh" // the shim execs cargo by its path
		_, out, err := inPlace(t, w.Plan, "")
		w.Check(t, out, err)
	}
}
