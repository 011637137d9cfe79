package lifecycle

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

// The overlay's build output, seen from the host. An overlay fork exists
// only inside the agent's namespace, which lives while a process is in it;
// agent tools run each shell command as a process of its own, so after
// `cargo build` the namespace would be gone before `./target/debug/app`
// runs. So the session that creates the namespace also starts a holder in
// it (sandbox.Hold): a process that keeps it alive until it has been idle
// for HoldIdle (no process holds busy.lock, and no session entered since:
// each entry touches ns.json), and through whose /proc/<pid>/root a host
// process reaches the overlay on the canonical target. The agent dir's
// host-target link, which the worktree's target link names, is pointed at
// /proc/<holder>/root<agent dir>/view when the namespace is made: the
// namespace binds its overlay there too (sandbox.Overlay.View), a path no
// other namespace mounts anything on.
//
// The holder is not a user of the agent: it holds mount.lock shared (like
// every process in the namespace, so no second overlay is mounted on the
// upper dir), but not busy.lock, and Users leaves it out, so an agent whose
// only process is its holder is idle for ferry list and gc's reaping. What
// must unmount the overlay ends it: rm (Exclude), and ferry base --rebuild
// of the base it reads (EndHolders). Both send SIGTERM and wait for it to
// go.
//
// When no holder lives, host-target leads to the agent's plain directory
// (store.Agent.Plain): at spawn, and again whenever a command asks where
// the build output is (Reach) and finds the holder gone. A cargo run
// without Ferry's shim (an agent tool whose shells never got it on PATH)
// then builds there, cold and at host paths, as it would in a checkout of
// its own, instead of failing on a link that leads nowhere (Cargo: "failed
// to create directory .../target: Not a directory"); and
// ./target/debug/app is that build's or missing, never the base's output.
// Between a holder's end and the next command that asks, the link still
// names /proc/<pid>/root of a process that is gone: a process that reuses
// the pid, on the host or in another agent's namespace (after a reboot,
// say), shows the agent's view directory empty, since only this agent's
// namespace mounts its fork there. ferry env and ferry list check the
// holder (Reach) before naming the path.
//
// Measured with the fixture workspace on a 2-core machine, as root and as
// an ordinary user: a host process of the same user reads and execs
// through /proc/<holder>/root (the kernel's ptrace read check passes: same
// uid, and the holder's user namespace is owned by that uid).

// HoldIdle is how long an overlay agent's namespace outlives its last
// session. The knob FERRY_TEST_OVERLAY_HOLD (a Go duration) changes it in
// tests; 0 starts no holder (for tests of namespaces that end with their
// last session).
var HoldIdle = 15 * time.Minute

func holdIdle() time.Duration {
	if d, err := time.ParseDuration(knobs.OverlayHoldValue()); err == nil && d >= 0 {
		return d
	}
	return HoldIdle
}

// hold is the holder a created session asks for: it keeps mount.lock, the
// session's second file (after busy.lock, which it must not hold).
func hold(a Agent) *sandbox.Hold {
	if holdIdle() == 0 {
		return nil
	}
	return &sandbox.Hold{Files: []int{1}, Idle: holdIdle(), Busy: a.Files.Busy, Touch: a.Files.NS, Lock: a.Files.MountLock}
}

// HostLink makes the agent dir's host-target link, leading to its plain
// directory until a namespace lives, and returns it.
func (Overlay) HostLink(a Agent) (string, error) {
	if _, err := os.Lstat(a.Files.HostTarget); errors.Is(err, fs.ErrNotExist) {
		if err := plainHostTarget(a); err != nil {
			return "", err
		}
	}
	return a.Files.HostTarget, nil
}

// plainHostTarget points host-target at the agent's plain directory,
// making it, unless it leads there already.
func plainHostTarget(a Agent) error {
	if d, err := os.Readlink(a.Files.HostTarget); err == nil && d == a.Files.Plain {
		return nil
	}
	if err := os.MkdirAll(a.Files.Plain, 0o755); err != nil {
		return fmt.Errorf("point agent %s's host target: %w", a.Name, err)
	}
	return pointHostTarget(a, a.Files.Plain)
}

