package base

import (
	"fmt"
	"path/filepath"
	"sync"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/store"
)

// task is work running in the background; calling it waits for the work
// and returns its result (the same each time).
type task[T any] func() (T, error)

// begin runs f in the background.
func begin[T any](f func() (T, error)) task[T] {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	return sync.OnceValues(func() (T, error) {
		res := <-done
		return res.v, res.err
	})
}

// finishing is the work a build starts as soon as what it needs is final,
// so that it runs beside the fold and the observation, which need none of
// it (measured on the benchmark's large workspace, 112 crates and 8,300
// target entries on ext4: a one-leaf refresh's time from the end of its
// warm command to base.json went from 157-175 ms to 97-112 ms):
//
//   - once a warm pass ends, the store's filesystem starts writing the
//     build's output back to disk (a second sync, after the seal, covers
//     what the fold and pruning change), and git checks that the warm
//     build left the checkout alone (status takes no index lock);
//   - once the target is final (folded, pruned), it is sealed.
//
// build waits for each result where it needs it; wait waits for all, so
// that nothing still reads or writes the base when a failed build
// discards it.
type finishing struct {
	o     Options
	r     *Record
	flush task[struct{}]
	dirty task[[]string]
	seal  task[TargetSeal]
}

// warmed starts the work a finished warm pass allows. A pass after a
// first one (a seed that could not be observed) waits for the first
// pass's work and starts it again.
func (f *finishing) warmed() {
	f.wait()
	dir := f.r.Target
	if f.r.layer != nil {
		// The build wrote into the layer, which the fold is about to
		// move: its filesystem is the base directory's (a layer exists
		// only where SyncTree syncs a whole filesystem).
		dir = f.r.Dir
	}
	f.flush = begin(func() (struct{}, error) { return struct{}{}, atomicfile.SyncTree(dir) })
	f.dirty = begin(func() ([]string, error) { return sourceWrites(f.o, f.r) })
}

// final starts sealing the target, which nothing changes from now on.
func (f *finishing) final() {
	f.seal = begin(func() (TargetSeal, error) { return Seal(f.r.Target) })
}

// wait waits for everything started.
func (f *finishing) wait() {
	if f.flush != nil {
		f.flush()
	}
	if f.dirty != nil {
		f.dirty()
	}
	if f.seal != nil {
		f.seal()
	}
}

// sourceWrites checks the checkout after the warm commands and returns a
// warning for each path they wrote into it.
func sourceWrites(o Options, r *Record) ([]string, error) {
	dirty, err := o.Repo.Dirty(r.Src)
	if err != nil {
		return nil, err
	}
	var msgs []string
	for _, d := range dirty {
		if (d.X == '?' || d.X == '!') && filepath.Base(d.Path) == "Cargo.lock" {
			// An untracked lockfile, ignored or not, is Cargo resolving
			// the workspace; agents get a copy of it (see ferry spawn).
			continue
		}
		if r.Modes.Remap && d.X == '!' && d.Path == store.RemapLink {
			continue // remap mode's link to the target: Ferry's
		}
		msgs = append(msgs, fmt.Sprintf("the warm build wrote %s into the source tree (a build script or command writing outside OUT_DIR or the target dir)", d.Path))
	}
	return msgs, nil
}
