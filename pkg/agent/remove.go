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

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/lifecycle"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/session"
	"github.com/ferrydev/ferry/pkg/store"
)

// Removal is what Remove did.
type Removal struct {
	Name          string `json:"name"`
	Worktree      string `json:"worktree"`
	Branch        string `json:"branch"`
	Base          string `json:"base"` // the base it referenced`
	BranchDeleted bool   `json:"branch_deleted"`
	BranchKept    string `json:"branch_kept,omitempty"`
	BranchCommits int    `json:"branch_commits,omitempty"` // commits the kept branch carries beyond the start
	OrphanRef     string `json:"orphan_ref,omitempty"`     // where --force kept commits no ref reached
	// WorktreeKept is set for an adopted agent removed without its
	// worktree: only what adoption added went.
	WorktreeKept bool `json:"worktree_kept,omitempty"`
	// Damaged is set for an agent whose record could not be read: what
	// Ferry kept of it went, and its worktree (Worktree, when its target
	// link told it) and branch stay.
	Damaged bool `json:"damaged,omitempty"`
}

// RemoveOptions are how Remove removes an agent.
type RemoveOptions struct {
	// Force removes even with uncommitted changes, keeping commits no ref
	// reaches under refs/ferry/orphaned/.
	Force bool
	// Worktree removes an adopted agent's worktree too; the worktree of an
	// agent Ferry spawned always goes.
	Worktree bool
}

// Remove deletes agent name: its worktree, its fork and, when it still
// points at the starting commit and is checked out nowhere else, its branch.
// It refuses while processes run for the agent, when another agent's
// worktree is nested inside (even with force), and, without force, when the
// worktree has uncommitted changes or commits no branch, tag or remote
// reaches. With force such commits are kept under refs/ferry/orphaned/.
//
// An adopted agent's worktree and branch are not Ferry's: without
// o.Worktree only what adoption added goes (the fork, the target link, a
// placed Cargo.lock left unchanged), which loses no work; with it the
// worktree goes as a spawned agent's does, and the branch stays.
func Remove(repo *git.Repo, s *store.Store, name string, o RemoveOptions) (*Removal, error) {
	if err := s.CheckWritable(); err != nil {
		return nil, err
	}
	storeLock, err := lock.Take(s.LockPath())
	if err != nil {
		return nil, err
	}
	defer storeLock.Release()
	return remove(repo, s, name, o, nil)
}

// Reap removes ready agent name the way Remove does without force (the
// worktree, the fork, the branch while unchanged; of an adopted agent only
// what adoption added), once keep finds no
// reason to keep it. keep is asked last, with the agent's lock held, new
// sessions held out and the worktree's status read (w is nil when the
// worktree's directory is gone), so what it checks cannot change before the
// removal; its error is returned as it is and nothing is removed. Every
// refusal of Remove applies too. The caller holds the store lock (gc, for
// its whole pass).
func Reap(repo *git.Repo, s *store.Store, name string, keep func(r *Record, w *Work) error) (*Removal, error) {
	return remove(repo, s, name, RemoveOptions{}, keep)
}

// remove is Remove and Reap under the store lock; keep is nil for Remove.
// Its steps: read the record (a damaged one removed by force alone), take
// the agent's lock (lockForRemoval; an unfinished spawn is rolled back),
// hold new sessions out (the backend's Exclude), refuse a worktree other
// agents' lie in (refuseNested), then undo an adoption (removeAdopted) or
// remove the worktree (removeWorktree) and settle its branch (settleBranch),
// and drop the record last.
func remove(repo *git.Repo, s *store.Store, name string, o RemoveOptions, keep func(*Record, *Work) error) (*Removal, error) {
	r, err := Read(s, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, failure.New(failure.Usage, "list agents with `ferry list`", "no agent named %q", name)
	}
	if failure.AsDamaged(err) != nil && o.Force && keep == nil {
		return removeDamaged(repo, s, name)
	}
	if err != nil {
		return nil, err
	}
	// `ferry rm` (or a hook) run from inside the agent's worktree: git goes
	// on from another worktree once this one is gone.
	if repo, err = repo.Outside(r.Worktree); err != nil {
		return nil, err
	}
	agentLock, err := lockForRemoval(s, r)
	if err != nil {
		return nil, err
	}
	defer agentLock.Release()
	if r.State != Ready {
		if keep != nil {
			return nil, record.NotReady(r)
		}
		// An unfinished spawn whose spawner is gone: roll it back.
		if err := rollback(repo, s, r); err != nil {
			return nil, err
		}
		return &Removal{Name: name, Worktree: r.Worktree, Branch: r.Branch, Base: r.Base}, nil
	}

	// The backend keeps new sessions out while removing (busy.lock held
	// exclusively, and an overlay's mount.lock), and refuses while
	// processes still use the fork.
	b, err := session.Lifecycle(r)
	if err != nil {
		return nil, err
	}
	release, err := b.Exclude(session.Fork(s, r, nil))
	if err != nil {
		return nil, err
	}
	defer release()
	if err := refuseNested(s, r); err != nil {
		return nil, err
	}

	rm := &Removal{Name: name, Worktree: r.Worktree, Branch: r.Branch, Base: r.Base}
	if r.Adopted && o.Worktree && isMainCheckout(repo, r.Worktree) {
		return nil, failure.New(failure.Refused, "remove the agent without --worktree: its checkout stays, as it was before the adoption",
			"agent %q is the repository's main checkout, adopted in place; Ferry does not remove it", name)
	}
	if r.Adopted && !o.Worktree {
		if err := removeAdopted(repo, r, keep); err != nil {
			return nil, err
		}
		rm.WorktreeKept = true
		return rm, dropRecord(s, name, release, agentLock)
	}
	branchHead := revParse(repo, "refs/heads/"+r.Branch)
	elsewhere, err := checkedOutElsewhere(repo, r)
	if err != nil {
		return nil, err
	}
	deleteBranch := branchHead == r.StartCommit && !elsewhere && !r.Adopted
	if err := removeWorktree(repo, r, o.Force, deleteBranch, keep, rm); err != nil {
		return nil, err
	}
	if err := settleBranch(repo, r, branchHead, deleteBranch, rm); err != nil {
		return nil, err
	}
	return rm, dropRecord(s, name, release, agentLock)
}

