package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

// An overlay agent's target exists only inside a namespace that mounted it,
// and two overlays on one upper dir must never be mounted at once (the kernel
// only warns, and the two views diverge). So every process of an overlay
// agent runs in one shared namespace, entered by this protocol:
//
//   - Every process using the overlay holds mount.lock shared through an
//     inherited descriptor (as every process run for any agent holds
//     busy.lock).
//   - Under the agent lock, enter tries mount.lock exclusively. When it gets
//     it and no readable /proc/<pid>/mountinfo shows an overlay on the
//     agent's upper or work dir (a process in a nested namespace may have
//     closed its descriptor and still have the overlay mounted), it creates
//     the namespace, mounts the overlay there, records the namespace in
//     ns.json, and turns the lock shared for the new process tree.
//   - Otherwise it joins a live process of the namespace ns.json records,
//     after checking that this process shows the agent's overlay on the
//     canonical target (namespace ids can be reused).
//   - When neither works (the last session is exiting, or only a nested
//     namespace still has the overlay), it retries with backoff for up to
//     EnterPatience, then refuses naming the processes.

// EnterPatience bounds how long enter waits for an overlay that is mounted
// but cannot be joined to go away.
var EnterPatience = 10 * time.Second

// NSRecord is ns.json: the namespace an overlay agent's processes share.
type NSRecord struct {
	Pid     int       `json:"pid"`   // the process that created it
	User    string    `json:"user"`  // "user:[4026532...]"
	Mount   string    `json:"mount"` // "mnt:[4026532...]"
	Upper   string    `json:"upper"`
	Work    string    `json:"work"`
	Boot    string    `json:"boot"` // the kernel's boot_id when it was mounted
	Created time.Time `json:"created"`
}

// Session is a command about to run in an agent's sandbox, with the locks
// that admit it.
type Session struct {
	Cmd *sandbox.Cmd
	// Mode is how it enters: "bind" (reflink, copy: a namespace of its
	// own), "create" or "join" (overlay), or "inside" (the caller is in the
	// agent's sandbox already).
	Mode string

	locks []*lock.Lock
	ns    *sandbox.Namespace
}

// Session modes.
const (
	EnterBind   = "bind"
	EnterCreate = "create"
	EnterJoin   = "join"
	EnterInside = "inside" // already in the agent's sandbox
)

// Command prepares argv to run in agent r's sandbox, at dir (a canonical or
// host path), with env as its whole environment. The caller sets the
// command's standard streams and runs it with Session.Run; Close releases
// what a session not run holds.
func Command(s *store.Store, r *Record, dir string, argv, env []string) (*Session, error) {
	if r.State != Ready {
		return nil, notReady(r)
	}
	busy, err := HoldBusy(s, r.Name)
	if err != nil {
		return nil, err
	}
	x := &Session{locks: []*lock.Lock{busy}}
	if InSandbox(s, r) {
		// A session of this agent starting another (ferry run from its
		// shell): the namespace is already the agent's; a new one made
		// here would see the agent's fork through the sealed store,
		// read-only.
		x.Mode = EnterInside
		x.Cmd, err = sandbox.Inside(sandbox.Plan{Dir: dir, Argv: argv, Env: env})
		if err != nil {
			x.Close()
			return nil, err
		}
		x.Cmd.ExtraFiles = append(x.Cmd.ExtraFiles, busy.File())
		return x, nil
	}
	if err := s.CheckWritable(); err != nil {
		x.Close()
		return nil, err
	}
	root, writable, err := s.Seal()
	if err != nil {
		x.Close()
		return nil, err
	}
	plan := sandbox.Plan{Dir: dir, Argv: argv, Env: env, Store: root, Writable: writable,
		Binds: []sandbox.Bind{{Source: r.Worktree, Target: s.MntSrc()}}}
	if r.Backend != fork.NameOverlay {
		plan.Binds = append(plan.Binds, sandbox.Bind{Source: s.Agent(r.Name).Target, Target: s.MntTarget()})
		x.Mode = EnterBind
		x.Cmd, err = sandbox.Command(plan)
		if err != nil {
			x.Close()
			return nil, err
		}
		x.Cmd.ExtraFiles = append(x.Cmd.ExtraFiles, busy.File())
		return x, nil
	}
	if err := x.enterOverlay(s, r, plan); err != nil {
		x.Close()
		return nil, err
	}
	return x, nil
}

