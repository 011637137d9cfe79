package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/internal/eventstest"
	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/pipeline"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

func TestMain(m *testing.M) {
	if os.Getenv("FERRY_TEST_RUN_AS") == "attacker" {
		os.Exit(attack())
	}
	sandbox.Init()
	// Each test decides where its bus is; an external one named by the
	// environment running the tests must not leak in.
	os.Unsetenv("FERRY_NATS_URL")
	os.Unsetenv("FERRY_BUS_REPLICAS")
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

// wait bounds every wait for something the pipeline does; a loaded CI
// machine with two cores is slow, not stuck.
const wait = 60 * time.Second

// world is a fixture repository with a store parent of its own, whose warm
// build is held at a gate: the warm command touches the started file and
// then waits until the gate file exists. A build can thus be caught in the
// middle without sleeping, and let go when the test decides.
type world struct {
	t       *testing.T
	repo    *fixture.Repo
	home    string // FERRY_HOME, the store parent
	wts     string // FERRY_WORKTREES
	gate    string // the warm command waits for this file
	started string // the warm command touches this file first
	store   *store.Store
	git     *git.Repo
	n       int // commits made by commit
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, repo: testenv.Repo(t, fixture.Options{})}
	root := t.TempDir()
	w.home, w.wts = filepath.Join(root, "home"), filepath.Join(root, "worktrees")
	w.gate, w.started = filepath.Join(root, "gate"), filepath.Join(root, "started")
	warm := fmt.Sprintf(`touch %s && while [ ! -e %s ]; do sleep 0.05; done`, w.started, w.gate)
	toml := fmt.Sprintf("[base]\nwarm = [%q]\n", warm)
	if err := os.WriteFile(filepath.Join(w.repo.Dir, config.FileName), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	// ferry.toml stays untracked: commits made by the test must not carry it.
	if err := os.WriteFile(filepath.Join(w.repo.Dir, ".git", "info", "exclude"), []byte(config.FileName+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	if w.git, err = git.Open(w.repo.Dir); err != nil {
		t.Fatal(err)
	}
	w.store = openStore(t, w.git, w.home)
	return w
}

func openStore(t *testing.T, r *git.Repo, parent string) *store.Store {
	t.Helper()
	common, err := r.CommonDir()
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(parent, common, r.Top)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// open lets warm builds through; close holds the next ones at the gate.
func (w *world) open() {
	w.t.Helper()
	if err := os.WriteFile(w.gate, nil, 0o644); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) close() {
	w.t.Helper()
	for _, f := range []string{w.gate, w.started} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			w.t.Fatal(err)
		}
	}
}

// waitStarted waits until a warm command has started since close.
func (w *world) waitStarted() {
	w.t.Helper()
	poll(w.t, "the warm command to start", func() bool {
		_, err := os.Stat(w.started)
		return err == nil
	})
}

// commit makes a new commit (a new file) and returns its id.
func (w *world) commit() string {
	w.t.Helper()
	w.n++
	if err := w.repo.Write(fmt.Sprintf("notes/n%d.txt", w.n), fmt.Sprintf("note %d\n", w.n)); err != nil {
		w.t.Fatal(err)
	}
	c, err := w.repo.Commit(fmt.Sprintf("note %d", w.n))
	if err != nil {
		w.t.Fatal(err)
	}
	return c
}

// env is an in-process Env for w's repository and store parent.
func (w *world) env(log *testenv.Buffer) pipeline.Env {
	w.t.Helper()
	cenv := testenv.NewEnv(w.t.TempDir(), w.repo.Dir)
	cenv.Set("FERRY_HOME", w.home)
	cenv.Set("FERRY_WORKTREES", w.wts)
	settings, err := config.Load(w.git.Top, cenv)
	if err != nil {
		w.t.Fatal(err)
	}
	return pipeline.Env{Repo: w.git, Settings: settings, Store: w.store, Log: log}
}

// ready reports whether the base id is ready (base.json in place).
func (w *world) ready(id string) bool {
	_, err := base.Read(w.store, id)
	return err == nil
}

func (w *world) current() string {
	w.t.Helper()
	c, err := w.store.Current()
	if err != nil {
		w.t.Fatal(err)
	}
	return c
}

// worktrees counts the worktrees of the repository registered at the
// checkout of base id.
func (w *world) worktrees(id string) int {
	w.t.Helper()
	return countWorktrees(w.t, w.repo, filepath.Join(w.store.BaseDir(id), "src"))
}

func countWorktrees(t *testing.T, repo *fixture.Repo, path string) int {
	t.Helper()
	out, err := repo.Git("worktree", "list", "--porcelain")
	if err != nil {
		t.Fatal(err)
	}
	want := resolved(path)
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(line, "worktree "); ok && resolved(p) == want {
			n++
		}
	}
	return n
}

func resolved(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

// checkNotPublished fails unless base id is neither ready nor current.
func (w *world) checkNotPublished(id string) {
	w.t.Helper()
	if w.ready(id) {
		w.t.Errorf("base %s is ready", id)
	}
	if cur := w.current(); cur == id {
		w.t.Errorf("base %s is current", id)
	}
}

// checkPublished fails unless base id is ready, current and checked out in
// exactly one registered worktree.
func (w *world) checkPublished(id string) {
	w.t.Helper()
	if !w.ready(id) {
		w.t.Errorf("base %s is not ready", id)
	}
	if cur := w.current(); cur != id {
		w.t.Errorf("current base is %q, want %s", cur, id)
	}
	if n := w.worktrees(id); n != 1 {
		w.t.Errorf("%d registered worktrees for base %s, want 1", n, id)
	}
}

// poll calls cond until it holds, failing the test after wait.
func poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s after %v", what, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// proc is a Ferry binary running as a child process.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *testenv.Buffer
	done chan struct{}
	err  error // Wait's result, once done is closed
}

// childEnv is the environment of the binaries: this process's, without
// any FERRY_ setting, plus vars.
func childEnv(vars ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FERRY_") {
			env = append(env, kv)
		}
	}
	return append(env, vars...)
}