// lockForRemoval takes agent r's lock, refusing while a process enters its
// overlay or its spawn is under way.
func lockForRemoval(s *store.Store, r *Record) (*lock.Lock, error) {
	agentLock, err := lock.TryTake(s.Agent(r.Name).Lock)
	if err == lock.ErrBusy && r.State == Ready {
		// A process is entering the agent's overlay.
		return nil, failure.New(failure.Refused, "stop the agent's shells and builds and try again",
			"a process is entering agent %q", r.Name)
	}
	if err == lock.ErrBusy {
		return nil, failure.New(failure.Refused, "wait for the spawn to finish", "agent %q is being created", r.Name)
	}
	return agentLock, err
}

// refuseNested refuses to remove agent r while another agent's worktree
// lies inside r's.
func refuseNested(s *store.Store, r *Record) error {
	all, err := All(s)
	if err != nil {
		return err
	}
	for _, other := range all {
		if other.Name != r.Name && store.Within(other.Worktree, r.Worktree) {
			return failure.New(failure.Refused, fmt.Sprintf("remove agent %q first", other.Name),
				"agent %q's worktree %s is nested inside %s", other.Name, other.Worktree, r.Worktree)
		}
	}
	return nil
}

// removeAdopted undoes the adoption of agent r, whose worktree and branch
// stay the user's, once keep (when set) finds no reason to keep it.
func removeAdopted(repo *git.Repo, r *Record, keep func(*Record, *Work) error) error {
	if keep != nil {
		var w *Work
		if present(r.Worktree) {
			var err error
			if w, err = WorktreeWork(repo, r); err != nil {
				return err
			}
		}
		if err := keep(r, w); err != nil {
			return err
		}
	}
	return undoAdoption(r)
}

// removeWorktree removes agent r's worktree, refusing (without force) one
// with uncommitted changes or commits nothing else reaches; with force,
// those commits are kept under refs/ferry/orphaned/ (rm.OrphanRef).
// deleteBranch: the branch goes too, so its commits do not count as
// reached by it. keep, when set, is asked first, with the worktree's work
// (nil when its directory is gone).
func removeWorktree(repo *git.Repo, r *Record, force, deleteBranch bool, keep func(*Record, *Work) error, rm *Removal) error {
	if fi, err := os.Stat(r.Worktree); err != nil || !fi.IsDir() {
		if keep != nil {
			if err := keep(r, nil); err != nil {
				return err
			}
		}
		return repo.WorktreeRemove(r.Worktree)
	}
	w, err := WorktreeWork(repo, r)
	if err != nil {
		return err
	}
	if keep != nil {
		if err := keep(r, w); err != nil {
			return err
		}
	}
	if len(w.Changed) > 0 && !force {
		why := ""
		if w.LockfileChanged {
			why = "; " + lockfile + " differs from the one spawn placed (the agent changed its dependencies)"
		}
		return failure.New(failure.Refused, "commit or stash the changes, or pass --force to discard them",
			"agent %q has uncommitted changes (%s)%s", r.Name, Summarize(w.Changed), why)
	}
	if err := keepUnreached(repo, r, force, deleteBranch, rm); err != nil {
		return err
	}
	return repo.WorktreeRemove(r.Worktree)
}

