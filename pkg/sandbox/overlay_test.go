package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/unpriv"
)

const sampleMountinfo = `22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro
35 22 0:30 / /tmp/with\040space rw,nosuid master:2 propagate_from:1 - tmpfs tmpfs rw,size=100k
40 22 0:40 / /mnt/src rw,relatime - overlay overlay rw,lowerdir=/b/src,upperdir=/a/up\040per,workdir=/a/work,userxattr
41 22 0:41 / /mnt/src rw shared:7 - overlay overlay rw,lowerdir=/b2,upperdir=/a2/upper,workdir=/a2/work,uuid=on
42 22 0:42 / /mnt/back\134slash rw - overlay overlay ro,lowerdir=/only/lower
`

func TestParseMountinfo(t *testing.T) {
	mounts, err := parseMountinfo([]byte(sampleMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 5 {
		t.Fatalf("parsed %d mounts, want 5: %+v", len(mounts), mounts)
	}
	root := mounts[0]
	if root.Point != "/" || root.FSType != "ext4" || root.Options["errors"] != "remount-ro" {
		t.Errorf("root mount (one optional field) = %+v", root)
	}
	if _, ok := root.Options["rw"]; !ok {
		t.Errorf("super option rw missing: %v", root.Options)
	}
	if m := mounts[1]; m.Point != "/tmp/with space" || m.FSType != "tmpfs" || m.Options["size"] != "100k" {
		t.Errorf("escaped mount point, two optional fields = %+v", m)
	}
	ov := mounts[2]
	want := map[string]string{"rw": "", "lowerdir": "/b/src", "upperdir": "/a/up per", "workdir": "/a/work", "userxattr": ""}
	if ov.Point != "/mnt/src" || ov.FSType != "overlay" || !maps.Equal(ov.Options, want) {
		t.Errorf("overlay without optional fields = %+v, want options %v", ov, want)
	}
	if m := mounts[4]; m.Point != `/mnt/back\slash` || m.Options["lowerdir"] != "/only/lower" {
		t.Errorf("escaped backslash = %+v", m)
	}

	if m := TopMount(mounts, "/mnt/src"); m == nil || m.Options["upperdir"] != "/a2/upper" {
		t.Errorf("TopMount(/mnt/src) = %+v, want the last one mounted there", m)
	}
	if m := TopMount(mounts, "/mnt/src/"); m == nil || m.Options["upperdir"] != "/a2/upper" {
		t.Errorf("TopMount(/mnt/src/) = %+v, want the path cleaned", m)
	}
	if m := TopMount(mounts, "/tmp/with space"); m == nil || m.FSType != "tmpfs" {
		t.Errorf("TopMount(/tmp/with space) = %+v", m)
	}
	if m := TopMount(mounts, "/mnt"); m != nil {
		t.Errorf("TopMount(/mnt) = %+v, want nil", m)
	}

	for _, c := range []struct {
		m           Mount
		upper, work string
		want        bool
	}{
		{ov, "/a/up per", "/elsewhere", true},
		{ov, "/a/up per/", "", true},
		{ov, "/elsewhere", "/a/work", true},
		{ov, "/a/up per", "/a/work", true},
		{ov, "/a", "/a", false},
		{ov, "/b/src", "/b/src", false}, // the lower is only read
		{ov, "", "", false},
		{mounts[3], "/a/up per", "/a/work", false},
		{mounts[4], "", "", false}, // no upper, no work
		{mounts[4], "/only/lower", "/only/lower", false},
		{mounts[1], "/tmp/with space", "/tmp/with space", false}, // not an overlay
		{Mount{FSType: "tmpfs", Options: map[string]string{"upperdir": "/a/up per"}}, "/a/up per", "", false},
	} {
		if got := c.m.OverlayOn(c.upper, c.work); got != c.want {
			t.Errorf("%s on %s (upper %q).OverlayOn(%q, %q) = %v, want %v",
				c.m.FSType, c.m.Point, c.m.Options["upperdir"], c.upper, c.work, got, c.want)
		}
	}

	for _, bad := range []string{"36 35 98:0 /root /point rw shared:1 ext4 /dev/vda rw\n", "36 35\n"} {
		if _, err := parseMountinfo([]byte(bad)); err == nil {
			t.Errorf("malformed line %q parsed", bad)
		}
	}
}

// The real mountinfo parses, and shows / mounted.
func TestReadMountinfoSelf(t *testing.T) {
	mounts, err := ReadMountinfo("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if TopMount(mounts, "/") == nil {
		t.Fatalf("no mount on / in %+v", mounts)
	}
}

// overlayLayout is a base checkout (the lower layer), an agent's upper and
// work dirs, and the canonical mountpoints: src gets the overlay, target a
// bind of a host dir.
type overlayLayout struct {
	root, lower, upper, work, target, mntSrc, mntTarget string
}

func newOverlayLayout(t *testing.T) overlayLayout {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := overlayLayout{
		root:      root,
		lower:     filepath.Join(root, "bases", "b1", "src"),
		upper:     filepath.Join(root, "agents", "a1", "upper"),
		work:      filepath.Join(root, "agents", "a1", "work"),
		target:    filepath.Join(root, "agents", "a1", "target"),
		mntSrc:    filepath.Join(root, "mnt", "src"),
		mntTarget: filepath.Join(root, "mnt", "target"),
	}
	for _, d := range []string{l.lower, l.upper, l.work, l.target, l.mntSrc, l.mntTarget} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Overlayfs makes work/work with mode 0 and may leave a whiteout in
	// it: an ordinary user could not remove it. (Runs before the
	// TempDir's removal, which was registered first.)
	t.Cleanup(func() { os.Chmod(filepath.Join(l.work, "work"), 0o700) })
	for name, text := range map[string]string{"hello.txt": "from the base\n", "gone.txt": "deleted in the agent\n"} {
		if err := os.WriteFile(filepath.Join(l.lower, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func (l overlayLayout) overlay() Overlay {
	return Overlay{Lower: l.lower, Upper: l.upper, Work: l.work, Target: l.mntSrc}
}

func (l overlayLayout) plan(script string) Plan {
	return Plan{
		Binds:    []Bind{{l.target, l.mntTarget}},
		Overlays: []Overlay{l.overlay()},
		Dir:      l.mntSrc,
		Argv:     []string{"sh", "-c", script},
		Env:      []string{"PATH=/usr/bin:/bin", "T=" + l.mntTarget},
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Writes through the overlay land in the upper dir; the base is untouched
// and the host mountpoint stays empty.
func TestOverlaySandbox(t *testing.T) {
	l := newOverlayLayout(t)
	out, err := run(t, l.plan(`pwd; cat hello.txt; echo new > made.txt; echo changed > hello.txt; rm gone.txt; ls; echo built > "$T/artifact"`))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if want := l.mntSrc + "\nfrom the base\nhello.txt\nmade.txt\n"; out != want {
		t.Fatalf("output %q, want %q", out, want)
	}
	if got := readFile(t, filepath.Join(l.upper, "made.txt")); got != "new\n" {
		t.Errorf("upper/made.txt = %q", got)
	}
	if got := readFile(t, filepath.Join(l.upper, "hello.txt")); got != "changed\n" {
		t.Errorf("upper/hello.txt = %q", got)
	}
	if got := readFile(t, filepath.Join(l.lower, "hello.txt")); got != "from the base\n" {
		t.Errorf("the base's hello.txt changed: %q", got)
	}
	if got := readFile(t, filepath.Join(l.lower, "gone.txt")); got != "deleted in the agent\n" {
		t.Errorf("the base's gone.txt changed: %q", got)
	}
	if _, err := os.Stat(filepath.Join(l.lower, "made.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("made.txt reached the base: %v", err)
	}
	if got := readFile(t, filepath.Join(l.target, "artifact")); got != "built\n" {
		t.Errorf("artifact on host = %q", got)
	}
	if ents, _ := os.ReadDir(l.mntSrc); len(ents) != 0 {
		t.Errorf("host mountpoint %s is not empty: %v", l.mntSrc, ents)
	}
}

// An overlay dir that overlayfs cannot name is refused before anything runs.
func TestOverlayPathRefused(t *testing.T) {
	l := newOverlayLayout(t)
	for _, bad := range []string{"a,b", "a:b", `a\b`} {
		for _, field := range []string{"lower", "upper", "work"} {
			p := l.plan("true")
			o := &p.Overlays[0]
			dir := filepath.Join(l.root, bad)
			switch field {
			case "lower":
				o.Lower = dir
			case "upper":
				o.Upper = dir
			case "work":
				o.Work = dir
			}
			for _, join := range []bool{false, true} {
				if join {
					p.Join = &Namespace{User: os.Stdin, Mount: os.Stdin}
				}
				c, err := Command(p)
				var se *SetupError
				if !errors.As(err, &se) || !strings.HasPrefix(se.Step, "mount an overlay") || !strings.Contains(se.Error(), dir) {
					t.Errorf("%s %q (join %v): Command = %v, %v; want a SetupError naming it", field, dir, join, c, err)
				}
			}
		}
	}
}

// holding is a sandboxed command left running, whose output lines are read
// as they come.
type holding struct {
	c     *Cmd
	lines chan string
}

func startHolding(t *testing.T, p Plan) *holding {
	t.Helper()
	c, err := Command(p)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holding{c: c, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	t.Cleanup(h.stop)
	return h
}

func (h *holding) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case got, ok := <-h.lines:
		if !ok || got != want {
			t.Fatalf("sandboxed command said %q (open %v), want %q", got, ok, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("sandboxed command did not say %q", want)
	}
}

func (h *holding) stop() {
	if h.c.ProcessState == nil {
		h.c.Process.Kill()
		h.c.Wait()
	}
}

func openNS(t *testing.T, pid int) *Namespace {
	t.Helper()
	var files [2]*os.File
	for i, kind := range []string{"user", "mnt"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		files[i] = f
	}
	return &Namespace{User: files[0], Mount: files[1]}
}

func nsID(t *testing.T, pid int, kind string) string {
	t.Helper()
	id, err := NamespaceID(pid, kind)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A second command joins the namespace of a running one: both see the same
// overlay, the caller's extra files arrive after the namespace descriptors,
// which do not leak into the command, and OnStart gets the command's pid.
func TestJoin(t *testing.T) {
	l := newOverlayLayout(t)
	first := startHolding(t, l.plan(`echo first > from-first; echo ready; while [ ! -e from-second ]; do sleep 0.02; done; echo saw-second; exec sleep 60`))
	first.expect(t, "ready")
	ns := openNS(t, first.c.Process.Pid)

	extra, err := os.Create(filepath.Join(l.root, "extra"))
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	p := l.plan(`read x; echo $$; pwd; cat from-first; echo second > from-second; readlink /proc/$$/fd/6
for i in 3 4 5 7; do if [ -e /proc/$$/fd/$i ]; then echo "fd $i open: $(readlink /proc/$$/fd/$i)"; fi; done`)
	p.Join = ns
	c, err := Command(p)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	c.ExtraFiles = []*os.File{extra}
	goOn, resume, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer goOn.Close()
	defer resume.Close()
	c.Stdin = goOn
	started := 0
	c.OnStart = func(pid int) error {
		started = pid
		// The command is held at `read` until this returns.
		if got, want := nsID(t, pid, "mnt"), nsID(t, first.c.Process.Pid, "mnt"); got != want {
			t.Errorf("joined command runs in mount namespace %s, want %s", got, want)
		}
		if got, want := nsID(t, pid, "user"), nsID(t, first.c.Process.Pid, "user"); got != want {
			t.Errorf("joined command runs in user namespace %s, want %s", got, want)
		}
		return resume.Close()
	}
	code, err := c.RunAsChild()
	if err != nil || code != 0 {
		t.Fatalf("joined command: exit %d, %v\n%s", code, err, out.String())
	}
	want := fmt.Sprintf("%d\n%s\nfirst\n%s\n", started, l.mntSrc, extra.Name())
	if started == 0 || out.String() != want {
		t.Fatalf("joined command said %q, want %q (OnStart pid %d)", out.String(), want, started)
	}
	first.expect(t, "saw-second")
	if got := readFile(t, filepath.Join(l.upper, "from-second")); got != "second\n" {
		t.Errorf("upper/from-second = %q", got)
	}
	if got := readFile(t, filepath.Join(l.upper, "from-first")); got != "first\n" {
		t.Errorf("upper/from-first = %q", got)
	}
	if ents, _ := os.ReadDir(l.mntSrc); len(ents) != 0 {
		t.Errorf("host mountpoint %s is not empty: %v", l.mntSrc, ents)
	}
}

// A created sandbox gets the caller's extra files from fd 4, after the
// status pipe, which does not leak.
func TestExtraFilesFollowStatusPipe(t *testing.T) {
	l := newLayout(t)
	extra, err := os.Create(filepath.Join(l.target, "extra"))
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	c, err := Command(l.plan(`readlink /proc/$$/fd/4; if [ -e /proc/$$/fd/3 ]; then echo "fd 3 open: $(readlink /proc/$$/fd/3)"; fi`))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	c.ExtraFiles = []*os.File{extra}
	if err := c.Run(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if out.String() != extra.Name()+"\n" {
		t.Fatalf("command said %q, want %q", out.String(), extra.Name()+"\n")
	}
}

// OnStart gets the command's own pid; an error from it kills the command
// and is returned.
func TestOnStart(t *testing.T) {
	l := newLayout(t)
	c, err := Command(l.plan(`echo $$`))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	c.Stdout = &out
	started := 0
	c.OnStart = func(pid int) error { started = pid; return nil }
	if code, err := c.RunAsChild(); code != 0 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	if out.String() != fmt.Sprintf("%d\n", started) || started == 0 {
		t.Fatalf("command's pid %q, OnStart got %d", out.String(), started)
	}

	c, err = Command(l.plan(`exec sleep 60`))
	if err != nil {
		t.Fatal(err)
	}
	refused := errors.New("refused by OnStart")
	begin := time.Now()
	c.OnStart = func(int) error { return refused }
	if _, err := c.RunAsChild(); err != refused {
		t.Fatalf("RunAsChild = %v, want OnStart's error", err)
	}
	if c.ProcessState == nil || time.Since(begin) > 30*time.Second {
		t.Fatalf("the command was not killed and reaped (state %v)", c.ProcessState)
	}
}

// A sandbox with an overlay names its namespaces, even when its command
// exits before the caller looks (agent records them in ns.json); a bind-only
// sandbox names none.
func TestNamespacesReported(t *testing.T) {
	l := newOverlayLayout(t)
	c, err := Command(l.plan(`readlink /proc/self/ns/user /proc/self/ns/mnt`))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	c.Stdout = &out
	var user, mnt string
	c.OnStart = func(pid int) error {
		time.Sleep(200 * time.Millisecond) // the command is long gone
		user, mnt = c.Namespaces()
		return nil
	}
	if code, err := c.RunAsChild(); code != 0 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	if want := user + "\n" + mnt + "\n"; out.String() != want || user == "" {
		t.Fatalf("the command ran in\n%s; the sandbox named %q and %q", out.String(), user, mnt)
	}
	if self, _ := os.Readlink("/proc/self/ns/mnt"); mnt == self {
		t.Fatalf("the reported mount namespace %s is the caller's", mnt)
	}
	b := newLayout(t)
	c, err = Command(b.plan(`true`))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if u, m := c.Namespaces(); u != "" || m != "" {
		t.Fatalf("a bind-only sandbox named %q %q", u, m)
	}
}

// A plan that does not match the namespace joined is refused before its
// command runs.
func TestJoinRefusesMismatch(t *testing.T) {
	l := newOverlayLayout(t)
	first := startHolding(t, l.plan(`echo ready; exec sleep 60`))
	first.expect(t, "ready")
	ns := openNS(t, first.c.Process.Pid)
	other := filepath.Join(l.root, "agents", "a2")
	for _, d := range []string{"upper", "work", "target"} {
		if err := os.MkdirAll(filepath.Join(other, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ran := filepath.Join(l.root, "ran")
	for name, change := range map[string]func(p *Plan){
		"another upper": func(p *Plan) { p.Overlays[0].Upper = filepath.Join(other, "upper") },
		"another work":  func(p *Plan) { p.Overlays[0].Work = filepath.Join(other, "work") },
		"another upper and work": func(p *Plan) {
			p.Overlays[0].Upper, p.Overlays[0].Work = filepath.Join(other, "upper"), filepath.Join(other, "work")
		},
		"an overlay on a bind":      func(p *Plan) { p.Overlays[0].Target = l.mntTarget },
		"an overlay on a plain dir": func(p *Plan) { p.Overlays[0].Target = other },
		"another bind source":       func(p *Plan) { p.Binds[0].Source = filepath.Join(other, "target") },
		"a missing bind source":     func(p *Plan) { p.Binds[0].Source = filepath.Join(other, "missing") },
		"a bind not made": func(p *Plan) {
			p.Binds = append(p.Binds, Bind{filepath.Join(other, "target"), filepath.Join(other, "upper")})
		},
	} {
		p := l.plan(`touch "` + ran + `"`)
		change(&p)
		p.Join = ns
		out, err := run(t, p)
		var se *SetupError
		if !errors.As(err, &se) || se.Step != "check the joined namespace" {
			t.Errorf("%s: err = %v, want a SetupError of step %q\n%s", name, err, "check the joined namespace", out)
		}
		if _, err := os.Stat(ran); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: the command ran (%v)", name, err)
		}
	}
	// The namespace joined is still the first command's, and usable.
	p := l.plan(`touch "` + ran + `"`)
	p.Join = ns
	if out, err := run(t, p); err != nil {
		t.Fatalf("matching plan: %v\n%s", err, out)
	}
	if _, err := os.Stat(ran); err != nil {
		t.Fatal(err)
	}
}

// A failure of nsenter itself, or its absence, is a SetupError.
func TestJoinFailures(t *testing.T) {
	l := newOverlayLayout(t)
	first := startHolding(t, l.plan(`echo ready; exec sleep 60`))
	first.expect(t, "ready")
	ns := openNS(t, first.c.Process.Pid)
	ran := filepath.Join(l.root, "ran")
	p := l.plan(`touch "` + ran + `"`)
	p.Join = ns

	saved := nsenter
	t.Cleanup(func() { nsenter = saved })
	nsenter = "ferry-no-such-nsenter"
	c, err := Command(p)
	var se *SetupError
	if !errors.As(err, &se) || se.Step != "join the agent's namespace" {
		t.Fatalf("nsenter missing: Command = %v, %v; want a SetupError", c, err)
	}

	// An nsenter that exits without running the child.
	nsenter = "false"
	if _, err := run(t, p); !errors.As(err, &se) || se.Step != "join the agent's namespace" {
		t.Fatalf("nsenter failing: err = %v, want a SetupError", err)
	}
	nsenter = saved

	// Descriptors that are not namespaces.
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	p.Join = &Namespace{User: null, Mount: null}
	if out, err := run(t, p); !errors.As(err, &se) || se.Step != "join the agent's namespace" {
		t.Fatalf("joining /dev/null: err = %v, want a SetupError\n%s", err, out)
	}

	p.Join = &Namespace{User: ns.User}
	if c, err := Command(p); err == nil {
		t.Fatalf("join without a mount namespace: Command = %v", c)
	}
	if _, err := os.Stat(ran); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the command ran (%v)", err)
	}
}

// LiveOverlays, OverlayUsers and InNamespace see a sandboxed process while
// it runs and forget it once it is gone.
func TestLiveOverlays(t *testing.T) {
	l := newOverlayLayout(t)
	h := startHolding(t, l.plan(`echo ready; exec sleep 60`))
	h.expect(t, "ready")
	pid := h.c.Process.Pid

	if users := OverlayUsers(l.upper, l.work); !slices.Contains(users, pid) {
		t.Errorf("OverlayUsers(upper, work) = %v, want %d among them", users, pid)
	}
	if users := OverlayUsers(l.upper+"/", filepath.Join(l.root, "nowhere")); !slices.Contains(users, pid) {
		t.Errorf("OverlayUsers(upper/, elsewhere) = %v, want %d among them", users, pid)
	}
	if users := OverlayUsers(filepath.Join(l.root, "nowhere"), l.work); !slices.Contains(users, pid) {
		t.Errorf("OverlayUsers(elsewhere, work) = %v, want %d among them", users, pid)
	}
	if users := OverlayUsers(l.lower, l.lower); len(users) != 0 {
		t.Errorf("OverlayUsers(lower, lower) = %v, want none", users)
	}
	found := false
	for _, o := range LiveOverlays() {
		if o.Upper == l.upper {
			found = true
			if o.Lower != l.lower || o.Work != l.work || !slices.Contains(o.Pids, pid) || !slices.IsSorted(o.Pids) {
				t.Errorf("live overlay %+v, want lower %s, work %s, pid %d", o, l.lower, l.work, pid)
			}
		}
	}
	if !found {
		t.Errorf("LiveOverlays does not list the overlay on %s: %+v", l.upper, LiveOverlays())
	}
	id := nsID(t, pid, "mnt")
	if !strings.HasPrefix(id, "mnt:[") {
		t.Errorf("NamespaceID = %q", id)
	}
	in := InNamespace(id)
	if !slices.Contains(in, pid) || slices.Contains(in, os.Getpid()) || !slices.IsSorted(in) {
		t.Errorf("InNamespace(%s) = %v, want %d and not this process (%d)", id, in, pid, os.Getpid())
	}
	if self := InNamespace(nsID(t, os.Getpid(), "mnt")); !slices.Contains(self, os.Getpid()) || slices.Contains(self, pid) {
		t.Errorf("InNamespace(own namespace) = %v, want this process (%d) and not %d", self, os.Getpid(), pid)
	}

	h.stop()
	deadline := time.Now().Add(5 * time.Second)
	for {
		users := OverlayUsers(l.upper, l.work)
		live := slices.ContainsFunc(LiveOverlays(), func(o LiveOverlay) bool { return o.Upper == l.upper })
		inNS := InNamespace(id)
		if len(users) == 0 && !live && len(inNS) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after exit: OverlayUsers %v, listed live %v, in its namespace %v", users, live, inNS)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The overlay and join tests pass for an ordinary user too.
func TestOverlayAsUnprivilegedUser(t *testing.T) {
	unpriv.Rerun(t, "^Test(SealedStore|SealedStoreOverlay|StoreLinkRefused|ParseMountinfo|ReadMountinfoSelf|OverlaySandbox|OverlayPathRefused|Join|ExtraFilesFollowStatusPipe|OnStart|JoinRefusesMismatch|JoinFailures|LiveOverlays|NamespacesReported)$")
	unpriv.Rerun(t, "^TestConfinedWorld$")
}
