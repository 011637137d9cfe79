package base

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/store"
)

// Spare checkouts. A base's checkout is a `git worktree add` of its commit,
// one file created per tracked file: on the benchmark's large workspace
// (1,238 files, store on ext4) 50-150 ms, and up to half a second soon
// after many files were deleted (an ext4 without a journal passes over
// recently freed inodes). It was the step a refresh waited on longest
// before its warm commands. A refresh's commit is almost always close to
// the last base's, so while a base's warm commands run, its commit is
// checked out once more into the store's spare checkout; the next build
// moves that worktree to its own base's src and checks its commit out
// there (git rewrites only the files that differ).
//
// The result must be what a fresh checkout gives, so a spare is taken only
// when:
//   - it is complete: ready names its commit and is written after git
//     finished; a spare without it (a build killed while making it) is
//     dropped;
//   - its files are what git wrote: ready names the boot it was made in,
//     and after a crash (another boot) the files may be torn, so it is
//     dropped;
//   - the checkout conversions are the same: git rewrites only the files
//     whose blob changed, so a change to any .gitattributes between the
//     two commits could leave a file converted as the older commit said;
//     then the commit is checked out fresh.
//
// Nothing works in the spare: sandboxes mount the store read-only, and
// Ferry only makes, takes and drops it. A write into it from outside (as
// into a base's checkout) would show in the checkout's check after the
// warm commands (sourceWrites), and git refuses to check out over a
// changed file it must rewrite; a take that fails for any reason falls
// back to a fresh checkout.

// spareRecord is the spare's ready file.
type spareRecord struct {
	Commit string `json:"commit"`
	Boot   string `json:"boot"`
}

// makeSpare checks commit out as the store's spare, unless the spare
// already holds it. The spare lock is only tried: a spare being made,
// taken or dropped elsewhere is left to that.
func makeSpare(o Options, commit string) error {
	sp := o.Store.Spare()
	l, err := lock.TryTake(sp.Lock)
	if errors.Is(err, lock.ErrBusy) {
		return nil
	}
	if err != nil {
		return err
	}
	defer l.Release()
	boot := platform.BootID()
	var rec spareRecord
	if atomicfile.ReadJSON(sp.Ready, &rec) == nil && rec.Commit == commit && rec.Boot == boot {
		return nil
	}
	if err := dropSpare(o); err != nil {
		return err
	}
	if boot == "" {
		return nil // a spare could not be told from one made before a crash
	}
	if err := os.MkdirAll(sp.Dir, 0o755); err != nil {
		return err
	}
	if err := o.Repo.WorktreeAddDetached(sp.Src, commit); err != nil {
		return err
	}
	if err := o.Repo.WorktreeLock(sp.Src, store.SpareCheckoutReason); err != nil {
		return err
	}
	return atomicfile.WriteJSON(sp.Ready, spareRecord{Commit: commit, Boot: boot}, 0o644)
}

// dropSpare removes the spare, complete or not: its ready file first, so
// that no build takes what is left of it, then its worktree. The caller
// holds the spare lock.
func dropSpare(o Options) error {
	sp := o.Store.Spare()
	if err := os.Remove(sp.Ready); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if _, err := os.Lstat(sp.Dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	// A worktree git had not registered yet (killed while adding) is a
	// plain directory: remove it, then unregister whatever is left.
	rerr := o.Repo.WorktreeRemove(sp.Src)
	if err := platform.RemoveTree(sp.Dir); err != nil {
		return err
	}
	if rerr != nil {
		return o.Repo.WorktreeRemove(sp.Src)
	}
	return nil
}

// takeSpare moves the spare checkout to src and checks commit out there,
// and reports whether it did. Without a spare it can take, it does
// nothing; a take that fails part way leaves no worktree at src, and the
// caller checks the commit out fresh.
func takeSpare(o Options, src, commit string) (bool, error) {
	sp := o.Store.Spare()
	l, err := lock.TryTake(sp.Lock)
	if err != nil {
		return false, nil // busy: a fresh checkout costs no more than waiting
	}
	defer l.Release()
	var rec spareRecord
	if err := atomicfile.ReadJSON(sp.Ready, &rec); err != nil {
		return false, nil
	}
	if rec.Boot == "" || rec.Boot != platform.BootID() {
		return false, dropSpare(o)
	}
	if differ, err := o.Repo.TreesDiffer(rec.Commit, commit, ":(glob)**/.gitattributes"); err != nil || differ {
		return false, nil // kept for a build whose commit it suits
	}
	// No longer a spare: a crash from here on leaves a partial base (its
	// discard removes the worktree) or a spare without ready (dropped).
	if err := os.Remove(sp.Ready); err != nil {
		return false, err
	}
	if err := o.Repo.WorktreeUnlock(sp.Src); err != nil {
		return false, errors.Join(err, dropSpare(o))
	}
	if err := o.Repo.WorktreeMove(sp.Src, src); err != nil {
		return false, errors.Join(err, dropSpare(o))
	}
	if err := o.Repo.CheckoutDetached(src, commit); err != nil {
		return false, errors.Join(fmt.Errorf("check the commit out in the spare checkout: %w", err), o.Repo.WorktreeRemove(src))
	}
	// Empty now: without it, the next makeSpare has nothing to drop and
	// asks git nothing.
	os.Remove(sp.Dir)
	return true, nil
}
