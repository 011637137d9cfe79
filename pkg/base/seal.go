package base

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/record"
)

// A ready base is immutable (invariant 2). Inside every sandbox the store is
// read-only, so no agent can change a base; but a process on the host (an
// agent tool's own shell, a user's script, a cargo call given the base's
// target dir) runs as the same user and can. So base.json seals its target,
// and Ferry checks the seal where a changed base would spread: before
// reusing the base (ferry base), before forking it (ferry spawn), in ferry
// doctor and in ferry base verify.
//
// The check before reuse and spawn reads no file's bytes: it lists the
// target (one fstatat per entry) and compares the listing with the seal.
// The listing holds every entry's path, type, permissions, size, mtime and
// inode number (and a link's target), and each directory's and symlink's
// change time and link count. A process of the same user can put back a
// file's bytes and its mtime (utimensat), but not its change time, which
// every write, chmod, utimensat and link moves to the clock's present, nor
// an inode number (a file renamed over another is a new inode). So the
// check also refuses every entry whose change time is after the seal was
// taken (Sealed), and names it: a same-size write with the mtime put back
// is named by its path.
//
// A regular file's change time and link count are left out of the digest
// and checked against Sealed instead, because Ferry itself moves them on a
// ready base's files: a layered refresh hard-links its seed's files into
// the new base, a pull links its seed's, and removing a base that shares
// them (gc, a failed or rebuilt build) unlinks names of the same inodes
// (see layer.go). Each of those runs inside a link window (links.go) that
// it records in the store before its first link or unlink and closes after
// its last; a regular file whose change time falls inside one passes. No
// other step of Ferry changes a sealed target: the seal is taken once the
// target is final (after the fold, its rename into place, pruning and
// relocation), syncs change no change time, and forking reads it. Measured
// on this machine (ext4 and the XFS test mount, kernel 6.18): FICLONE and
// copy_file_range from a file, and an overlay with the target as its lower
// layer, leave the file's change time as it was (TestForkKeepsSeal).
//
// ferry base verify --full also reads every file: at seal time each
// regular file's SHA-256 is written to SHA256SUMS beside base.json (the
// format of sha256sum, so `cd <base dir> && sha256sum -c SHA256SUMS`
// checks a base by hand), whose own digest base.json records. A refresh
// takes its seed's digest for every file it can prove unchanged since it
// came from the seed (contents.go), so that it hashes only what its build
// wrote.
//
// A record written by an older Ferry (no seal version) is checked with
// the listing it recorded (path, type, permissions, size, mtime, link
// target), which a put-back mtime passes; ferry base verify says so, and
// ferry base --rebuild gives the base a seal that does not.
//
// Measured on a shared 2-core machine: the listing of BenchmarkSeal's
// 7,384 files takes 16-19 ms, ferry base verify on the benchmark's large
// workspace's base (8,114 entries) 28-38 ms of a spawn that takes about
// 0.9 s there.

// SealVersion is the version of the listing this Ferry seals with: 2 adds
// inode numbers, change times and link counts to the listing of a Ferry
// without one (0).
const SealVersion = record.SealVersion

// TargetSeal is what base.json records of the target.
type TargetSeal = record.TargetSeal

// sameSeal reports whether s and o are the same seal.
func sameSeal(s, o TargetSeal) bool {
	return sameListing(s, o) && s.Version == o.Version && s.Sealed.Equal(o.Sealed) && s.Contents == o.Contents
}

// sameListing reports whether s and o seal the same listing.
func sameListing(s, o TargetSeal) bool {
	return s.Digest == o.Digest && s.Entries == o.Entries && s.Bytes == o.Bytes
}

// walk is what one listing of a target found besides its seal.
type walk struct {
	newer []string   // entries changed or added after the base was built, as mtimes and change times tell
	late  []lateFile // regular files whose change time is after the seal: a link window may explain them
	files []file     // regular files, for the contents (collect)
}

// lateFile is a regular file whose change time is after the seal's.
type lateFile struct {
	rel   string
	ctime time.Time
}

// file is a regular file of a listing, as its contents are hashed.
type file struct {
	rel          string
	size         int64
	mtime, ctime time.Time
	ino          uint64
}

// listing walks target with the listing of seal version version and
// returns its seal and what it found: the entries whose mtime is after
// since (the base's creation), and with version 2 those whose change time
// is after sealed. collect keeps the regular files. It reads each directory
// once and stats its entries relative to the directory's descriptor
// (fstatat), in name order: resolving every full path again made the walk
// twice as slow on the benchmark's large target. The directories are read
// on several goroutines (readTree), and their entries then hashed in the
// walk's order (emit): on the benchmark's large workspace the listing is
// most of a refresh's seal, which is all a refresh does after its fold.
func listing(target string, version int, since, sealed time.Time, collect bool) (TargetSeal, walk, error) {
	w := &lister{h: sha256.New(), version: version, since: since, sealed: sealed, collect: collect}
	w.seal.Version = version
	var st unix.Stat_t
	if err := unix.Lstat(target, &st); err != nil {
		return TargetSeal{}, walk{}, &os.PathError{Op: "lstat", Path: target, Err: err}
	}
	w.add(".", &st, "")
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := w.emit(readTree(target), ""); err != nil {
			return TargetSeal{}, walk{}, err
		}
	}
	w.seal.Digest = hex.EncodeToString(w.h.Sum(nil))
	return w.seal, w.found, nil
}

