// Package fork gives every agent its own copy of a base's target dir.
//
// A base is immutable (seed invariant 2) and each agent owns its build state
// (invariant 3), so an agent's Cargo must never write through to the base.
// Every backend therefore makes new inodes: reflink clones each file with
// FICLONE (copy-on-write, cost grows with the number of files, not their
// bytes), copy duplicates the bytes with copy_file_range. There is no
// hardlink backend and never will be: Cargo rewrites fingerprint files with
// File::create, which truncates the existing inode, so a hardlinked fork
// would let an agent's rebuild modify the base.
//
// Every backend promises the same, and one conformance suite checks each:
//
//   - The fork is the base's tree: regular files with the same bytes and
//     permission bits, directories, and symlinks as links (same text, never
//     followed). Files that are hard links of each other inside the base are
//     hard links of each other inside the fork, never of the base.
//   - Every mtime is preserved to the nanosecond, directories' included:
//     Cargo compares mtimes to decide freshness, so a fork whose times moved
//     would rebuild (or, worse, look fresh when it is not). A directory's
//     times are set after its children are made.
//   - A fork is finished or absent. It is built in a temporary sibling of the
//     target (AgentDir/.target.tmp-*) and renamed into place last; on error
//     the temporary dir is removed. An existing target is an error, never
//     merged into.
//   - A base target holding anything but files, directories and symlinks
//     (a socket, a fifo, a device) is refused with the path named: Cargo
//     never makes one, so something else wrote into the base.
//   - The walk streams one directory at a time and never holds file
//     contents, so memory does not grow with the size of the target.
//
// Backends are chosen by trying the operation in the store (CanReflink),
// never by kernel version or filesystem name, and an explicit backend that
// is unavailable is an error, never a silent fallback.
package fork

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/ferrydev/ferry/pkg/failure"
)

// Paths of one fork.
type Paths struct {
	BaseTarget string // the base's target dir (read-only source; never written)
	AgentDir   string // <store>/agents/<name>; the fork goes to AgentDir/target
}

// Target is where the fork lives: AgentDir/target.
func (p Paths) Target() string { return filepath.Join(p.AgentDir, "target") }

// Stats describes one fork.
type Stats struct {
	Files    int // regular files, counting every path of a hard-linked file
	Dirs     int // directories, counting the target itself
	Symlinks int
	Bytes    int64 // apparent bytes of regular files forked, once per inode
	Duration time.Duration
}

// TargetSpec says what to mount on the canonical target path in the sandbox.
type TargetSpec struct {
	Dir string // host dir to bind-mount (reflink, copy); the overlay backend will add its layers
}

// Backend makes and measures forks of a base's target dir.
type Backend interface {
	// Name is the name an agent records at spawn: "reflink" or "copy".
	Name() string
	// Fork makes p.Target() a fork of p.BaseTarget.
	Fork(p Paths) (Stats, error)
	// TargetSpec says what the sandbox mounts as the agent's target.
	TargetSpec(p Paths) TargetSpec
	// PrivateBytes is the disk space the fork uses that the base does not
	// share with it.
	PrivateBytes(p Paths) (int64, error)
}

// Backend names.
const (
	NameAuto    = "auto"
	NameReflink = "reflink"
	NameCopy    = "copy"
	NameOverlay = "overlay"
)

const (
	hintNames   = "use one of auto, reflink, copy"
	hintOverlay = "use auto (reflink where the store can clone files, else copy) or copy"
	hintReflink = "put the store on a filesystem that clones files (XFS made with mkfs.xfs -m reflink=1, or btrfs), " +
		"or use backend copy, or auto to let Ferry choose"
	hintHardlink = "Ferry never forks with hardlinks: Cargo rewrites fingerprint files with File::create, " +
		"truncating the existing inode, so a hardlinked fork would let an agent's rebuild modify the base; " +
		"use reflink (copy-on-write, new inodes), copy, or auto"
)

// Select returns the backend for name for a store at storeDir.
//
// "auto" is reflink when a clone works in storeDir, else copy. An explicit
// "reflink" where a clone does not work is a failure.Blocked error naming the
// filesystem. "overlay" is not available yet (failure.Refused); "hardlink"
// and unknown names are failure.Usage.
func Select(name, storeDir string) (Backend, error) {
	switch name {
	case NameAuto:
		err := probeClone(storeDir)
		if err == nil {
			return Reflink(), nil
		}
		if errors.Is(err, errNoClone) {
			return Copy(), nil
		}
		return nil, fmt.Errorf("choose a fork backend for %s: %w", storeDir, err)
	case NameReflink:
		err := probeClone(storeDir)
		if err == nil {
			return Reflink(), nil
		}
		if errors.Is(err, errNoClone) {
			return nil, failure.Wrap(failure.Blocked, err, hintReflink,
				"fork backend reflink is not available in %s (%s)", storeDir, fsName(storeDir))
		}
		return nil, fmt.Errorf("fork backend reflink: %w", err)
	}
	return ByName(name)
}

// ByName returns the backend an agent recorded at spawn, without probing.
func ByName(name string) (Backend, error) {
	switch name {
	case NameReflink:
		return Reflink(), nil
	case NameCopy:
		return Copy(), nil
	case NameOverlay:
		return nil, failure.New(failure.Refused, hintOverlay, "fork backend overlay is not available yet")
	case "hardlink", "hardlinks", "link":
		return nil, failure.New(failure.Usage, hintHardlink, "%q is not a fork backend", name)
	case NameAuto:
		return nil, failure.New(failure.Usage, "record the backend Select chose, not auto", "fork backend auto must be resolved with Select")
	}
	return nil, failure.New(failure.Usage, hintNames, "%q is not a fork backend", name)
}