// pointHostTarget replaces the host-target link with one to dest.
func pointHostTarget(a Agent, dest string) error {
	tmp := a.Files.HostTarget + ".tmp-" + strconv.Itoa(os.Getpid())
	os.Remove(tmp)
	if err := os.Symlink(dest, tmp); err != nil {
		return fmt.Errorf("point agent %s's host target: %w", a.Name, err)
	}
	if err := os.Rename(tmp, a.Files.HostTarget); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("point agent %s's host target: %w", a.Name, err)
	}
	return nil
}

// viewThrough is where a host process sees the mount at path (the agent's
// view) in the namespace pid is in.
func viewThrough(pid int, path string) string {
	return "/proc/" + strconv.Itoa(pid) + "/root" + path
}

// holder returns the pid of the live holder of a's namespace, or 0.
func holder(a Agent) int {
	rec, err := readNS(a)
	if err != nil || rec.Holder == 0 || !sandbox.IsHolder(rec.Holder) {
		return 0
	}
	mnt, err := os.Readlink("/proc/" + strconv.Itoa(rec.Holder) + "/ns/mnt")
	if err != nil || mnt != rec.Mount {
		return 0
	}
	return rec.Holder
}

// Reach is the agent's view as the live holder's namespace shows it. With
// no holder alive it points host-target back at the plain directory, if
// no process uses the overlay (mount.lock free: no namespace is being
// made either, whose holder would point it at its view); best effort, so
// a store the caller cannot write keeps the link as it is.
func (Overlay) Reach(a Agent) (string, bool) {
	pid := holder(a)
	if pid == 0 {
		if l, err := lock.TryTake(a.Files.MountLock); err == nil {
			plainHostTarget(a)
			l.Release()
		}
		return "", false
	}
	dir, err := filepath.EvalSymlinks(a.Files.Dir)
	if err != nil {
		return "", false
	}
	return viewThrough(pid, filepath.Join(dir, filepath.Base(a.Files.View))), true
}

// HolderPatience bounds how long ending a holder waits for it to exit.
var HolderPatience = 5 * time.Second

// endHolder ends the holder of a's namespace, if one lives, and waits for
// it to be gone.
//
// A holder that is exiting already (its idle time ran out) has lost its
// command line, so holder no longer names it, but it still holds
// mount.lock and the namespace: while the recorded pid is still in the
// recorded mount namespace, it is waited for too, not signalled.
func endHolder(a Agent) error {
	pid := holder(a)
	if pid == 0 {
		rec, err := readNS(a)
		if err != nil || rec.Holder == 0 {
			return nil
		}
		mnt, err := os.Readlink("/proc/" + strconv.Itoa(rec.Holder) + "/ns/mnt")
		if err != nil || mnt != rec.Mount {
			return nil
		}
		pid = rec.Holder
	} else if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("end agent %s's namespace holder (pid %d): %w", a.Name, pid, err)
	}
	// Gone means a zombie or no process: an exiting process loses its
	// command line before it closes its files and leaves its namespaces.
	deadline := time.Now().Add(HolderPatience)
	for running(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("agent %s's namespace holder (pid %d) did not exit within %s", a.Name, pid, HolderPatience)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// EndHolders ends the holders of the overlay agents under agentsDir whose
// lower layer is inside baseTarget and for which no process runs (none
// holds busy.lock): what ferry base --rebuild does before it discards a
// base that only an idle namespace still reads. Best effort: an agent it
// cannot judge keeps its holder, and the caller's check of the mounts
// refuses then.
func EndHolders(agentsDir, baseTarget string) {
	ents, err := os.ReadDir(agentsDir)
	if err != nil {
		return
	}
	if r, err := filepath.EvalSymlinks(baseTarget); err == nil {
		baseTarget = r // as ns.json records the lower
	}
	for _, e := range ents {
		a := Agent{Name: e.Name(), Files: store.AgentFiles(filepath.Join(agentsDir, e.Name()))}
		rec, err := readNS(a)
		if err != nil || rec.Lower == "" || !store.Within(rec.Lower, baseTarget) {
			continue
		}
		if len(lock.Holders(a.Files.Busy)) > 0 {
			continue
		}
		endHolder(a)
	}
}

// running reports whether pid exists and has not exited (is no zombie).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}