type lister struct {
	h       hash.Hash
	version int
	since   time.Time
	sealed  time.Time
	collect bool
	seal    TargetSeal
	found   walk
	line    []byte // one entry's line, reused: the walk is on spawn's path
}

// A dirNode is one directory of a listing as readTree read it: its
// entries in name order, each one's lstat, a symlink's target, and a
// subdirectory's own node. Reading stops at the first error, which err
// holds: entries before errAt were read, and the walk fails there.
type dirNode struct {
	names []string
	sts   []unix.Stat_t
	links []string   // a symlink's target, by entry
	kids  []*dirNode // a directory's node, by entry
	err   error
	errAt int
}

// treeReader reads a tree's directories, on at most cap(spare) goroutines
// besides the caller's.
type treeReader struct {
	wg    sync.WaitGroup
	spare chan struct{}
}

// readTree reads the directory tree at root (not following a link there).
func readTree(root string) *dirNode {
	t := &treeReader{spare: make(chan struct{}, 2*runtime.GOMAXPROCS(0))}
	n := &dirNode{}
	fd, err := unix.Openat(unix.AT_FDCWD, root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		n.err = &os.PathError{Op: "open", Path: root, Err: err}
		return n
	}
	t.wg.Add(1)
	t.read(fd, root, "", n)
	t.wg.Wait()
	return n
}

// read reads the directory open as fd (opened by the name opened), whose
// path inside the tree is rel, into n, and closes fd. Each subdirectory is
// opened here, relative to fd, and read on a spare goroutine when there is
// one, else before the next entry.
func (t *treeReader) read(fd int, opened, rel string, n *dirNode) {
	defer t.wg.Done()
	f := os.NewFile(uintptr(fd), opened)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		n.err = err
		return
	}
	sort.Strings(names)
	n.names = names
	n.sts = make([]unix.Stat_t, len(names))
	n.links = make([]string, len(names))
	n.kids = make([]*dirNode, len(names))
	n.errAt = len(names)
	for i, name := range names {
		p := name
		if rel != "" {
			p = rel + "/" + name
		}
		st := &n.sts[i]
		if err := unix.Fstatat(fd, name, st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			n.err, n.errAt = &os.PathError{Op: "lstat", Path: p, Err: err}, i
			return
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			buf := make([]byte, 4096)
			k, err := unix.Readlinkat(fd, name, buf)
			if err != nil {
				n.err, n.errAt = &os.PathError{Op: "readlink", Path: p, Err: err}, i
				return
			}
			n.links[i] = string(buf[:k])
		case unix.S_IFDIR:
			kid := &dirNode{}
			n.kids[i] = kid
			kfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				kid.err = &os.PathError{Op: "open", Path: name, Err: err}
				continue
			}
			t.wg.Add(1)
			select {
			case t.spare <- struct{}{}:
				go func() {
					t.read(kfd, name, p, kid)
					<-t.spare
				}()
			default:
				t.read(kfd, name, p, kid)
			}
		}
	}
}

// emit hashes the entries of n, whose path inside the target is rel, and
// of its subdirectories, in the order of a walk: each entry, then what is
// below it. It returns the first error that walk meets.
func (w *lister) emit(n *dirNode, rel string) error {
	for i, name := range n.names {
		if n.err != nil && i == n.errAt {
			return n.err
		}
		p := name
		if rel != "" {
			p = rel + "/" + name
		}
		w.add(p, &n.sts[i], n.links[i])
		if kid := n.kids[i]; kid != nil {
			if err := w.emit(kid, p); err != nil {
				return err
			}
		}
	}
	return n.err
}

// add hashes one entry's line: path, mode, size (of a regular file), mtime
// and link target; with version 2 also the inode number, and a directory's
// or symlink's change time and link count (a regular file's are checked
// against the seal's time instead: see the package doc).
func (w *lister) add(rel string, st *unix.Stat_t, link string) {
	size := int64(0)
	regular := st.Mode&unix.S_IFMT == unix.S_IFREG
	if regular {
		size = st.Size
	}
	mtime := time.Unix(st.Mtim.Unix())
	w.line = strconv.AppendQuote(w.line[:0], rel)
	w.line = append(w.line, ' ')
	w.line = strconv.AppendUint(w.line, uint64(st.Mode), 8)
	w.line = append(w.line, ' ')
	w.line = strconv.AppendInt(w.line, size, 10)
	w.line = append(w.line, ' ')
	w.line = strconv.AppendInt(w.line, mtime.UnixNano(), 10)
	w.line = append(w.line, ' ')
	w.line = strconv.AppendQuote(w.line, link)
	newer := !w.since.IsZero() && mtime.After(w.since)
	if w.version >= SealVersion {
		ctime := time.Unix(st.Ctim.Unix())
		w.line = append(w.line, ' ')
		w.line = strconv.AppendUint(w.line, st.Ino, 10)
		if !regular {
			w.line = append(w.line, ' ')
			w.line = strconv.AppendInt(w.line, ctime.UnixNano(), 10)
			w.line = append(w.line, ' ')
			w.line = strconv.AppendUint(w.line, uint64(st.Nlink), 10)
		}
		if !w.sealed.IsZero() && ctime.After(w.sealed) {
			if regular && !newer {
				w.found.late = append(w.found.late, lateFile{rel, ctime})
			} else {
				newer = true
			}
		}
		if regular && w.collect {
			w.found.files = append(w.found.files, file{rel: rel, size: size, mtime: mtime, ctime: ctime, ino: st.Ino})
		}
	}
	w.line = append(w.line, '\n')
	w.h.Write(w.line)
	w.seal.Entries++
	w.seal.Bytes += size
	if newer {
		w.found.newer = append(w.found.newer, rel)
	}
}

