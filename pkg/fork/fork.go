// Package fork gives every agent its own copy of a base's target dir.
//
// A base is immutable (seed invariant 2) and each agent owns its build state
// (invariant 3), so an agent's Cargo must never write through to the base.
// Every backend therefore gives the agent new inodes for what it writes:
// reflink clones each file with FICLONE (copy-on-write, cost grows with the
// number of files, not their bytes), copy duplicates the bytes with
// copy_file_range, and overlay mounts the base read-only under the agent's
// own upper dir, where the kernel copies a file up when it is first written
// (cost flat at fork time). There is no hardlink backend and never will be:
// Cargo rewrites fingerprint files with File::create, which truncates the
// existing inode, so a hardlinked fork would let an agent's rebuild modify
// the base.
//
// Every backend promises the same, and one conformance suite (package
// forktest) checks each registered backend (registry.go), reading the
// fork where the sandbox would mount it (the target dir, or the overlay
// mounted in a user and mount namespace):
//
//   - The fork is the base's tree: regular files with the same bytes and
//     permission bits, directories, and symlinks as links (same text, never
//     followed). Files that are hard links of each other inside the base are
//     hard links of each other inside the fork, never of the base.
//   - Every mtime is preserved to the nanosecond, directories' included:
//     Cargo compares mtimes to decide freshness, so a fork whose times moved
//     would rebuild (or, worse, look fresh when it is not). A directory's
//     times are set after its children are made.
//   - Writes in the fork (truncating, appending, chmod, touch, removing,
//     creating) never change the base, and the fork keeps them.
//   - A fork is finished or absent. It is built in a temporary sibling of the
//     target (AgentDir/.target.tmp-*) and renamed into place last; on error
//     the temporary dir is removed. An existing target is an error
//     (failure.Refused, fs.ErrExist), never merged into; so is a missing base
//     or agent dir (fs.ErrNotExist), and a failed fork leaves the agent dir
//     as it was.
//   - A base target holding anything but files, directories and symlinks
//     (a socket, a fifo, a device) is refused with the path named: Cargo
//     never makes one, so something else wrote into the base.
//   - The walk streams one directory at a time and never holds file
//     contents, so memory does not grow with the size of the target.
//   - PrivateBytes is what the fork does not share with the base.
//
// The overlay backend keeps these promises as seen through its mount, with
// these differences, which the suite checks as such:
//
//   - Fork makes AgentDir/upper (with the base target's mode and times, as
//     the root of the view) and AgentDir/work, both empty, and no
//     AgentDir/target: the tree exists only where the overlay is mounted.
//     Stats counts the one root dir. Fork refuses when upper/, work/ or
//     target/ exists, and refuses (failure.Refused) a base or agent dir whose
//     path holds , : or \, which overlayfs's mount options cannot express.
//   - Until written, a file in the view is the base's own inode, read
//     through the lower layer (overlayfs reports its inode number on the
//     overlay's device), so hard links inside the base are seen as links,
//     as the base has them; mtimes are the base's to the nanosecond, and a
//     copy-up keeps them (a chmod leaves the base's mtime). Writing through
//     one path of a hard-linked file copies up only that path: the link
//     breaks and the other path still shows the base's file. Cargo never
//     writes an uplifted artifact in place (it links it anew), so builds do
//     not see this.
//   - Writes through the view go to upper/ (a removal as a whiteout, a 0/0
//     character device) and never to the base, and outlast the mount.
//   - Nothing is walked, so a special file in the base is not refused at
//     fork time; it shows in the view as the base has it, and changing or
//     removing it through the view changes upper/ only, never the base.
//   - PrivateBytes is upper/'s usage: near zero after the fork, growing by
//     what is written through the view.
//
// Backends are chosen by trying the operation in the store (ReflinkBlocker,
// OverlayBlocker), never by kernel version or filesystem name, and an
// explicit backend that is unavailable is an error, never a silent
// fallback. Spawn (Select) and ferry doctor ask the same probes and apply
// the same rule (Auto, over each backend's Needs), so doctor describes the
// backend spawn will really use, in that backend's words (Cost).
//
// A backend's forks, once made, follow a lifecycle (package lifecycle):
// how a session enters the agent's sandbox, who uses the fork and what rm
// must wait for. That package, not this one, is what the per-call shim
// links; a backend registers its lifecycle there too (lifecycle.For).
package fork

import (
	"fmt"
	"time"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/store"
)

// Paths of one fork.
type Paths struct {
	BaseTarget string // the base's target dir (read-only source; never written)
	AgentDir   string // <store>/agents/<name>; the fork goes to AgentDir/target
}

// Target is where the fork lives: AgentDir/target.
func (p Paths) Target() string { return store.AgentFiles(p.AgentDir).Target }

// Stats describes one fork.
type Stats struct {
	Files    int // regular files, counting every path of a hard-linked file
	Dirs     int // directories, counting the target itself
	Symlinks int
	Bytes    int64 // apparent bytes of regular files forked, once per inode
	Duration time.Duration
}

