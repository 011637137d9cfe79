// Package gc deletes what nothing references, by reachability.
//
// Roots are the current base and every base an agent's record names
// (including agents still being created). Everything else in bases/ is
// garbage: older bases and partial ones a crashed build left. A base whose
// lock is held (a build in progress) is skipped, never waited for. Agents
// whose spawn died (state "creating", lock free) are rolled back, and agent
// dirs left without a record by an interrupted rm are removed. A base that a
// mounted fork still reads, and an agent dir a mounted fork still writes
// into, are kept: package fork says which (lifecycle.Mounted: an overlay that a
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
// Before it deletes a ready base, gc checks it (base.ExposeSharedWrites):
// when a file of it was written from outside Ferry's sandboxes, the
// deletion would move the change time of that inode, which other bases
// may link, into a link window, and their checks would pass the write. So
// then every other base is checked first, and each that shows the write is
// made partial (Result.Exposed).
//
// gc never runs `git worktree prune`, which would also drop the user's own
// worktrees whose directories are temporarily missing: it unregisters only
// the base checkouts and agent worktrees it deletes.
//
// # Reaping
//
// Before it marks, gc reaps abandoned agents that a hook of an agent tool
// created (agent.Record.Tool set). An agent made by `ferry spawn` is a
// person's and is never reaped. A hook-created agent is abandoned when every
// rule holds, and kept, with every rule it fails named (Verdict), when one
// does not:
//
//   - clean: no uncommitted changes, no untracked files, no rebase, merge,
//     cherry-pick, revert or bisect under way. The entries Ferry itself
//     put in the worktree (the Cargo.lock spawn placed, while unchanged) do
//     not count (agent.WorktreeWork).
//   - no new commits: HEAD is on the agent's branch and the branch still
//     at the start commit.
//   - no commits only its worktree reaches: nothing reachable from its
//     HEAD, its HEAD's and branch's reflogs (a commit reset away) or its
//     per-worktree refs is unreachable from every branch but its own, tag
//     and remote. Those refs go with the worktree.
//   - no ignored files beyond build output: an ignored path counts as build
//     output only inside a directory holding the CACHEDIR.TAG Cargo writes
//     into every target dir it makes; anything else ignored (.env, notes,
//     node_modules) is data someone may want.
//   - idle: no process holds busy.lock, uses its overlay, is entering it
//     (the agent lock), or has its working directory in the worktree.
//   - not `git worktree lock`ed (by its tool, or anyone).
//   - quiet: no sign of life for Options.ReapAfter ([gc] reap-after,
//     a day unless set): not the spawn, nor a change in the worktree, its git dir
//     (index, HEAD, reflogs) or the top of its fork (see lastSign).
//
// The worktree must be there to be judged: a missing one (deleted, or on a
// disk unmounted for now) keeps the agent, for `ferry rm` to decide.
//
// An adopted agent (agent.Adopt: a worktree its tool made) is judged
// otherwise: its worktree and branch are the tool's, so gc never removes
// them, and releases the agent's fork once the tool has removed the
// worktree (gone, and no longer listed by git).
//
// Why a quiet time: an agent tool's session cannot be told from an
// abandoned one by the worktree alone. Claude Code, configured with a
// WorktreeCreate hook, asks the hook for a worktree for `claude --worktree`,
// for a subagent with `isolation: worktree` and for its EnterWorktree tool,
// and calls WorktreeRemove when the session or subagent ends without
// changes; its own process holds no busy.lock, its Bash tool calls run one
// at a time and need not go through Ferry, and between them (a long think,
// a permission prompt waiting overnight, a subagent that only reads) a live
// agent's worktree is clean, idle and unlocked. The session id is no help:
// nothing outside Claude Code says whether a session is still open. What
// gc reaps is what the tool fails to remove (its WorktreeRemove is skipped
// when a session is killed, and in known cases not called at all), so gc is
// a backstop, and a late backstop costs only the fork's disk while an early
// one pulls a worktree from under a live session. Hence a day without any
// sign of life, on top of the rules; Claude Code's own sweep of leftover
// agent worktrees waits far longer (cleanupPeriodDays, 30 days by default).
// `[gc] reap-after` in ferry.toml, FERRY_REAP_AFTER or `ferry gc
// --reap-after` sets another time (0 for an ephemeral machine).
//
// Each rule is checked twice: once to report it (all a dry run does), and
// again by agent.Reap under the agent's lock with new sessions held out,
// just before the removal, which goes the way `ferry rm` goes (worktree,
// fork, the branch while unchanged). A rule that cannot be checked keeps
// the agent.
package gc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/lifecycle"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/platform"
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
	Reaped        []string `json:"reaped"`         // abandoned hook-created agents removed
	Leftovers     []string `json:"leftovers"`      // agent dirs without a record, removed
	SweptLocks    []string `json:"swept_locks"`    // ids whose bases/<id>.lock had no base dir, removed
	// Exposed lists the ready bases made partial before a deletion: they
	// share a file written outside Ferry's sandboxes with a base gc
	// deleted, which would have hidden the write (base.ExposeSharedWrites).
	Exposed []string `json:"exposed"`
	// HookAgents is every hook-created agent, reaped or kept, and why.
	HookAgents []Verdict `json:"hook_agents"`
	// Damaged lists the records that cannot be read (an agent's
	// agent.json, current): while one is damaged no base is deleted,
	// since it may be the one that record names.
	Damaged []string `json:"damaged"`
}

