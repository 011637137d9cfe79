package lifecycle

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

// Agent is one agent's fork as a Lifecycle is handed it: who it is, where
// its files are, and how to find the base it was forked from. Package
// session fills it from the agent's record (session.Fork).
type Agent struct {
	Name  string
	Files store.Agent // its paths in the store (store.Store.Agent)
	// Mount is where the sandbox shows the fork: the store's canonical
	// target mountpoint (store.Store.MntTarget).
	Mount string
	// Base names the base, for messages; BaseTarget returns its target
	// dir. Only a backend whose fork reads the base while it is used (the
	// overlay's lower layer) calls it, so entering a reflink or copy agent
	// reads no base record.
	Base       string
	BaseTarget func() (string, error)
	// Layers returns the private layers a session of slot mounts over
	// $HOME and $CARGO_HOME (none when the agent has none), readied for
	// the mount (ready), or only named, as a joined namespace shows them.
	// Two mounts must never share an upper: each slot is one upper per
	// root, held by SlotLock(slot) while a session has it mounted. A
	// backend whose sessions each make a namespace takes a free slot per
	// session; one whose sessions share one namespace mounts slot 0 in
	// it, once.
	Layers   func(slot int, ready bool) ([]sandbox.Layer, error)
	SlotLock func(slot int) string
}

// layers is a.Layers, or none.
func (a Agent) layers(slot int, ready bool) ([]sandbox.Layer, error) {
	if a.Layers == nil {
		return nil, nil
	}
	return a.Layers(slot, ready)
}

// maxSlots bounds the private layers one agent's concurrent sessions use;
// each concurrent session beyond the first gets a slot (a set of uppers)
// of its own, whose writes the others do not see.
const maxSlots = 64

// takeSlot takes the first free slot of a's private layers, readies it and
// returns its layers with the lock the session's command must hold; none
// when the agent has no layers.
func takeSlot(a Agent) ([]sandbox.Layer, *lock.Lock, error) {
	if none, err := a.layers(0, false); err != nil || len(none) == 0 {
		return nil, nil, err
	}
	for n := 0; n < maxSlots; n++ {
		path := a.SlotLock(n)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, nil, err
		}
		l, err := lock.TryTake(path)
		if err == lock.ErrBusy {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		layers, err := a.Layers(n, true)
		if err != nil {
			l.Release()
			return nil, nil, err
		}
		return layers, l, nil
	}
	return nil, nil, failure.New(failure.Refused, "wait for some of them to finish, then try again",
		"agent %q already runs %d sessions at once, each with private layers of its own", a.Name, maxSlots)
}

// Session modes: how a session's command enters the agent's sandbox.
const (
	EnterBind   = "bind"   // a namespace of its own, the fork bind-mounted (reflink, copy)
	EnterCreate = "create" // a new namespace with the agent's overlay, which later sessions join
	EnterJoin   = "join"   // the live namespace of the agent's overlay
	EnterInside = "inside" // the caller's own: it runs in the agent's sandbox already
	EnterHost   = "host"   // no sandbox: the agent builds at host paths
)

// Session is a command about to run in an agent's sandbox, with the locks
// that admit it. Its process tree inherits busy.lock (every backend) and,
// for an overlay agent, mount.lock, held shared for as long as any of it
// runs: that is how rm and gc see the agent's users.
type Session struct {
	Cmd  *sandbox.Cmd
	Mode string // EnterBind, EnterCreate, EnterJoin or EnterInside

	// locks are released in reverse order: busy.lock first, then, for an
	// overlay session, the agent lock (agentLock, released as soon as the
	// command runs) and mount.lock.
	locks     []*lock.Lock
	agentLock *lock.Lock
	ns        *sandbox.Namespace
}

// newSession starts a session that owns busy, the caller's shared hold on
// the agent's busy.lock.
func newSession(busy *lock.Lock) *Session { return &Session{locks: []*lock.Lock{busy}} }

// busy is the session's hold on busy.lock.
func (x *Session) busy() *lock.Lock { return x.locks[0] }

// Inside prepares plan's command to run in the caller's own namespaces, for
// a caller already in the agent's sandbox (a backend's InSandbox said so):
// a new namespace made there would see the agent's fork through the sealed
// store, read-only. The command inherits busy (the caller's shared hold on
// busy.lock), which the session then owns.
func Inside(plan sandbox.Plan, busy *lock.Lock) (*Session, error) {
	cmd, err := sandbox.Inside(plan)
	if err != nil {
		return nil, err
	}
	x := newSession(busy)
	x.Mode, x.Cmd = EnterInside, cmd
	cmd.ExtraFiles = append(cmd.ExtraFiles, busy.File())
	return x, nil
}