// OverlayOf returns the overlay agent r's target is, with resolved paths
// (as the kernel prints them in mountinfo).
func OverlayOf(s *store.Store, r *Record) (sandbox.Overlay, error) {
	b, err := base.Read(s, r.Base)
	if err != nil {
		return sandbox.Overlay{}, failure.Wrap(failure.Refused, err, "remove the agent with `ferry rm` and spawn it again",
			"agent %q's base %s cannot be read: its overlay has no lower layer", r.Name, r.Base)
	}
	dir, err := filepath.EvalSymlinks(s.Agent(r.Name).Dir)
	if err != nil {
		return sandbox.Overlay{}, err
	}
	lower, err := filepath.EvalSymlinks(b.Target)
	if err != nil {
		return sandbox.Overlay{}, failure.Wrap(failure.Refused, err, "remove the agent with `ferry rm` and spawn it again",
			"agent %q's base target %s is missing", r.Name, b.Target)
	}
	mnt, err := filepath.EvalSymlinks(s.MntTarget())
	if err != nil {
		return sandbox.Overlay{}, err
	}
	p := fork.Paths{BaseTarget: lower, AgentDir: dir}
	for _, d := range []string{p.Upper(), p.Work()} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return sandbox.Overlay{}, failure.New(failure.Refused, "remove the agent with `ferry rm --force "+r.Name+"` and spawn it again",
				"overlay agent %q has no %s", r.Name, d)
		}
	}
	return sandbox.Overlay{Lower: lower, Upper: p.Upper(), Work: p.Work(), Target: mnt, Volatile: true}, nil
}

func (x *Session) enterOverlay(s *store.Store, r *Record, plan sandbox.Plan) error {
	ov, err := OverlayOf(s, r)
	if err != nil {
		return err
	}
	plan.Overlays = []sandbox.Overlay{ov}
	agentLock, err := lock.Take(s.Agent(r.Name).Lock)
	if err != nil {
		return err
	}
	// Released once the command runs (or on failure): the mount lock is
	// then held shared by the new process tree.
	x.locks = append(x.locks, agentLock)
	if _, err := Read(s, r.Name); err != nil {
		return failure.Wrap(failure.Refused, err, "list agents with `ferry list`", "agent %q was removed", r.Name)
	}
	mountPath := s.Agent(r.Name).MountLock
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 10*time.Millisecond, time.Second, EnterPatience
	bo.Reset()
	for {
		done, err := x.tryEnter(s, r, plan, ov, mountPath)
		if done || err != nil {
			return err
		}
		wait := bo.NextBackOff()
		if wait == backoff.Stop {
			return x.refuse(r, ov, mountPath)
		}
		time.Sleep(wait)
	}
}

