// Package gc deletes what nothing references, by reachability.
//
// Roots are the current base and every base an agent's record names
// (including agents still being created). Everything else in bases/ is
// garbage: older bases and partial ones a crashed build left. A base whose
// lock is held (a build in progress) is skipped, never waited for. Agents
// whose spawn died (state "creating", lock free) are rolled back, and agent
// dirs left without a record by an interrupted rm are removed. A base that a
// mounted fork still reads, and an agent dir a mounted fork still writes
// into, are kept: package fork says which (fork.Mounted: an overlay that a
// process of a removed overlay agent, in a namespace nested inside its
// sandbox, still has mounted).
//
// Lock files go too, or the store would keep one per base ever built. A
// deleted base's bases/<id>.lock is removed last, after its directory, while
// gc still holds it exclusively: package lock's protocol lets exactly that
// holder delete a lock file, and a builder waiting for the lock then locks
// a new file and finds no base to reuse. Lock files whose base directory
// does not exist (left by Ferry before it removed them, by a builder killed
// before it made the directory, or by a gc killed between the two removals)
// are swept the same way: try-locked, skipped when held (a build is
// starting), removed when free. Only regular files named like a base's lock
// are swept; anything else in bases/ is not Ferry's to delete.
//
// gc never runs `git worktree prune`, which would also drop the user's own
// worktrees whose directories are temporarily missing: it unregisters only
// the base checkouts it deletes.
package gc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/store"
)

// Result is what a pass did (or, dry, would do).
type Result struct {
	DryRun        bool     `json:"dry_run"`
	Bases         []string `json:"bases"`          // deleted
	Kept          []string `json:"kept"`           // current or referenced
	SkippedLocked []string `json:"skipped_locked"` // being built
	SkippedInUse  []string `json:"skipped_in_use"` // still read by a mounted fork (an overlay's lower layer)
	Agents        []string `json:"agents"`         // unfinished spawns rolled back
	Leftovers     []string `json:"leftovers"`      // agent dirs without a record, removed
	SweptLocks    []string `json:"swept_locks"`    // ids whose bases/<id>.lock had no base dir, removed
}

// Run collects the store. It takes the store lock, then try-locks agents and
// bases (the lock order of package lock).
func Run(repo *git.Repo, s *store.Store, dry bool) (*Result, error) {
	res := &Result{DryRun: dry, Bases: []string{}, Kept: []string{}, SkippedLocked: []string{},
		SkippedInUse: []string{}, Agents: []string{}, Leftovers: []string{}, SweptLocks: []string{}}
	if _, err := os.Stat(s.Dir); errors.Is(err, fs.ErrNotExist) {
		return res, nil
	}
	if err := s.CheckWritable(); err != nil {
		return nil, err
	}
	l, err := lock.Take(s.LockPath())
	if err != nil {
		return nil, err
	}
	defer l.Release()

	agents, err := agent.All(s)
	if err != nil {
		return nil, err
	}
	roots := map[string]bool{}
	for _, a := range agents {
		if a.State != agent.Ready {
			al, err := lock.TryTake(s.Agent(a.Name).Lock)
			if err == nil {
				// Its spawner is gone: roll the spawn back.
				if !dry {
					if err := agent.Rollback(repo, s, a); err != nil {
						al.Release()
						return nil, err
					}
				}
				al.Release()
				res.Agents = append(res.Agents, a.Name)
				continue
			}
		}
		roots[a.Base] = true
	}
	cur, err := s.Current()
	if err != nil {
		return nil, err
	}
	if cur != "" {
		roots[cur] = true
	}
	mounted := fork.ScanMounted()
	if err := removeLeftovers(s, agents, mounted, dry, res); err != nil {
		return nil, err
	}

	ents, err := os.ReadDir(s.BasesDir())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		if roots[id] {
			res.Kept = append(res.Kept, id)
			continue
		}
		if mounted.BaseTarget(s.Base(id).Target) {
			res.SkippedInUse = append(res.SkippedInUse, id)
			continue
		}
		bl, err := lock.TryTake(s.BaseLock(id))
		if err == lock.ErrBusy {
			res.SkippedLocked = append(res.SkippedLocked, id)
			continue
		}
		if err != nil {
			return nil, err
		}
		if dry {
			bl.Release()
			res.Bases = append(res.Bases, id)
			continue
		}
		if err := deleteBase(repo, s, id); err != nil {
			bl.Release()
			return nil, err
		}
		// Last, and while held (see the package doc).
		if err := bl.Remove(); err != nil {
			return nil, fmt.Errorf("deleted base %s but not its lock file: %w", id, err)
		}
		res.Bases = append(res.Bases, id)
	}
	if err := sweepLocks(s, dry, res); err != nil {
		return nil, err
	}
	return res, nil
}

// sweepLocks removes the lock files of bases whose directory does not
// exist. The caller holds the store lock; builders do not take it before
// the base lock, so each file is try-locked and the directory checked again
// under its lock (a build may have made it since the listing).
func sweepLocks(s *store.Store, dry bool, res *Result) error {
	ents, err := os.ReadDir(s.BasesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok || !e.Type().IsRegular() || s.BaseLock(id) != filepath.Join(s.BasesDir(), e.Name()) {
			continue
		}
		stale, err := noBaseDir(s, id)
		if err != nil {
			return err
		}
		if !stale {
			continue
		}
		swept, err := sweepLock(s, id, dry)
		if err != nil {
			return err
		}
		if swept {
			res.SweptLocks = append(res.SweptLocks, id)
		}
	}
	return nil
}

// sweepLock removes base id's lock file (dry: only reports it) when it is
// free and, checked again under it, the base has no directory.
func sweepLock(s *store.Store, id string, dry bool) (bool, error) {
	l, err := lock.TryTake(s.BaseLock(id))
	if err == lock.ErrBusy {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	stale, err := noBaseDir(s, id)
	if err != nil || !stale || dry {
		l.Release()
		return stale, err
	}
	return true, l.Remove()
}

// noBaseDir reports whether nothing is at base id's directory path.
func noBaseDir(s *store.Store, id string) (bool, error) {
	_, err := os.Lstat(s.BaseDir(id))
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	return false, err
}

// removeLeftovers removes agent dirs without a record (an rm or a spawn
// interrupted after removing it), unless a mounted fork still writes there.
// The caller holds the store lock, which spawn takes to create a record.
func removeLeftovers(s *store.Store, agents []*agent.Record, mounted fork.Mounted, dry bool, res *Result) error {
	ents, err := os.ReadDir(s.AgentsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, a := range agents {
		known[a.Name] = true
	}
	for _, e := range ents {
		if !e.IsDir() || known[e.Name()] {
			continue
		}
		paths := s.Agent(e.Name())
		dir := paths.Dir
		if _, err := os.Stat(paths.Record); err == nil {
			continue // recorded since the list was read
		}
		if mounted.AgentDir(dir) {
			continue
		}
		if !dry {
			if err := fork.RemoveTree(dir); err != nil {
				return err
			}
		}
		res.Leftovers = append(res.Leftovers, e.Name())
	}
	return nil
}

// deleteBase removes base id: its registered checkout and its directory.
// The base.json marker goes first, so a crash halfway leaves a partial base
// (deleted by the next pass), never a ready base with pieces missing.
func deleteBase(repo *git.Repo, s *store.Store, id string) error {
	dir := s.BaseDir(id)
	if err := os.Remove(s.Base(id).Record); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return err
	}
	if err := repo.WorktreeRemove(s.Base(id).Src); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}
