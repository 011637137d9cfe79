// Package lifecycle is what an agent's fork is once made: how a session
// enters the agent's sandbox with it, whether the caller is in it already,
// which processes count as its users, what removing it must hold and
// check, and where a process outside any sandbox finds it. Package fork
// makes forks; this package is what the per-call shim needs of them, so
// the shim links it and never the code that makes, folds or measures a
// fork.
//
// Each fork backend's agents follow one Lifecycle, named by the backend
// (For, from the name an agent records at spawn; the table below is the
// one place that maps a backend to it). Package agent and package session
// ask it and never compare backend names. The reason is the overlay: its
// fork exists only inside a namespace every process of the agent shares,
// so entering it is a protocol (mount.lock, ns.json, a scan of every
// mountinfo, a volatile upper checked against the boot, backoff and
// refusal; see overlay.go), its users include processes that hold no lock
// but still see the mount, and removing it must wait for them. Reflink
// and copy forks are plain directories, bind-mounted per call, whose users
// are the holders of busy.lock (Bind).
package lifecycle

import (
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/sandbox"
)

// Lifecycle is what the agent lifecycle needs from a backend once the fork
// exists: how a session enters the agent's sandbox, whether the caller is
// in it already, who uses the fork, and what removing it must wait for.
// Reflink and copy forks are directories bind-mounted per call (Bind); the
// overlay's is a mount that every process of the agent shares, entered by
// the protocol in overlay.go (Overlay).
type Lifecycle interface {
	// Enter prepares plan's command in a's sandbox: plan holds the
	// worktree's bind mount, the sealed store and the command, and Enter
	// adds the fork (a bind mount or the overlay), takes what admits the
	// session and hands it to the command. busy is the caller's shared
	// hold on a's busy.lock: the session owns it once Enter succeeds, and
	// the caller still does when Enter fails.
	Enter(a Agent, plan sandbox.Plan, busy *lock.Lock) (*Session, error)
	// InSandbox reports whether the canonical target this process sees
	// is a's fork. (The caller checks the canonical checkout.)
	InSandbox(a Agent) bool
	// Users are the processes that use a's fork (holders of busy.lock,
	// and whatever else the backend counts), lowest pid first, without
	// this process. Best effort: for naming processes and for ferry list.
	Users(a Agent) []int
	// Exclude keeps new sessions out of a's fork and refuses
	// (failure.Refused, naming them) while processes still use it: what rm
	// must hold before it removes an agent. release lets sessions in
	// again; it is safe to call more than once.
	Exclude(a Agent) (release func(), err error)
	// HostLink readies and returns what the link at the root of a's
	// worktree names, so that a process outside any sandbox finds the
	// agent's build output at ./target: the fork's directory (reflink,
	// copy), or for an overlay the link Ferry points into its live
	// namespace (made here, pointing at nothing until one lives).
	HostLink(a Agent) (string, error)
	// Reach returns the path through which a process outside any sandbox
	// reaches a's fork now, and whether it does: always for a directory
	// fork, only while a namespace lives for an overlay.
	Reach(a Agent) (string, bool)
	// Written is the host directory holding what a's builds wrote into
	// its fork: the fork's directory, or an overlay's upper layer. It
	// needs no live namespace.
	Written(a Agent) string
}

// lifecycles maps each fork backend (by the name an agent records) to the
// lifecycle of its forks. It is the second half of a backend's
// registration (the first is package fork's registry.go), and fork's
// TestEveryBackendHasALifecycle fails for a backend missing here.
var lifecycles = map[string]Lifecycle{
	"reflink": Bind{},
	"copy":    Bind{},
	"overlay": Overlay{},
}

// For returns the lifecycle of forks made by the backend named backend,
// as an agent recorded it at spawn; a name this package does not know is
// failure.Usage.
func For(backend string) (Lifecycle, error) {
	if l, ok := lifecycles[backend]; ok {
		return l, nil
	}
	return nil, failure.New(failure.Usage, "name a fork backend that this Ferry registers (ferry doctor lists them)",
		"fork backend %q has no lifecycle", backend)
}

// RegisterForTest adds l as the lifecycle of backend's forks, as a new
// backend's line in the table above does, until undo.
func RegisterForTest(backend string, l Lifecycle) (undo func()) {
	saved := lifecycles
	lifecycles = make(map[string]Lifecycle, len(saved)+1)
	for k, v := range saved {
		lifecycles[k] = v
	}
	lifecycles[backend] = l
	return func() { lifecycles = saved }
}
