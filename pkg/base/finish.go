package base

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/base/fold"
	"github.com/ferrydev/ferry/pkg/store"
	"github.com/ferrydev/ferry/pkg/units"
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
// warm command to base.json went from 157-175 ms to 58-89 ms):
//
//   - as the warm commands start, a layered build lays the seed's target
//     beside its layer (prefold), so that the fold moves only what the
//     build wrote, and every build checks its commit out as the store's
//     spare checkout, for the next build's checkout (spared);
//   - once a warm pass ends, git checks that the warm build left the
//     checkout alone (status takes no index lock);
//   - once the layer is folded, the store's filesystem starts writing the
//     build's output back to disk (a second sync, after the seal, covers
//     what pruning changes);
//   - once the target is final (folded, pruned), it is sealed, and a
//     build that prunes nothing observes its units beside the seal: the
//     observation's walk of the target took 35-68 ms after the fold, and
//     the seal's result was not needed before it ended.
//
// build waits for each result where it needs it; wait waits for all, so
// that nothing still reads or writes the base when a failed build
// discards it.
type finishing struct {
	o     Options
	r     *Record
	laid  task[fold.Stats]
	flush task[struct{}]
	dirty task[[]string]
	seal  task[sealed]
	obs   task[observation]
	spare task[struct{}]
}

// sealed is what sealBase returned: the seal, and the files of the seed
// written since its seal that the target shares.
type sealed struct {
	seal    TargetSeal
	written []string
}

// observation is what units.Observe returned.
type observation struct {
	obs *units.Observation
	err error
}

// prefold starts laying the seed's target beside a layered build's layer
// (fold.Prefold) as its warm commands start, so that the fold after them
// moves only what they wrote (fold.Merge). Measured on the benchmark's
// large workspace (7,720 seed entries, 591 written): the fold took 64-82
// ms after the warm build, the merge takes 10-14 ms, and laying the links
// (45-60 ms) beside the warm build did not slow it measurably.
func (f *finishing) prefold() {
	if f.r.layer == nil || f.laid != nil {
		return
	}
	lower, next, s, id := f.r.layer.Lower, layerNext(f.r), f.o.Store, f.r.ID
	f.laid = begin(func() (st fold.Stats, err error) {
		err = linking(s, id, func() error { st, err = fold.Prefold(lower, next); return err })
		return st, err
	})
}

// spared starts checking the build's commit out as the store's spare
// checkout (makeSpare) as its warm commands start, for the next build's
// checkout to take: the warm commands leave a core idle most of the time
// (a leaf edit rebuilds a chain of crates one after the other).
func (f *finishing) spared() {
	if f.spare != nil {
		return
	}
	o, commit := f.o, f.r.Commit
	f.spare = begin(func() (struct{}, error) { return struct{}{}, makeSpare(o, commit) })
}

// warmed starts the work a finished warm pass allows: the check of the
// checkout. A pass after a first one (a seed that could not be observed)
// waits for the first pass's work and starts it again.
func (f *finishing) warmed() {
	f.waitPass()
	f.dirty = begin(func() ([]string, error) { return sourceWrites(f.o, f.r) })
}

// folded starts writing the build's output back to disk, once the layer is
// folded: a writeback beside the fold slowed its renames and links (on
// the benchmark's large workspace a merge took 50-80 ms beside it, 10-13
// ms alone).
func (f *finishing) folded() {
	dir := f.r.Target
	f.flush = begin(func() (struct{}, error) { return struct{}{}, atomicfile.SyncTree(dir) })
}

// final starts sealing the target, which nothing changes from now on:
// its listing, and its contents (taking the seed's digests where the
// record says it may).
func (f *finishing) final() {
	dir, reuse := f.r.Dir, f.r.reuse
	f.seal = begin(func() (sealed, error) {
		seal, written, err := sealBase(dir, reuse)
		return sealed{seal, written}, err
	})
}

// SeedChangedError is a refresh that shares files of its seed (a layered
// one links them) into which something outside Ferry's sandboxes wrote
// after the seed's seal: the write is in the refresh's target before the
// refresh's own seal, which would pass it, so the refresh is not made
// ready.
type SeedChangedError struct {
	Seed  string   // the seed's id
	Files []string // the shared files written, as the target names them
}

func (e *SeedChangedError) Error() string {
	return fmt.Sprintf("its seed, base %s, was written into from outside Ferry's sandboxes after its seal, in files this base shares with it: %s", e.Seed, some(e.Files))
}

// observe starts observing the warm build's units in the final target
// (warmObserved), then removes the calls' records in wu; observed takes
// the result.
func (f *finishing) observe(wu string) {
	target := f.r.Target
	f.obs = begin(func() (observation, error) {
		obs, err := units.Observe(target, wu)
		return observation{obs, err}, os.RemoveAll(wu)
	})
}

// observed records the observation observe started in the record, once
// it is done.
func (f *finishing) observed() error {
	if f.obs == nil {
		return nil
	}
	o, err := f.obs()
	if err != nil {
		return err
	}
	f.r.observed(o.obs, o.err)
	return nil
}

// wait waits for everything started.
func (f *finishing) wait() {
	f.waitPass()
	if f.spare != nil {
		f.spare()
	}
}

// waitPass waits for what a warm pass started: all but the spare
// checkout, which reads and writes nothing of the base.
func (f *finishing) waitPass() {
	if f.laid != nil {
		f.laid()
	}
	if f.flush != nil {
		f.flush()
	}
	if f.dirty != nil {
		f.dirty()
	}
	if f.seal != nil {
		f.seal()
	}
	if f.obs != nil {
		f.obs()
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