// keepUnreached refuses (without force) to remove agent r's worktree while
// its HEAD has commits no branch (but r's, when it goes), tag or remote
// reaches; with force it keeps them under refs/ferry/orphaned/.
func keepUnreached(repo *git.Repo, r *Record, force, deleteBranch bool, rm *Removal) error {
	head := revParseIn(repo, r.Worktree, "HEAD")
	if head == "" {
		return nil
	}
	except := ""
	if deleteBranch {
		except = r.Branch
	}
	lost, err := Unreached(repo, []string{head}, except)
	if err != nil || len(lost) == 0 {
		return err
	}
	if !force {
		return failure.New(failure.Refused, "push or branch them, or pass --force to keep them under refs/ferry/orphaned/",
			"agent %q has %d commit(s) that no branch, tag or remote reaches", r.Name, len(lost))
	}
	ref := fmt.Sprintf("refs/ferry/orphaned/%s-%s", r.Name, time.Now().UTC().Format("20060102T150405Z"))
	if _, err := repo.Run("", "update-ref", ref, head); err != nil {
		return err
	}
	rm.OrphanRef = ref
	return nil
}

// settleBranch deletes agent r's branch when deleteBranch (it is still at
// the commit the agent started from), and otherwise says it was kept and
// how many commits it holds past that start.
func settleBranch(repo *git.Repo, r *Record, branchHead string, deleteBranch bool, rm *Removal) error {
	if deleteBranch {
		if _, err := repo.Run("", "branch", "-D", "--", r.Branch); err != nil {
			return err
		}
		rm.BranchDeleted = true
		return nil
	}
	if branchHead != "" {
		rm.BranchKept = r.Branch
		if out, err := repo.Run("", "rev-list", "--count", r.StartCommit+".."+branchHead); err == nil {
			rm.BranchCommits, _ = strconv.Atoi(strings.TrimSpace(out))
		}
	}
	return nil
}

// removeDamaged removes agent name, whose record cannot be read, as far as
// Ferry can tell what is its own without it: its directory in the store
// (fork, locks, private layers) and the target link of the worktree whose
// link leads there. The worktree and its branch stay: the record would
// have said whether Ferry made them (spawn) or a tool did (adoption), and
// whether the branch moved. It refuses while a process runs for the agent.
// The caller holds the store lock.
func removeDamaged(repo *git.Repo, s *store.Store, name string) (*Removal, error) {
	files := s.Agent(name)
	agentLock, err := lock.TryTake(files.Lock)
	if err == lock.ErrBusy {
		return nil, failure.New(failure.Refused, "wait for it to finish, or stop it", "a process holds agent %q's lock", name)
	}
	if err != nil {
		return nil, err
	}
	defer agentLock.Release()
	for _, l := range []string{files.Busy, files.MountLock} {
		if held, _ := lock.Held(l); held {
			return nil, failure.New(failure.Refused, "stop the agent's shells and builds and try again",
				"processes still run for agent %q", name)
		}
	}
	if lifecycle.ScanMounted().AgentDir(files.Dir) {
		return nil, failure.New(failure.Refused, "stop the agent's shells and builds and try again",
			"a process still has agent %q's overlay mounted", name)
	}
	rm := &Removal{Name: name, Damaged: true, WorktreeKept: true}
	wts, err := repo.Worktrees()
	if err != nil {
		return nil, err
	}
	for _, wt := range wts {
		if link := filepath.Join(wt.Path, TargetLink); record.LinksInto(link, files.Dir) {
			if err := os.RemoveAll(link); err != nil {
				return nil, err
			}
			rm.Worktree, rm.Branch = wt.Path, wt.Branch
			break
		}
	}
	if err := os.Remove(files.Record); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	agentLock.Release()
	return rm, platform.RemoveTree(files.Dir)
}

// dropRecord removes agent name's record and then, with the locks
// released, its directory. The record goes first, under the locks: a
// process entering the agent from now on finds no agent, never a fork half
// removed. A crash before the tree is gone leaves a directory without a
// record, which gc removes.
func dropRecord(s *store.Store, name string, release func(), agentLock *lock.Lock) error {
	if err := os.Remove(s.Agent(name).Record); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	release()
	agentLock.Release()
	return platform.RemoveTree(s.Agent(name).Dir)
}

// present reports whether path is a directory.
func present(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

func revParse(repo *git.Repo, ref string) string {
	out, err := repo.Run("", "rev-parse", "--verify", "--quiet", ref)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

func revParseIn(repo *git.Repo, dir, ref string) string {
	out, err := repo.Run(dir, "rev-parse", "--verify", "--quiet", ref)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// checkedOutElsewhere reports whether r's branch is checked out in a
// worktree other than r's.
func checkedOutElsewhere(repo *git.Repo, r *Record) (bool, error) {
	wts, err := repo.Worktrees()
	if err != nil {
		return false, err
	}
	for _, w := range wts {
		if w.Branch == r.Branch && !git.SamePath(w.Path, r.Worktree) {
			return true, nil
		}
	}
	return false, nil
}

// Summarize names up to three of paths and counts the rest.
func Summarize(paths []string) string {
	if len(paths) <= 3 {
		return strings.Join(paths, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(paths[:3], ", "), len(paths)-3)
}

// isMainCheckout reports whether path is repo's main checkout (the first
// worktree git lists).
func isMainCheckout(repo *git.Repo, path string) bool {
	wts, err := repo.Worktrees()
	return err == nil && len(wts) > 0 && !wts[0].Bare && git.SamePath(wts[0].Path, path)
}