// TargetSpec says what to mount on the canonical target path in the sandbox:
// a host dir to bind-mount (reflink, copy) or an overlay's layers.
type TargetSpec struct {
	Dir     string
	Overlay *OverlaySpec
}

// OverlaySpec is an overlay backend's layers.
type OverlaySpec struct {
	Lower string // the base's target, read-only
	Upper string
	Work  string
}

// Backend makes and measures forks of a base's target dir. Package agent
// asks its agent's backend (ByName, with the name the agent recorded at
// spawn) and never compares names; how the forks are used once made is
// the backend's lifecycle (lifecycle.For).
type Backend interface {
	// Name is the name an agent records at spawn: "reflink", "overlay" or
	// "copy".
	Name() string
	// Fork makes p.Target() a fork of p.BaseTarget.
	Fork(p Paths) (Stats, error)
	// TargetSpec says what the sandbox mounts as the agent's target.
	TargetSpec(p Paths) TargetSpec
	// PrivateBytes is the disk space the fork uses that the base does not
	// share with it.
	PrivateBytes(p Paths) (int64, error)
	// Needs is what the backend needs of the host and the store (see
	// Auto and the probes).
	Needs() Needs
	// Cost says in a short clause what a fork costs and what it costs the
	// agent's sessions, for diagnostics: "each fork is a full copy of the
	// base's target".
	Cost() string
}

// Backend names.
const (
	NameAuto    = "auto"
	NameReflink = "reflink"
	NameCopy    = "copy"
	NameOverlay = "overlay"
)

// Select returns the backend for name for a store at storeDir.
//
// "auto" is Auto's choice from the probes: reflink when a clone works in
// storeDir, else overlay when an unprivileged overlay mounts with its upper
// there (which needs the namespace sandbox), else copy. The overlay is
// probed only when clones do not work. An explicit backend whose Needs the
// store does not meet (clones for reflink, the overlay for overlay) is a
// failure.Blocked error naming what blocks it; "hardlink" and unknown
// names are failure.Usage. A probe that cannot run is an error, never a
// silent choice.
func Select(name, storeDir string) (Backend, error) {
	if name == NameAuto {
		clones, err := ReflinkBlocker(storeDir)
		if err != nil {
			return nil, fmt.Errorf("choose a fork backend for %s: %w", storeDir, err)
		}
		if clones == nil {
			return Auto(Needs{Clones: true}), nil
		}
		overlay, err := overlayBlocker(storeDir)
		if err != nil {
			return nil, fmt.Errorf("choose a fork backend for %s: %w", storeDir, err)
		}
		// The overlay probe mounts in a new user and mount namespace:
		// where it works, so does the sandbox.
		return Auto(Needs{Overlay: overlay == nil, Sandbox: overlay == nil}), nil
	}
	b, err := ByName(name)
	if err != nil {
		return nil, err
	}
	if b.Needs().Clones {
		blocker, err := ReflinkBlocker(storeDir)
		if err != nil {
			return nil, fmt.Errorf("fork backend %s: %w", name, err)
		}
		if blocker != nil {
			return nil, failure.Wrap(failure.Blocked, blocker, blocker.Remedy,
				"fork backend %s is not available in %s (%s)", name, storeDir, blocker.Value)
		}
	}
	if b.Needs().Overlay {
		blocker, err := overlayBlocker(storeDir)
		if err != nil {
			return nil, fmt.Errorf("fork backend %s: %w", name, err)
		}
		if blocker != nil {
			return nil, failure.Wrap(failure.Blocked, blocker.AsError(), blocker.Remedy,
				"fork backend %s is not available in %s", name, storeDir)
		}
	}
	return b, nil
}

// SelectUnsandboxed is Select for an agent that builds without the
// namespace sandbox: auto picks reflink where the store clones, else copy,
// never probing the overlay; an explicit overlay is refused
// (failure.Refused, invariant 5), because its fork exists only where a
// namespace mounts it.
func SelectUnsandboxed(name, storeDir string) (Backend, error) {
	switch name {
	case NameAuto:
		clones, err := ReflinkBlocker(storeDir)
		if err != nil {
			return nil, fmt.Errorf("choose a fork backend for %s: %w", storeDir, err)
		}
		return Auto(Needs{Clones: clones == nil}), nil
	case NameOverlay:
		return nil, failure.New(failure.Refused,
			"use backend auto, reflink or copy (FERRY_BACKEND, [agent] backend or --backend), or let builds use the namespace sandbox ([sandbox] mode)",
			"fork backend overlay needs the namespace sandbox, and this agent builds without it")
	}
	return Select(name, storeDir)
}

// ByName returns the backend an agent recorded at spawn, without probing.
func ByName(name string) (Backend, error) {
	for _, b := range backends {
		if b.Name() == name {
			return b, nil
		}
	}
	if msg, hint := NameProblem(name); msg != "" {
		return nil, failure.New(failure.Usage, hint, "%q is %s", name, msg)
	}
	return nil, failure.New(failure.Usage, "record the backend Select chose, not auto", "fork backend auto must be resolved with Select")
}
