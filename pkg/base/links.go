package base

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/store"
)

// Link windows. Ferry adds and removes names of ready bases' files: a
// layered refresh links its seed's files into its new target (Prefold,
// Fold, Merge) and unlinks some again (Merge, pruning, unseeding), a pull
// links its seed's unchanged files, and removing a base (gc, Discard, a
// rebuild) unlinks names whose inodes other bases hold. Each link or unlink
// moves the inode's change time, in every base that holds it, to the time
// it was made. The seal (seal.go) therefore does not hash a regular file's
// change time: it refuses one that is after the seal unless it falls in a
// link window, an interval in which Ferry made such changes, recorded in
// the store before the first of them and closed after the last.
//
// The windows of one owner (the base being built, pulled or removed) are
// one file, links/<owner>.json in the store, written only under the
// owner's base lock, so its writes never race. A window left open by a
// process that was killed stays open (a check takes it to last until
// now) until the owner's next window, which closes it: the next build of
// that id discards the partial base in a window of its own, as gc does.

// linkSlack is how long before a window's recorded start a change time
// still falls in it: file times come from the kernel's coarse clock, one
// tick (at most 10 ms) behind the clock Ferry reads.
const linkSlack = 50 * time.Millisecond

// window is one link window; a zero End is a window still open.
type window struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end,omitzero"`
}

type windowFile struct {
	Owner   string   `json:"owner"`
	Windows []window `json:"windows"`
}

// windows are the link windows of a store.
type windows []window

// explain reports whether a change time ctime falls in one of ws.
func (ws windows) explain(ctime time.Time) bool {
	for _, w := range ws {
		if ctime.Before(w.Start.Add(-linkSlack)) {
			continue
		}
		if w.End.IsZero() || !ctime.After(w.End) {
			return true
		}
	}
	return false
}

// readWindows reads every link window of the store at dir.
func readWindows(dir string) (windows, error) {
	s := &store.Store{Dir: dir}
	ents, err := os.ReadDir(s.LinkWindows())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out windows
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		var f windowFile
		if err := readWindowFile(filepath.Join(s.LinkWindows(), e.Name()), &f); err != nil {
			return nil, err
		}
		out = append(out, f.Windows...)
	}
	return out, nil
}

func readWindowFile(p string, f *windowFile) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, f)
}

// linking runs f, which adds or removes names of ready bases' files, in a
// link window of owner, whose base lock the caller holds.
func linking(s *store.Store, owner string, f func() error) error {
	end, err := openWindow(s, owner)
	if err != nil {
		return err
	}
	ferr := f()
	if err := end(); ferr == nil {
		ferr = err
	}
	return ferr
}

// openWindow records the start of a link window of owner (closing one a
// killed process left open) and returns the function that closes it.
func openWindow(s *store.Store, owner string) (end func() error, err error) {
	if err := os.MkdirAll(s.LinkWindows(), 0o755); err != nil {
		return nil, err
	}
	p := s.LinkWindow(owner)
	var f windowFile
	if err := readWindowFile(p, &f); err != nil && !errors.Is(err, fs.ErrNotExist) {
		f = windowFile{} // unreadable: it is rewritten whole, the new window open
	}
	f.Owner = owner
	now := time.Now().UTC()
	for i := range f.Windows {
		if f.Windows[i].End.IsZero() {
			f.Windows[i].End = now
		}
	}
	f.Windows = append(f.Windows, window{Start: now})
	if err := atomicfile.WriteJSON(p, &f, 0o644); err != nil {
		return nil, err
	}
	return func() error {
		f.Windows[len(f.Windows)-1].End = time.Now().UTC()
		return atomicfile.WriteJSON(p, &f, 0o644)
	}, nil
}

// Linking runs f in a link window of base id, whose base lock the caller
// holds: f links other bases' files into id's directory (a pull from a
// seed), or removes id's directory (gc), whose files may be inodes that
// other bases hold.
func Linking(s *store.Store, id string, f func() error) error {
	return linking(s, id, f)
}

// CompactLinkWindows drops the link windows that no ready base needs any
// more, those that ended before every ready base was sealed, and the files
// of owners left with none (gc, under the store lock). An owner whose base
// lock is held is left alone.
func CompactLinkWindows(s *store.Store) error {
	list, err := List(s)
	if err != nil {
		return err
	}
	var oldest time.Time
	for _, e := range list {
		if e.Record == nil {
			continue
		}
		sealed := e.Record.TargetSeal.Sealed
		if !e.Record.TargetSeal.Covers() {
			continue // checked without change times
		}
		if oldest.IsZero() || sealed.Before(oldest) {
			oldest = sealed
		}
	}
	ents, err := os.ReadDir(s.LinkWindows())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		owner, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(owner, ".") {
			continue
		}
		l, err := lock.TryTake(s.BaseLock(owner))
		if err != nil {
			continue // in use
		}
		err = compactOwner(s, owner, oldest)
		if _, serr := os.Stat(s.BaseDir(owner)); errors.Is(serr, fs.ErrNotExist) {
			l.Remove() // the lock file of a base that is gone
		} else {
			l.Release()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// compactOwner drops owner's windows that ended before oldest (every
// window, when no ready base needs one), and its file when none is left.
func compactOwner(s *store.Store, owner string, oldest time.Time) error {
	p := s.LinkWindow(owner)
	var f windowFile
	if err := readWindowFile(p, &f); err != nil {
		return os.Remove(p)
	}
	kept := f.Windows[:0]
	for _, w := range f.Windows {
		if w.End.IsZero() || (!oldest.IsZero() && !w.End.Before(oldest)) {
			kept = append(kept, w)
		}
	}
	if len(kept) == 0 {
		return os.Remove(p)
	}
	if len(kept) == len(f.Windows) {
		return nil
	}
	f.Windows = kept
	return atomicfile.WriteJSON(p, &f, 0o644)
}
