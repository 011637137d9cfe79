package base

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/store"
)

// ExposeSharedWrites runs before the names of ready base id's files go (gc
// deletes it, --rebuild builds it again), while its base.json still holds
// its seal. A file that something outside Ferry wrote after the seal shows
// in id's check as a change time that no link window explains. Its inode
// may be one that other ready bases link too (a layered refresh's, a
// pull's), whose checks show the same write, but only until the removal:
// the removal unlinks id's name in a link window of its own, which moves
// the inode's change time into that window, and their checks would then
// pass the write. (Tried on XFS: a byte written into a file four bases
// linked, its mtime put back, then `ferry base --rebuild` of one of them;
// the other three then passed `ferry base verify`, and only `--full` named
// the file.)
//
// So when id's own check fails, every other ready base is checked while
// the write still shows, and each that fails is made partial (unready):
// the next build of its commit builds it again, and gc deletes it once
// nothing uses it. Their ids are returned, in the order of the store's
// listing. A base whose lock another process holds is left to it: a build
// or a spawn checks a base before it serves it. A base in use as the lower
// layer of a running overlay agent cannot be made partial: that refusal is
// returned, and the caller removes nothing. The caller holds id's base
// lock.
func ExposeSharedWrites(s *store.Store, id string) ([]string, error) {
	r, err := Read(s, id)
	if err != nil {
		return nil, nil // not ready, or unreadable: no seal to check against
	}
	if ce := check(r); ce == nil || ce.Err != nil {
		return nil, nil
	}
	exposed, err := exposeChanged(s, id)
	if err != nil {
		return exposed, fmt.Errorf("base %s holds files written outside Ferry's sandboxes, which other bases may share: %w", id, err)
	}
	return exposed, nil
}

// exposeChanged makes every ready base but except whose check fails
// partial (see ExposeSharedWrites), and returns their ids. A base whose
// lock another process holds is left to it.
func exposeChanged(s *store.Store, except string) ([]string, error) {
	ents, err := os.ReadDir(s.BasesDir())
	if err != nil {
		return nil, err
	}
	var exposed []string
	for _, e := range ents {
		other := e.Name()
		if !e.IsDir() || other == except {
			continue
		}
		l, err := lock.TryTake(s.BaseLock(other))
		if errors.Is(err, lock.ErrBusy) {
			continue
		}
		if err != nil {
			return exposed, err
		}
		made, err := exposeIfChanged(s, other)
		l.Release()
		if err != nil {
			return exposed, err
		}
		if made {
			exposed = append(exposed, other)
		}
	}
	return exposed, nil
}

// exposeIfChanged makes ready base id partial when its check fails, and
// reports whether it did. The caller holds id's base lock.
func exposeIfChanged(s *store.Store, id string) (bool, error) {
	r, err := Read(s, id)
	if errors.Is(err, fs.ErrNotExist) || failure.AsDamaged(err) != nil {
		return false, nil // not ready, or its record is damaged: nothing serves it
	}
	if err != nil {
		return false, err
	}
	if check(r) == nil {
		return false, nil
	}
	return true, unreadyDamaged(s, id)
}

// SealSharing is SealBase for a base (in directory dir) whose target
// links its seed's files, the seed reuse names: a pull of a delta. When
// the seed was written into from outside Ferry's sandboxes after its seal,
// in a file the target shares, the write is in the target before its seal,
// which would pass it: SealSharing then returns a *SeedChangedError, and
// first makes every ready base whose check shows the write partial, the
// seed among them, with their ids (the caller's discard of the base
// unlinks its names of the shared inodes in a link window, which would
// hide the write from their checks). The caller holds no lock of the
// seed's; a base whose lock another process holds is left to it.
func SealSharing(s *store.Store, dir string, reuse *Reuse) (TargetSeal, []string, error) {
	seal, written, err := sealBase(dir, reuse)
	if err != nil || len(written) == 0 {
		return seal, nil, err
	}
	serr := &SeedChangedError{Seed: reuse.Seed.ID, Files: written}
	exposed, err := exposeChanged(s, filepath.Base(dir))
	return TargetSeal{}, exposed, errors.Join(serr, err)
}