// baseVars are the settings every binary of w gets.
func (w *world) baseVars() []string {
	return []string{"FERRY_HOME=" + w.home, "FERRY_WORKTREES=" + w.wts}
}

// start runs the binary args[0] of testenv.Binaries with args[1:] in the
// repository, with w's store parent plus vars. It is killed, if it still
// runs, when the test ends; its output is logged when the test failed.
func (w *world) start(vars []string, args ...string) *proc {
	w.t.Helper()
	return startProc(w.t, w.repo.Dir, childEnv(append(w.baseVars(), vars...)...), args...)
}

func startProc(t *testing.T, dir string, env []string, args ...string) *proc {
	t.Helper()
	bin := testenv.Binaries(t)
	p := &proc{name: strings.Join(args, " "), out: &testenv.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(bin, args[0]), args[1:]...)
	p.cmd.Dir, p.cmd.Env = dir, env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("output of %s (pid %d):\n%s", p.name, p.cmd.Process.Pid, p.out)
		}
	})
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", p.name, err)
	}
	p.wait(t)
}

// wait waits for the process to exit and returns its exit error.
func (p *proc) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(wait):
		t.Fatalf("%s did not exit within %v:\n%s", p.name, wait, p.out)
		return nil
	}
}

// run runs a one-shot binary to completion and returns its stdout; it
// fails the test when the binary fails.
func (w *world) run(args ...string) (string, time.Duration) {
	w.t.Helper()
	c := exec.Command(filepath.Join(testenv.Binaries(w.t), args[0]), args[1:]...)
	c.Dir, c.Env = w.repo.Dir, childEnv(w.baseVars()...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	start := time.Now()
	err := c.Run()
	took := time.Since(start)
	if err != nil {
		w.t.Fatalf("%s: %v\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), took
}

// dialHosted connects to the bus hosted under the store parent, found
// through bus.json, waiting for it (a fresh host, or one restarted after a
// stale bus.json was left behind).
func dialHosted(t *testing.T, parent string) *bus.Conn {
	t.Helper()
	var c *bus.Conn
	var last error
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, last = bus.Dial(ctx, bus.Config{Parent: parent, Name: "pipeline-test", Bound: 2 * time.Second})
		cancel()
		if last == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no bus under %s within %v: %v", parent, wait, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(c.Close)
	return c
}

// Event predicates.

func building(commit string) func(*events.BaseBuilding) bool {
	return func(e *events.BaseBuilding) bool { return e.Commit == commit }
}

func readyFor(commit string) func(*events.BaseReady) bool {
	return func(e *events.BaseReady) bool { return e.Commit == commit }
}

func seen(commit string) func(*events.CommitSeen) bool {
	return func(e *events.CommitSeen) bool { return e.Commit == commit }
}

// count counts the recorded events of type E matching match.
func count[E events.Event](w *eventstest.Watcher, match func(E) bool) int {
	return w.Count(func(e events.Event) bool {
		x, ok := e.(E)
		return ok && (match == nil || match(x))
	})
}

// settle waits until every durable consumer of Ferry's streams has nothing
// pending or unacknowledged, then publishes a marker event and waits for
// the watcher to record it. The watcher reads the streams in order, so
// afterwards it has recorded everything published before the consumers
// went idle, and counts taken then are final.
func settle(t *testing.T, c *bus.Conn, w *eventstest.Watcher, repoKey string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	poll(t, "the consumers to go idle", func() bool {
		for _, stream := range []string{bus.StreamCommits, bus.StreamEvents} {
			s, err := c.JS.Stream(ctx, stream)
			if err != nil {
				return false
			}
			lister := s.ListConsumers(ctx)
			for ci := range lister.Info() {
				// Only the services' durables: a watcher's ordered
				// consumer of a closed connection lingers a while.
				if ci.Config.Durable != "" && (ci.NumPending > 0 || ci.NumAckPending > 0) {
					return false
				}
			}
			if lister.Err() != nil {
				return false
			}
		}
		return true
	})
	mark := events.Stamp(&events.GCCollected{DeletedBases: []string{}}, repoKey)
	if _, err := c.Publish(ctx, mark); err != nil {
		t.Fatalf("publish the marker: %v", err)
	}
	w.Wait(wait, func(e events.Event) bool { return e.EventHeader().ID == mark.ID })
}

// consumers lists the durable consumers of a stream (not the ephemeral
// ordered consumers of event watchers).
func consumers(t *testing.T, c *bus.Conn, stream string) []*jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.JS.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.ConsumerInfo
	l := s.ListConsumers(ctx)
	for ci := range l.Info() {
		if ci.Config.Durable != "" {
			out = append(out, ci)
		}
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// descendants returns the pids of every living descendant of pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := ppid(p); ok {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	var walk func(int)
	walk = func(p int) {
		for _, c := range children[p] {
			out = append(out, c)
			walk(c)
		}
	}
	walk(pid)
	return out
}

// ppid reads the parent pid from /proc/<pid>/stat.
func ppid(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return pp, err == nil
}

// startTime is the start time of pid from /proc (field 22), to tell a
// process from a later one that reuses its pid.
func startTime(pid int) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return "", false
	}
	return f[19], true
}

func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// stage is a long-running stage run in this process.
type stage struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// runStage runs fn until stop is called or the test ends; log is printed
// when the test failed. stop fails the test if fn returned early.
func runStage(t *testing.T, log *testenv.Buffer, fn func(context.Context) error) *stage {
	ctx, cancel := context.WithCancel(context.Background())
	s := &stage{cancel: cancel, done: make(chan struct{})}
	go func() {
		s.err = fn(ctx)
		close(s.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
		if t.Failed() {
			t.Logf("log:\n%s", log)
		}
	})
	return s
}

// stop ends the stage and returns its error; a stage that had already
// returned is an error.
func (s *stage) stop() error {
	select {
	case <-s.done:
		return fmt.Errorf("the stage stopped by itself: %v", s.err)
	default:
	}
	s.cancel()
	<-s.done
	return s.err
}