// Host prepares plan's command to run in the caller's namespaces for an
// agent that builds without the namespace sandbox, at host paths: nothing
// is mounted, and the command inherits busy as Inside's does.
func Host(plan sandbox.Plan, busy *lock.Lock) (*Session, error) {
	x, err := Inside(plan, busy)
	if err != nil {
		return nil, err
	}
	x.Mode = EnterHost
	return x, nil
}

// Run runs the session's command as the caller's foreground work and
// returns its exit status (128+signal if killed). Every lock the session
// holds is released when it returns. When the command was an overlay's last
// user, its namespace, and with it the overlay, goes away as it exits (a
// volatile overlay: nothing waits for a sync).
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

func (x *Session) releaseAgentLock() {
	x.agentLock.Release() // safe when nil or released
}

// Bind is the lifecycle of a backend whose fork is a plain directory,
// AgentDir/target (reflink, copy): each session bind-mounts it in a
// namespace of its own, and busy.lock alone counts the fork's users.
// Bind-mount sandboxes are safe to create per call (seed, Sandbox).
type Bind struct{}

// Enter bind-mounts the fork on the canonical target and prepares the
// command in a new namespace, with the private layers of a free slot,
// whose lock the command holds.
func (Bind) Enter(a Agent, plan sandbox.Plan, busy *lock.Lock) (*Session, error) {
	plan.Binds = append(plan.Binds, sandbox.Bind{Source: a.Files.Target, Target: a.Mount})
	layers, slot, err := takeSlot(a)
	if err != nil {
		return nil, err
	}
	plan.Private = layers
	cmd, err := sandbox.Command(plan)
	if err != nil {
		slot.Release()
		return nil, err
	}
	x := newSession(busy)
	x.Mode, x.Cmd = EnterBind, cmd
	cmd.ExtraFiles = append(cmd.ExtraFiles, busy.File())
	if slot != nil {
		x.locks = append(x.locks, slot)
		cmd.ExtraFiles = append(cmd.ExtraFiles, slot.File())
	}
	return x, nil
}

// InSandbox reports whether the canonical target this process sees is the
// fork's directory (its bind mount).
func (Bind) InSandbox(a Agent) bool {
	t, err1 := os.Stat(a.Mount)
	h, err2 := os.Stat(a.Files.Target)
	return err1 == nil && err2 == nil && os.SameFile(t, h)
}

// Users are the processes holding busy.lock.
func (Bind) Users(a Agent) []int { return otherPids(lock.Holders(a.Files.Busy)) }

// Exclude takes busy.lock exclusively, refusing while a process holds it.
func (Bind) Exclude(a Agent) (func(), error) {
	busy, err := excludeBusy(a)
	if err != nil {
		return nil, err
	}
	return busy.Release, nil
}

// HostLink is the fork's directory: a host process reads and runs what
// the agent built there, as the sandbox sees it on the canonical target.
func (Bind) HostLink(a Agent) (string, error) { return a.Files.Target, nil }

// Written is the fork's directory.
func (Bind) Written(a Agent) string { return a.Files.Target }

// Reach is the fork's directory, while it exists.
func (Bind) Reach(a Agent) (string, bool) {
	fi, err := os.Stat(a.Files.Target)
	return a.Files.Target, err == nil && fi.IsDir()
}

// excludeBusy takes a's busy.lock exclusively, which keeps new sessions
// out, and refuses, naming them, while processes run for the agent.
func excludeBusy(a Agent) (*lock.Lock, error) {
	busy, err := lock.TryTake(a.Files.Busy)
	if err == lock.ErrBusy {
		return nil, failure.New(failure.Refused, "stop them (exit the agent's shells and builds) and try again",
			"processes still run for agent %q%s", a.Name, pidList(lock.Holders(a.Files.Busy)))
	}
	return busy, err
}

// otherPids is pids without repeats and without this process, lowest first.
func otherPids(pids []int) []int {
	seen := map[int]bool{os.Getpid(): true}
	var out []int
	for _, pid := range pids {
		if !seen[pid] {
			seen[pid] = true
			out = append(out, pid)
		}
	}
	sort.Ints(out)
	return out
}

// pidList names processes for a refusal: ": pid 12 (cargo), 34 (sh)".
func pidList(pids []int) string {
	if len(pids) == 0 {
		return ""
	}
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); err == nil {
			s[i] += " (" + strings.TrimSpace(string(b)) + ")"
		}
	}
	return ": pid " + strings.Join(s, ", ")
}