// tryEnter makes one attempt: create, join, or neither (done false).
func (x *Session) tryEnter(s *store.Store, r *Record, plan sandbox.Plan, ov sandbox.Overlay, mountPath string) (bool, error) {
	ml, err := lock.TryTake(mountPath)
	if err == nil {
		if len(sandbox.OverlayUsers(ov.Upper, ov.Work)) > 0 {
			ml.Release()
			return false, nil // mounted by a process that no longer holds the lock
		}
		if err := trustUpper(s, r, ov); err != nil {
			ml.Release()
			return true, err
		}
		cmd, err := sandbox.Command(plan)
		if err != nil {
			ml.Release()
			return true, err
		}
		x.Mode, x.Cmd = EnterCreate, cmd
		x.locks = append(x.locks, ml)
		cmd.ExtraFiles = append(cmd.ExtraFiles, x.locks[0].File(), ml.File())
		cmd.OnStart = func(pid int) error {
			user, mnt := cmd.Namespaces()
			if err := recordNamespace(s, r.Name, pid, user, mnt, ov); err != nil {
				return err
			}
			if err := ml.Downgrade(); err != nil {
				return fmt.Errorf("share %s: %w", mountPath, err)
			}
			x.releaseAgentLock()
			return nil
		}
		return true, nil
	}
	if err != lock.ErrBusy {
		return true, err
	}
	ns, ok := liveNamespace(s, r.Name, ov)
	if !ok {
		return false, nil
	}
	ml, err = lock.TryShared(mountPath)
	if err != nil {
		ns.User.Close()
		ns.Mount.Close()
		if err == lock.ErrBusy {
			return false, nil
		}
		return true, err
	}
	plan.Join = ns
	cmd, err := sandbox.Command(plan)
	if err != nil {
		ns.User.Close()
		ns.Mount.Close()
		ml.Release()
		return true, err
	}
	x.Mode, x.Cmd, x.ns = EnterJoin, cmd, ns
	x.locks = append(x.locks, ml)
	cmd.ExtraFiles = append(cmd.ExtraFiles, x.locks[0].File(), ml.File())
	cmd.OnStart = func(int) error {
		x.releaseAgentLock()
		return nil
	}
	return true, nil
}

// Agent overlays are mounted volatile: without it, the last process of an
// agent's namespace would wait, as it exits, for the kernel to sync the whole
// filesystem of the upper dir (with other agents' builds writing, hundreds
// of milliseconds on every cargo call that ends a namespace). The price is
// that the kernel never flushes the upper for us, so after a crash it may
// hold torn files with fresh mtimes, which Cargo would trust. The kernel
// marks a volatile upper (work/work/incompat/volatile) and refuses to mount
// it again; before mounting, trustUpper clears the mark when ns.json shows
// the upper was last mounted in this boot (the page cache still holds
// everything written), and otherwise empties the upper: the agent's target
// is then the base's again, exactly as spawn left it, and Cargo rebuilds
// what the worktree changed since.

// bootID names this boot of the kernel.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// trustUpper readies an overlay agent's layers for a new mount; the caller
// holds the agent lock and mount.lock exclusively, and nothing has the
// overlay mounted.
func trustUpper(s *store.Store, r *Record, ov sandbox.Overlay) error {
	if _, err := os.Lstat(ov.VolatileMarker()); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if rec, err := ReadNS(s, r.Name); err == nil && rec.Boot != "" && rec.Boot == bootID() {
		// Same boot: the overlay recreates work/work on mount anyway.
		inner := filepath.Join(ov.Work, "work") // overlayfs's own layout: not a store path
		if err := fork.RemoveTree(inner); err != nil {
			return fmt.Errorf("clear agent %s's volatile mark: %w", r.Name, err)
		}
		return nil
	}
	if err := fork.ResetOverlay(fork.Paths{BaseTarget: ov.Lower, AgentDir: filepath.Dir(ov.Upper)}); err != nil {
		return fmt.Errorf("agent %s's overlay was last mounted before a reboot, so its upper may hold unflushed writes: %w", r.Name, err)
	}
	return nil
}

// recordNamespace writes ns.json for the namespace pid was started in.
func recordNamespace(s *store.Store, name string, pid int, user, mnt string, ov sandbox.Overlay) error {
	if user == "" || mnt == "" {
		return fmt.Errorf("record agent %s's namespace: the sandbox did not name it", name)
	}
	return atomicfile.ReplaceJSON(s.Agent(name).NS, &NSRecord{
		Pid: pid, User: user, Mount: mnt, Upper: ov.Upper, Work: ov.Work, Boot: bootID(), Created: time.Now().UTC(),
	}, 0o644)
}

