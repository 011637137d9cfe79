package agent

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/store"
)

// Work is what an agent's worktree holds beyond its commit, without
// Ferry's own entries there (see ferryEntry).
type Work struct {
	// Changed are the tracked paths with uncommitted changes and the
	// untracked files: what rm refuses to discard without --force.
	Changed []string
	// LockfileChanged is set when Changed holds the Cargo.lock spawn
	// placed, changed since (the agent changed its dependencies).
	LockfileChanged bool
	// Ignored are the paths git ignores, as git status names them (a
	// directory ignored whole once, ending in '/'). rm does not look at
	// them; gc reaps no agent that holds any but build output.
	Ignored []string
}

// WorktreeWork reads the status of agent r's worktree: what rm refuses to
// discard and what gc's reaping looks at. Ferry's own entries are left out.
func WorktreeWork(repo *git.Repo, r *Record) (*Work, error) {
	dirty, err := repo.Dirty(r.Worktree)
	if err != nil {
		return nil, err
	}
	w := &Work{}
	for _, d := range dirty {
		if d.X != '?' && d.X != '!' {
			w.Changed = append(w.Changed, d.Path) // tracked: the user's, whatever its name
			continue
		}
		switch ferryEntry(r, d.Path) {
		case entryFerrys:
			continue
		case entryChanged:
			w.LockfileChanged = d.X == '?'
		}
		if d.X == '!' {
			w.Ignored = append(w.Ignored, d.Path)
			continue
		}
		w.Changed = append(w.Changed, d.Path)
	}
	return w, nil
}

// entryKind is what ferryEntry finds.
type entryKind int

const (
	entryUsers   entryKind = iota // not an entry Ferry makes: the user's
	entryFerrys                   // Ferry's, as Ferry made it: not the user's work
	entryChanged                  // Ferry's Cargo.lock, changed by the agent since: the user's work now
)

// ferryEntry tells whether path (relative to agent r's worktree, as git
// status names an untracked or ignored path) is an entry Ferry itself put
// in the worktree, so that neither rm nor gc takes it for the agent's work:
//
//   - Cargo.lock, when spawn placed the base's in a worktree whose commit
//     tracks none (Record.PlacedLockfile): Ferry's while unchanged, the
//     agent's dependency change once it is not;
//   - .ferry-target, remap mode's link to the fork (remap.go), while it
//     still leads there;
//   - target, the symlink spawn made at the worktree's root for the host to
//     reach the agent's build output (OwnEntry), while it still points
//     where spawn pointed it;
//   - a file spawn placed for the agent's tool (Record.Placed: Claude
//     Code's local settings), while unchanged.
//
// An entry Ferry adds to a worktree is added here, or rm refuses to remove
// every agent and gc reaps none.
func ferryEntry(r *Record, path string) entryKind {
	switch path {
	case lockfile:
		if r.PlacedLockfile == "" {
			return entryUsers
		}
		if placedLockfileUnchanged(r) {
			return entryFerrys
		}
		return entryChanged
	}
	if OwnEntry(r, path) {
		return entryFerrys
	}
	if d, ok := r.Placed[path]; ok {
		if data, err := os.ReadFile(filepath.Join(r.Worktree, filepath.FromSlash(path))); err == nil && digest(data) == d {
			return entryFerrys // placed for the agent's tool (SpawnOptions.Place), unchanged
		}
	}
	if r.Remap != nil && path == store.RemapLink && record.LinksTo(filepath.Join(r.Worktree, store.RemapLink), r.Remap.Link) {
		return entryFerrys // remap mode's link to the fork (remap.go)
	}
	return entryUsers
}

// Unreached returns the commits that tips reach and no branch, tag or
// remote does, not counting branch except (one about to go with its
// agent).
func Unreached(repo *git.Repo, tips []string, except string) ([]string, error) {
	if len(tips) == 0 {
		return nil, nil
	}
	args := append([]string{"rev-list"}, tips...)
	args = append(args, "--not")
	if except != "" {
		args = append(args, "--exclude=refs/heads/"+except)
	}
	args = append(args, "--branches", "--tags", "--remotes")
	out, err := repo.Run("", args...)
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// lockfile is the root workspace's lockfile, as git status names it.
const lockfile = "Cargo.lock"

// placedLockfileUnchanged reports whether r's worktree still holds the
// Cargo.lock spawn placed there, byte for byte.
func placedLockfileUnchanged(r *Record) bool {
	data, err := os.ReadFile(filepath.Join(r.Worktree, lockfile))
	return err == nil && digest(data) == r.PlacedLockfile
}
