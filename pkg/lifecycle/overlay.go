package lifecycle

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

// An overlay agent's target exists only inside a namespace that mounted it,
// and two overlays on one upper dir must never be mounted at once (the
// kernel only warns, and the two views diverge). So every process of an
// overlay agent runs in one shared namespace, entered by this protocol,
// which lives here, with the lifecycle of the forks that need it, rather
// than in packages agent and session: they ask the lifecycle how to enter,
// who uses the fork and what removing it must wait for, and never need to
// know that a backend mounts anything.
//
//   - Every process using the overlay holds mount.lock shared through an
//     inherited descriptor (as every process run for any agent holds
//     busy.lock).
//   - Under the agent lock, Enter tries mount.lock exclusively. When it
//     gets it and no readable /proc/<pid>/mountinfo shows an overlay on the
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
//
// Users, Exclude and Mounted count the same processes: those holding
// busy.lock or mount.lock, and those that still see the overlay.

// Overlay is the lifecycle of the overlay backend's forks: the base's
// target as the lower layer under the agent's own upper/, mounted once in
// a namespace that every process of the agent shares (the protocol above).
type Overlay struct{}

// Written is the upper layer, which holds only what the agent's builds
// wrote.
func (Overlay) Written(a Agent) string { return a.Files.Upper }

// EnterPatience bounds how long an overlay agent's Enter waits for an
// overlay that is mounted but cannot be joined to go away.
var EnterPatience = 10 * time.Second

// nsRecord is ns.json: the namespace an overlay agent's processes share.
type nsRecord struct {
	Pid     int       `json:"pid"`   // the process that created it
	User    string    `json:"user"`  // "user:[4026532...]"
	Mount   string    `json:"mount"` // "mnt:[4026532...]"
	Upper   string    `json:"upper"`
	Work    string    `json:"work"`
	Boot    string    `json:"boot"` // the kernel's boot_id when it was mounted
	Created time.Time `json:"created"`
	Lower   string    `json:"lower,omitempty"`
	// Holder is the pid of the process that keeps the namespace alive
	// between sessions (overlay_hold.go). The file's mtime is the latest
	// entry into the namespace.
	Holder int `json:"holder,omitempty"`
	// Layers are the private layers its creator mounted (from its
	// session's $HOME and $CARGO_HOME): every session that joins finds
	// them, whatever its own environment names.
	Layers []sandbox.Layer `json:"layers,omitempty"`
}

// overlayOf returns the overlay agent a's target is, with resolved paths
// (as the kernel prints them in mountinfo).
func overlayOf(a Agent) (sandbox.Overlay, error) {
	target, err := a.BaseTarget()
	if err != nil {
		return sandbox.Overlay{}, failure.Wrap(failure.Refused, err, "remove the agent with `ferry rm` and spawn it again",
			"agent %q's base %s cannot be read: its overlay has no lower layer", a.Name, a.Base)
	}
	dir, err := filepath.EvalSymlinks(a.Files.Dir)
	if err != nil {
		return sandbox.Overlay{}, err
	}
	lower, err := filepath.EvalSymlinks(target)
	if err != nil {
		return sandbox.Overlay{}, failure.Wrap(failure.Refused, err, "remove the agent with `ferry rm` and spawn it again",
			"agent %q's base target %s is missing", a.Name, target)
	}
	mnt, err := filepath.EvalSymlinks(a.Mount)
	if err != nil {
		return sandbox.Overlay{}, err
	}
	files := store.AgentFiles(dir)
	// The view is made where missing (an agent spawned by an older Ferry);
	// inside a sandbox the store is read-only and the namespace is joined,
	// where it exists already.
	view := filepath.Join(dir, filepath.Base(a.Files.View))
	if err := os.Mkdir(view, 0o755); err != nil && !errors.Is(err, fs.ErrExist) && !errors.Is(err, unix.EROFS) {
		return sandbox.Overlay{}, err
	}
	for _, d := range []string{files.Upper, files.Work} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return sandbox.Overlay{}, failure.New(failure.Refused, "remove the agent with `ferry rm --force "+a.Name+"` and spawn it again",
				"overlay agent %q has no %s", a.Name, d)
		}
	}
	return sandbox.Overlay{Lower: lower, Upper: files.Upper, Work: files.Work, Target: mnt, View: view, Volatile: true}, nil
}