// ReadNS returns an overlay agent's ns.json.
func ReadNS(s *store.Store, name string) (*NSRecord, error) {
	var n NSRecord
	if err := atomicfile.ReadJSON(s.Agent(name).NS, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// liveNamespace finds a process in the namespace ns.json records that shows
// the agent's overlay on the canonical target, and opens its namespaces.
// The descriptors keep the namespaces alive even if that process exits.
func liveNamespace(s *store.Store, name string, ov sandbox.Overlay) (*sandbox.Namespace, bool) {
	rec, err := ReadNS(s, name)
	if err != nil || rec.Upper != ov.Upper {
		return nil, false
	}
	for _, pid := range sandbox.InNamespace(rec.Mount) {
		ns, err := openNamespace(pid, rec)
		if err != nil {
			continue
		}
		mounts, err := sandbox.ReadMountinfo(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if m := sandbox.TopMount(mounts, ov.Target); err != nil || m == nil || !m.IsOverlay(ov.Upper, ov.Work) {
			ns.User.Close()
			ns.Mount.Close()
			continue
		}
		return ns, true
	}
	return nil, false
}

// openNamespace opens pid's user and mount namespaces and checks, on the
// opened descriptors, that they are the recorded ones (pid may have exited
// and been reused in between).
func openNamespace(pid int, rec *NSRecord) (*sandbox.Namespace, error) {
	open := func(kind, want string) (*os.File, error) {
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
		if err != nil {
			return nil, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil || kind+":["+strconv.FormatUint(st.Ino, 10)+"]" != want {
			f.Close()
			return nil, errors.New("not the recorded namespace")
		}
		return f, nil
	}
	user, err := open("user", rec.User)
	if err != nil {
		return nil, err
	}
	mnt, err := open("mnt", rec.Mount)
	if err != nil {
		user.Close()
		return nil, err
	}
	return &sandbox.Namespace{User: user, Mount: mnt}, nil
}

// refuse names the processes that keep the overlay from being entered.
func (x *Session) refuse(r *Record, ov sandbox.Overlay, mountPath string) error {
	users := OverlayUsers(mountPath, ov)
	return failure.New(failure.Refused,
		"wait for them to exit, or stop them (a process in a nested namespace, such as unshare or bwrap, keeps the overlay mounted), then try again",
		"agent %q's overlay is still mounted where Ferry cannot join it (waited %s)%s", r.Name, EnterPatience, pidList(users))
}

// OverlayUsers returns the processes that hold mountPath or have the overlay
// mounted, lowest pid first.
func OverlayUsers(mountPath string, ov sandbox.Overlay) []int {
	return otherPids(append(lock.Holders(mountPath), sandbox.OverlayUsers(ov.Upper, ov.Work)...))
}

func (x *Session) releaseAgentLock() {
	if len(x.locks) > 1 {
		x.locks[1].Release()
	}
}

// Run runs the session's command as the caller's foreground work and
// returns its exit status (128+signal if killed). Every lock the session
// holds is released when it returns. When the command was the overlay's
// last user, its namespace, and with it the overlay, goes away as it exits
// (a volatile overlay: nothing waits for a sync).
func (x *Session) Run() (int, error) {
	defer x.Close()
	return x.Cmd.RunAsChild()
}

// Close releases the session's locks and namespace descriptors.
func (x *Session) Close() {
	for i := len(x.locks) - 1; i >= 0; i-- {
		x.locks[i].Release()
	}
	x.locks = nil
	if x.ns != nil {
		x.ns.User.Close()
		x.ns.Mount.Close()
		x.ns = nil
	}
}

// InSandbox reports whether this process already runs in agent r's sandbox:
// the canonical checkout is r's worktree and the canonical target is r's
// fork (its bind mount, or its overlay).
func InSandbox(s *store.Store, r *Record) bool {
	src, err := os.Stat(s.MntSrc())
	if err != nil {
		return false
	}
	wt, err := os.Stat(r.Worktree)
	if err != nil || !os.SameFile(src, wt) {
		return false
	}
	if r.Backend != fork.NameOverlay {
		t, err1 := os.Stat(s.MntTarget())
		h, err2 := os.Stat(s.Agent(r.Name).Target)
		return err1 == nil && err2 == nil && os.SameFile(t, h)
	}
	ov, err := OverlayOf(s, r)
	if err != nil {
		return false
	}
	mounts, err := sandbox.ReadMountinfo("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	m := sandbox.TopMount(mounts, ov.Target)
	return m != nil && m.IsOverlay(ov.Upper, ov.Work)
}