// Options tune a pass.
type Options struct {
	DryRun bool // report, change nothing
	// ReapAfter is how long a hook-created agent must show no sign of life
	// to be reaped, taken as given (0: reap as soon as the other rules
	// hold); `ferry gc` passes config.Settings.ReapAfter.
	ReapAfter time.Duration
	// Now is the clock the quiet time is measured by (nil: time.Now).
	Now func() time.Time
}

// Run collects the store, reaping after config.DefaultReapAfter.
func Run(repo *git.Repo, s *store.Store, dry bool) (*Result, error) {
	return RunWith(repo, s, Options{DryRun: dry, ReapAfter: config.DefaultReapAfter})
}

// RunWith collects the store. It takes the store lock, then try-locks agents
// and bases (the lock order of package lock).
func RunWith(repo *git.Repo, s *store.Store, o Options) (*Result, error) {
	dry := o.DryRun
	res := &Result{DryRun: dry, Bases: []string{}, Kept: []string{}, SkippedLocked: []string{},
		SkippedInUse: []string{}, Agents: []string{}, Reaped: []string{}, Leftovers: []string{}, SweptLocks: []string{},
		Exposed: []string{}, HookAgents: []Verdict{}, Damaged: []string{}}
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

	agents, damaged, err := agent.Scan(s)
	if err != nil {
		return nil, err
	}
	for _, d := range damaged {
		res.Damaged = append(res.Damaged, d.Path)
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	reap := &reaper{repo: repo, s: s, after: o.ReapAfter, now: now}
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
			if a.Tool != "" {
				res.HookAgents = append(res.HookAgents, Verdict{Name: a.Name, Tool: a.Tool, Session: a.Session,
					Kept: []Reason{{KeptCreating, "its spawn is still running"}}})
			}
		} else if a.Tool != "" {
			v, err := reap.consider(a, agents, dry)
			if err != nil {
				return nil, err
			}
			res.HookAgents = append(res.HookAgents, v)
			if v.Reaped {
				// Reaped first, so that its base is collected in this pass.
				res.Reaped = append(res.Reaped, a.Name)
				continue
			}
		}
		roots[a.Base] = true
	}
	cur, err := s.Current()
	if d := failure.AsDamaged(err); d != nil {
		res.Damaged = append(res.Damaged, d.Path)
	} else if err != nil {
		return nil, err
	}
	if cur != "" {
		roots[cur] = true
	}
	mounted := lifecycle.ScanMounted()
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
		if roots[id] || len(res.Damaged) > 0 {
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
		exposed, err := base.ExposeSharedWrites(s, id)
		res.Exposed = append(res.Exposed, exposed...)
		if err != nil {
			bl.Release()
			return nil, err
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
	if !dry {
		// The link windows of deleted bases, once no ready base needs
		// them (package base, links.go).
		if err := base.CompactLinkWindows(s); err != nil {
			return nil, err
		}
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
func removeLeftovers(s *store.Store, agents []*agent.Record, mounted lifecycle.Mounted, dry bool, res *Result) error {
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
			if err := platform.RemoveTree(dir); err != nil {
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
	// RemoveTree: a killed layered refresh leaves an overlay work dir
	// holding a directory without permissions. In a link window: its
	// files may be inodes other bases hold (a layered refresh's).
	return base.Linking(s, id, func() error { return platform.RemoveTree(dir) })
}