// Seal computes the seal of a target dir (its listing; no contents).
func Seal(target string) (TargetSeal, error) {
	sealed := time.Now()
	s, _, err := listing(target, SealVersion, time.Time{}, time.Time{}, false)
	s.Sealed = sealed.UTC()
	return s, err
}

var errNoSeal = errors.New("its base.json records no seal of the target (an older Ferry built it)")

// ChangedError is a ready base whose target no longer matches base.json.
type ChangedError struct {
	ID       string
	Target   string
	Recorded TargetSeal
	Found    TargetSeal
	Newer    []string // entries changed or added after the base was built, as far as mtimes and change times tell
	Differ   []string // regular files whose bytes differ from their recorded digests (VerifyFull)
	Contents string   // why the recorded digests could not be compared (VerifyFull)
	Err      error    // the target could not be read
}

func (e *ChangedError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("base %s's target %s cannot be read: %v", e.ID, e.Target, e.Err)
	}
	msg := fmt.Sprintf("base %s was changed after it was built: its target %s", e.ID, e.Target)
	var parts []string
	switch {
	case len(e.Newer) > 0:
		parts = append(parts, "has entries written since ("+some(e.Newer)+")")
	case !sameListing(e.Found, e.Recorded) && e.Found.Entries != e.Recorded.Entries:
		parts = append(parts, fmt.Sprintf("holds %d entries, %d when it was built", e.Found.Entries, e.Recorded.Entries))
	case !sameListing(e.Found, e.Recorded):
		parts = append(parts, "differs from its record in base.json")
	}
	if len(e.Differ) > 0 {
		parts = append(parts, "holds files whose bytes differ from their recorded digests ("+some(e.Differ)+")")
	}
	if e.Contents != "" {
		parts = append(parts, e.Contents)
	}
	return msg + " " + strings.Join(parts, ", and ")
}

// some lists the first three of names, sorted, and how many more there are.
func some(names []string) string {
	names = append([]string(nil), names...)
	sort.Strings(names)
	more := ""
	if len(names) > 3 {
		names, more = names[:3], fmt.Sprintf(" and %d more", len(names)-3)
	}
	return strings.Join(names, ", ") + more
}

// Verify checks that ready base r's target is the one it was built with,
// from its listing (no file's bytes are read). A changed base is a
// *failure.Error of kind Refused wrapping a *ChangedError, with the fix in
// its hint.
func Verify(r *Record) error {
	if r.TargetSeal.Digest == "" {
		return failure.Wrap(failure.Refused, &ChangedError{ID: r.ID, Target: r.Target, Err: errNoSeal},
			"build it again with this Ferry: `ferry base --rebuild --rev "+short(r.Commit)+"`", "base %s cannot be trusted", r.ID)
	}
	if ce := check(r); ce != nil {
		return changed(r, ce)
	}
	return nil
}

// check lists r's target and returns what differs from its seal, nil when
// nothing does.
func check(r *Record) *ChangedError {
	rec := r.TargetSeal
	found, w, err := listing(r.Target, rec.Version, r.Created, rec.Sealed, false)
	ce := &ChangedError{ID: r.ID, Target: r.Target, Recorded: rec, Found: found, Err: err}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			ce.Err = fs.ErrNotExist
		}
		return ce
	}
	ce.Newer = w.newer
	if len(w.late) > 0 {
		windows, werr := readWindows(r.Store)
		for _, f := range w.late {
			if werr != nil || !windows.explain(f.ctime) {
				ce.Newer = append(ce.Newer, f.rel)
			}
		}
	}
	if sameListing(found, rec) && len(ce.Newer) == 0 {
		return nil
	}
	return ce
}

// changed is the refusal of r, changed as ce says.
func changed(r *Record, ce *ChangedError) error {
	return failure.Wrap(failure.Refused, ce, fmt.Sprintf(
		"something outside Ferry's sandboxes wrote into it; rebuild it with `ferry base --rebuild --rev %s`, and remove agents spawned from it since then (`ferry rm`), whose forks may hold the change",
		short(r.Commit)), "base %s cannot be trusted", r.ID)
}