// Enter mounts the agent's overlay in a new namespace or joins the live one
// (the protocol above), under the agent lock.
func (Overlay) Enter(a Agent, plan sandbox.Plan, busy *lock.Lock) (*Session, error) {
	ov, err := overlayOf(a)
	if err != nil {
		return nil, err
	}
	plan.Overlays = []sandbox.Overlay{ov}
	agentLock, err := lock.Take(a.Files.Lock)
	if err != nil {
		return nil, err
	}
	x := newSession(busy)
	// Released once the command runs (or on failure): the mount lock is
	// then held shared by the new process tree.
	x.agentLock = agentLock
	x.locks = append(x.locks, agentLock)
	fail := func(err error) (*Session, error) {
		x.locks = x.locks[1:] // busy stays the caller's on failure
		x.Close()
		return nil, err
	}
	// rm removes the record first, under the agent lock: a process that
	// waited for the lock finds no agent, never a fork half removed.
	if _, err := os.Stat(a.Files.Record); err != nil {
		return fail(failure.Wrap(failure.Refused, err, "list agents with `ferry list`", "agent %q was removed", a.Name))
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 10*time.Millisecond, time.Second, EnterPatience
	bo.Reset()
	for {
		done, err := x.tryEnter(a, plan, ov)
		if err != nil {
			return fail(err)
		}
		if done {
			return x, nil
		}
		wait := bo.NextBackOff()
		if wait == backoff.Stop {
			return fail(refuseEntry(a, ov))
		}
		time.Sleep(wait)
	}
}

// tryEnter makes one attempt: create, join, or neither (done false).
func (x *Session) tryEnter(a Agent, plan sandbox.Plan, ov sandbox.Overlay) (bool, error) {
	mountPath := a.Files.MountLock
	ml, err := lock.TryTake(mountPath)
	if err == nil {
		if len(sandbox.OverlayUsers(ov.Upper, ov.Work)) > 0 {
			ml.Release()
			return false, nil // mounted by a process that no longer holds the lock
		}
		if err := trustUpper(a, ov); err != nil {
			ml.Release()
			return true, err
		}
		// The namespace mounts the private layers once, for every
		// session that joins it: slot 0, readied under mount.lock.
		if plan.Private, err = a.layers(0, true); err != nil {
			ml.Release()
			return true, err
		}
		plan.Hold = hold(a)
		cmd, err := sandbox.Command(plan)
		if err != nil {
			ml.Release()
			return true, err
		}
		x.Mode, x.Cmd = EnterCreate, cmd
		x.locks = append(x.locks, ml)
		cmd.ExtraFiles = append(cmd.ExtraFiles, x.busy().File(), ml.File()) // as hold(a) names them
		cmd.OnStart = func(pid int) error {
			user, mnt := cmd.Namespaces()
			holder := cmd.HolderPid()
			err := recordNamespace(a, pid, user, mnt, ov, holder, cmd.Layers())
			if err == nil && holder != 0 {
				err = pointHostTarget(a, viewThrough(holder, ov.View))
			}
			if err != nil {
				if holder != 0 {
					syscall.Kill(holder, syscall.SIGKILL)
				}
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
	ns, ok := liveNamespace(a, ov)
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
	// The namespace shows the layers its creator mounted.
	plan.Private = nil
	if rec, err := readNS(a); err == nil {
		plan.Private = rec.Layers
	}
	cmd, err := sandbox.Command(plan)
	if err != nil {
		ns.User.Close()
		ns.Mount.Close()
		ml.Release()
		return true, err
	}
	// The holder counts idleness from the latest entry: unmarked, it
	// could end the namespace under this one. (A sealed store is seen
	// from inside a sandbox, whose entries its own holder counts.)
	now := time.Now()
	if err := os.Chtimes(a.Files.NS, now, now); err != nil && !errors.Is(err, unix.EROFS) {
		ns.User.Close()
		ns.Mount.Close()
		ml.Release()
		return true, fmt.Errorf("mark the agent's namespace in use: %w", err)
	}
	x.Mode, x.Cmd, x.ns = EnterJoin, cmd, ns
	x.locks = append(x.locks, ml)
	cmd.ExtraFiles = append(cmd.ExtraFiles, x.busy().File(), ml.File())
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

// trustUpper readies an overlay agent's layers for a new mount; the caller
// holds the agent lock and mount.lock exclusively, and nothing has the
// overlay mounted.
func trustUpper(a Agent, ov sandbox.Overlay) error {
	if _, err := os.Lstat(ov.VolatileMarker()); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if rec, err := readNS(a); err == nil && rec.Boot != "" && rec.Boot == platform.BootID() {
		// Same boot: the overlay recreates work/work on mount anyway.
		inner := filepath.Join(ov.Work, "work") // overlayfs's own layout: not a store path
		if err := platform.RemoveTree(inner); err != nil {
			return fmt.Errorf("clear agent %s's volatile mark: %w", a.Name, err)
		}
		return nil
	}
	if err := ResetOverlay(ov.Lower, filepath.Dir(ov.Upper)); err != nil {
		return fmt.Errorf("agent %s's overlay was last mounted before a reboot, so its upper may hold unflushed writes: %w", a.Name, err)
	}
	return nil
}

// recordNamespace writes ns.json for the namespace pid was started in.
func recordNamespace(a Agent, pid int, user, mnt string, ov sandbox.Overlay, holder int, layers []sandbox.Layer) error {
	if user == "" || mnt == "" {
		return fmt.Errorf("record agent %s's namespace: the sandbox did not name it", a.Name)
	}
	return atomicfile.ReplaceJSON(a.Files.NS, &nsRecord{
		Pid: pid, User: user, Mount: mnt, Upper: ov.Upper, Work: ov.Work, Boot: platform.BootID(), Created: time.Now().UTC(),
		Lower: ov.Lower, Holder: holder, Layers: layers,
	}, 0o644)
}

// readNS returns an overlay agent's ns.json.
func readNS(a Agent) (*nsRecord, error) {
	var n nsRecord
	if err := atomicfile.ReadJSON(a.Files.NS, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// liveNamespace finds a process in the namespace ns.json records that shows
// the agent's overlay on the canonical target, and opens its namespaces.
// The descriptors keep the namespaces alive even if that process exits.
func liveNamespace(a Agent, ov sandbox.Overlay) (*sandbox.Namespace, bool) {
	rec, err := readNS(a)
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
func openNamespace(pid int, rec *nsRecord) (*sandbox.Namespace, error) {
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

// refuseEntry names the processes that keep the overlay from being entered.
func refuseEntry(a Agent, ov sandbox.Overlay) error {
	return failure.New(failure.Refused,
		"wait for them to exit, or stop them (a process in a nested namespace, such as unshare or bwrap, keeps the overlay mounted), then try again",
		"agent %q's overlay is still mounted where Ferry cannot join it (waited %s)%s", a.Name, EnterPatience, pidList(mountUsers(a.Files.MountLock, ov.Upper, ov.Work)))
}

// mountUsers returns the processes that hold mountPath or see an overlay
// on upper or work, lowest pid first.
func mountUsers(mountPath, upper, work string) []int {
	return otherPids(append(lock.Holders(mountPath), sandbox.OverlayUsers(upper, work)...))
}

// InSandbox reports whether the canonical target this process sees is the
// agent's overlay.
func (Overlay) InSandbox(a Agent) bool {
	ov, err := overlayOf(a)
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

// Users are the processes holding busy.lock or mount.lock, and those that
// see the agent's overlay (in a nested namespace, without either lock).
// Best effort: only processes this one may inspect are seen.
func (Overlay) Users(a Agent) []int {
	dir := a.Files.Dir
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		dir = d // as the kernel prints it in mountinfo
	}
	files := store.AgentFiles(dir)
	pids := otherPids(append(lock.Holders(a.Files.Busy), mountUsers(a.Files.MountLock, files.Upper, files.Work)...))
	if h := holder(a); h != 0 {
		pids = slices.DeleteFunc(pids, func(p int) bool { return p == h })
	}
	return pids
}

// Exclude takes busy.lock and mount.lock exclusively, which keeps new
// sessions and new mounts out, and refuses while a process still uses the
// overlay: one in a nested namespace may see it without holding either.
func (b Overlay) Exclude(a Agent) (func(), error) {
	busy, err := excludeBusy(a)
	if err != nil {
		return nil, err
	}
	// No session runs and none can start: the holder alone keeps the
	// namespace, and goes.
	if err := endHolder(a); err != nil {
		busy.Release()
		return nil, err
	}
	// A process on its way out (a session's last one, a holder whose idle
	// time ran out as it was signalled) holds the lock or the mount for a
	// moment longer: look again for up to ExcludePatience.
	deadline := time.Now().Add(ExcludePatience)
	for {
		ml, err := lock.TryTake(a.Files.MountLock)
		if err != nil && err != lock.ErrBusy {
			busy.Release()
			return nil, err
		}
		pids := b.Users(a)
		if err == nil && len(pids) == 0 {
			return func() {
				ml.Release()
				busy.Release()
			}, nil
		}
		if err == nil {
			ml.Release()
		}
		if time.Now().After(deadline) {
			busy.Release()
			return nil, failure.New(failure.Refused, "stop them (exit the agent's shells and builds, and namespaces made inside them) and try again",
				"processes still use agent %q's overlay%s", a.Name, pidList(pids))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ExcludePatience bounds how long Exclude waits for the processes still
// using an overlay to go before it refuses: long enough for one exiting,
// short enough that a live session is named quickly.
var ExcludePatience = 2 * time.Second

// Mounted is one look at the forks still mounted on this host, in every
// mount namespace this process may inspect: what gc must check before it
// deletes an agent dir that has no record any more, or a base no record
// references. A reflink or copy fork is a plain directory whose users hold
// busy.lock, which rm checks; only an overlay stays in use through a mount
// that can outlive every lock (a process in a namespace nested inside the
// agent's sandbox), and it reads the base's target as its lower layer.
//
// One scan serves a whole gc pass: it reads one mountinfo per mount
// namespace and root (about 15 ms for 480 processes). Processes this one
// may not inspect are not seen, so the answer is a lower bound.
type Mounted struct{ live []sandbox.LiveOverlay }

// ScanMounted scans the host's mounts.
func ScanMounted() Mounted { return Mounted{live: sandbox.LiveOverlays()} }

// AgentDir reports whether a mounted fork still writes into the agent dir
// dir.
func (m Mounted) AgentDir(dir string) bool {
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r // as the kernel prints it
	}
	for _, o := range m.live {
		if store.Within(o.Upper, dir) || store.Within(o.Work, dir) {
			return true
		}
	}
	return false
}

// BaseTarget reports whether a mounted fork still reads the base target
// dir.
func (m Mounted) BaseTarget(dir string) bool { return sandbox.MountedLowerIn(m.live, dir) }

// NewLayers makes dir/upper and dir/work, empty, as an overlay fork's
// layers over a base target whose stat is base: the upper dir is the root
// of the merged view, whose mode and times are then the upper's, so it
// gets the base target's. dir is the caller's own new directory.
func NewLayers(dir string, base *unix.Stat_t) error {
	files := store.AgentFiles(dir)
	for _, d := range []string{files.Upper, files.Work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(files.Upper, os.FileMode(base.Mode&0o777)); err != nil {
		return err
	}
	return platform.SetTimes(files.Upper, base)
}

// ResetOverlay empties the overlay layers of the agent at agentDir, so that
// its view is the base's target (baseTarget) again: the state spawn left it
// in. New empty layers are made beside the old ones and swapped in
// (RENAME_EXCHANGE), each swap atomic, so a crash leaves every layer
// either old or new and a later reset finishes the job. The caller ensures
// nothing has the overlay mounted.
func ResetOverlay(baseTarget, agentDir string) error {
	var st unix.Stat_t
	if err := unix.Stat(baseTarget, &st); err != nil {
		return fmt.Errorf("reset the overlay of %s: %w", agentDir, &os.PathError{Op: "stat", Path: baseTarget, Err: err})
	}
	tmp, err := os.MkdirTemp(agentDir, ".reset.tmp-*")
	if err != nil {
		return err
	}
	defer platform.RemoveTree(tmp)
	if err := NewLayers(tmp, &st); err != nil {
		return fmt.Errorf("reset the overlay of %s: %w", agentDir, err)
	}
	fresh, old := store.AgentFiles(tmp), store.AgentFiles(agentDir)
	for _, pair := range [][2]string{{fresh.Work, old.Work}, {fresh.Upper, old.Upper}} {
		err := platform.Exchange(pair[0], pair[1])
		if errors.Is(err, unix.ENOENT) {
			err = os.Rename(pair[0], pair[1]) // a layer an earlier reset left missing
		}
		if err != nil {
			return fmt.Errorf("reset the overlay of %s: %w", agentDir, err)
		}
	}
	return nil
}
