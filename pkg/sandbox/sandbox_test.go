package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/unpriv"
)

func TestMain(m *testing.M) {
	Init()
	if len(os.Args) > 1 && os.Args[1] == "holder" {
		holder(os.Args[2:])
		return
	}
	os.Exit(m.Run())
}

type layout struct {
	src, target, mntSrc, mntTarget string
}

func newLayout(t *testing.T) layout {
	t.Helper()
	root := t.TempDir()
	l := layout{
		src:       filepath.Join(root, "bases", "b1", "src"),
		target:    filepath.Join(root, "bases", "b1", "target"),
		mntSrc:    filepath.Join(root, "mnt", "src"),
		mntTarget: filepath.Join(root, "mnt", "target"),
	}
	for _, d := range []string{l.src, l.target, l.mntSrc, l.mntTarget} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(l.src, "hello.txt"), []byte("from the checkout\n"), 0o644)
	return l
}

func (l layout) plan(script string) Plan {
	return Plan{
		Binds: []Bind{{l.src, l.mntSrc}, {l.target, l.mntTarget}},
		Dir:   l.mntSrc,
		Argv:  []string{"sh", "-c", script},
		Env:   []string{"PATH=/usr/bin:/bin", "T=" + l.mntTarget},
	}
}

func run(t *testing.T, p Plan) (string, error) {
	t.Helper()
	c, err := Command(p)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err = c.Run()
	return out.String(), err
}

// The command sees the checkout and target at the canonical paths, starts
// there, writes through to the host target, and the host mountpoints stay
// empty.
func TestCanonicalPaths(t *testing.T) {
	l := newLayout(t)
	out, err := run(t, l.plan(`pwd; cat hello.txt; echo built > "$T/artifact"`))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := l.mntSrc + "\nfrom the checkout\n"
	if out != want {
		t.Fatalf("output %q, want %q", out, want)
	}
	if b, err := os.ReadFile(filepath.Join(l.target, "artifact")); err != nil || string(b) != "built\n" {
		t.Fatalf("artifact on host = %q, %v", b, err)
	}
	for _, d := range []string{l.mntSrc, l.mntTarget} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Fatalf("host mountpoint %s is not empty: %v", d, ents)
		}
	}
}

func TestExitStatusPassesThrough(t *testing.T) {
	l := newLayout(t)
	_, err := run(t, l.plan("exit 7"))
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("err = %v, want exit status 7", err)
	}
}

// The command keeps no capability: for an ordinary user, the mapped uid is
// not root, so nothing beyond a plain process remains.
func TestCapabilitiesDropped(t *testing.T) {
	l := newLayout(t)
	out, err := run(t, l.plan(`grep -E '^Cap(Eff|Amb)' /proc/self/status`))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "CapAmb:\t0000000000000000") {
		t.Fatalf("ambient capabilities left: %s", out)
	}
	if os.Getuid() != 0 && !strings.Contains(out, "CapEff:\t0000000000000000") {
		t.Fatalf("effective capabilities left for an ordinary user: %s", out)
	}
}

func TestSetupErrorsAreTyped(t *testing.T) {
	l := newLayout(t)
	p := l.plan("true")
	p.Binds[0].Source = filepath.Join(l.src, "missing")
	_, err := run(t, p)
	var se *SetupError
	if !errors.As(err, &se) || !strings.HasPrefix(se.Step, "bind-mount") {
		t.Fatalf("err = %#v, want a bind-mount SetupError", err)
	}
	p = l.plan("true")
	p.Argv = []string{"no-such-command-ferry"}
	_, err = run(t, p)
	if !errors.As(err, &se) || se.Step != "exec" {
		t.Fatalf("err = %v, want an exec SetupError", err)
	}
}

func TestProbe(t *testing.T) {
	if err := Probe(); err != nil {
		t.Fatalf("probe failed on a host that allows user namespaces: %v", err)
	}
}

// holder is a child process that starts a sandbox whose command leaves a
// background process, and then waits to be killed.
func holder(args []string) {
	l := layout{src: args[0], target: args[1], mntSrc: args[2], mntTarget: args[3]}
	p := l.plan(fmt.Sprintf("sleep 30.%s & echo started; wait", args[4]))
	p.KillOnParentDeath = true
	c, _ := Command(p)
	c.Stdout = os.Stdout
	if err := c.Run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// A caller killed with SIGKILL takes everything in its sandbox with it.
func TestKillOnParentDeath(t *testing.T) {
	l := newLayout(t)
	tag := fmt.Sprint(time.Now().UnixNano() % 1e9)
	cmd := exec.Command(os.Args[0], "holder", l.src, l.target, l.mntSrc, l.mntTarget, tag)
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := stdout.Read(buf)
	if !strings.Contains(string(buf[:n]), "started") {
		t.Fatalf("holder said %q", buf[:n])
	}
	defer cmd.Process.Kill()
	// "started" may come before the background process has exec'd.
	deadline := time.Now().Add(5 * time.Second)
	for len(orphans(tag)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the background process is not running")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline = time.Now().Add(5 * time.Second)
	for len(orphans(tag)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("processes outlived their killed caller: %v", orphans(tag))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func orphans(tag string) []string {
	var found []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Equal(b, []byte("sleep\x0030."+tag+"\x00")) {
			found = append(found, e.Name())
		}
	}
	return found
}

// The same tests pass for an ordinary user, which is what users get.
func TestAsUnprivilegedUser(t *testing.T) {
	unpriv.Rerun(t, "^Test(CanonicalPaths|ExitStatusPassesThrough|CapabilitiesDropped|SetupErrorsAreTyped|Probe|KillOnParentDeath)$")
}
