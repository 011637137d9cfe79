package base

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/failure"
)

// A ready base is immutable (invariant 2). Inside every sandbox the store is
// read-only, so no agent can change a base; but a process on the host (an
// agent tool's own shell, a user's script, a cargo call given the base's
// target dir) runs as the same user and can. So base.json records a digest
// of its target's listing, and Ferry checks it where a changed base would
// spread: before reusing the base (ferry base), before forking it (ferry
// spawn), in ferry doctor and in ferry base verify.
//
// The listing holds every entry's path, type, permissions, size and mtime
// (and a link's target), not its bytes. A write changes a file's mtime, and
// a process that restores it on purpose is outside what Ferry defends
// against; hashing the bytes of a large target takes seconds, a listing
// milliseconds. Measured on a shared 2-core machine: BenchmarkSeal (7,384
// files, the size of the benchmark's large target) takes 16-19 ms; ferry
// base verify on that workspace's base (8,114 entries) 28-38 ms of a spawn
// that takes about 0.9 s there, where 14 spawns alternated with a Ferry
// without the check showed medians of 0.944 s and 0.913 s.

// TargetSeal is what base.json records of the target.
type TargetSeal struct {
	Digest  string `json:"digest"` // SHA-256 of the listing
	Entries int    `json:"entries"`
	Bytes   int64  `json:"bytes"`
}

// listing walks target and returns its seal and the entries whose mtime is
// after since (changed or added after the base was built). It reads each
// directory once and stats its entries relative to the directory's
// descriptor (fstatat), in name order: resolving every full path again
// made the walk twice as slow on the benchmark's large target.
func listing(target string, since time.Time) (TargetSeal, []string, error) {
	w := &lister{h: sha256.New(), since: since}
	var st unix.Stat_t
	if err := unix.Lstat(target, &st); err != nil {
		return TargetSeal{}, nil, &os.PathError{Op: "lstat", Path: target, Err: err}
	}
	w.add(".", &st, "")
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := w.dir(unix.AT_FDCWD, target, ""); err != nil {
			return TargetSeal{}, nil, err
		}
	}
	w.seal.Digest = hex.EncodeToString(w.h.Sum(nil))
	return w.seal, w.newer, nil
}

type lister struct {
	h     hash.Hash
	since time.Time
	seal  TargetSeal
	newer []string
	line  []byte // one entry's line, reused: the walk is on spawn's path
}

// dir lists the directory name (relative to the directory parent) whose
// path inside the target is rel.
func (w *lister) dir(parent int, name, rel string) error {
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return err
	}
	sort.Strings(names)
	var st unix.Stat_t
	for _, n := range names {
		p := n
		if rel != "" {
			p = rel + "/" + n
		}
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &os.PathError{Op: "lstat", Path: p, Err: err}
		}
		link := ""
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			buf := make([]byte, 4096)
			k, err := unix.Readlinkat(fd, n, buf)
			if err != nil {
				return &os.PathError{Op: "readlink", Path: p, Err: err}
			}
			link = string(buf[:k])
		}
		w.add(p, &st, link)
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := w.dir(fd, n, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// add hashes one entry's line: path, mode, size (of a regular file), mtime
// and link target.
func (w *lister) add(rel string, st *unix.Stat_t, link string) {
	size := int64(0)
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
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
	w.line = append(w.line, '\n')
	w.h.Write(w.line)
	w.seal.Entries++
	w.seal.Bytes += size
	if !w.since.IsZero() && mtime.After(w.since) {
		w.newer = append(w.newer, rel)
	}
}

// Seal computes the seal of a target dir.
func Seal(target string) (TargetSeal, error) {
	s, _, err := listing(target, time.Time{})
	return s, err
}

var errNoSeal = errors.New("its base.json records no seal of the target (an older Ferry built it)")

// ChangedError is a ready base whose target no longer matches base.json.
type ChangedError struct {
	ID       string
	Target   string
	Recorded TargetSeal
	Found    TargetSeal
	Newer    []string // entries changed or added after the base was built, as far as mtimes tell
	Err      error    // the target could not be read
}

func (e *ChangedError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("base %s's target %s cannot be read: %v", e.ID, e.Target, e.Err)
	}
	msg := fmt.Sprintf("base %s was changed after it was built: its target %s", e.ID, e.Target)
	switch {
	case len(e.Newer) > 0:
		names := e.Newer
		sort.Strings(names)
		more := ""
		if len(names) > 3 {
			names, more = names[:3], fmt.Sprintf(" and %d more", len(e.Newer)-3)
		}
		msg += fmt.Sprintf(" has entries written since (%s%s)", strings.Join(names, ", "), more)
	case e.Found.Entries != e.Recorded.Entries:
		msg += fmt.Sprintf(" holds %d entries, %d when it was built", e.Found.Entries, e.Recorded.Entries)
	default:
		msg += " differs from its record in base.json"
	}
	return msg
}

// Verify checks that ready base r's target is the one it was built with. A
// changed base is a *failure.Error of kind Refused wrapping a *ChangedError,
// with the fix in its hint.
func Verify(r *Record) error {
	if r.TargetSeal.Digest == "" {
		return failure.Wrap(failure.Refused, &ChangedError{ID: r.ID, Target: r.Target, Err: errNoSeal},
			"build it again with this Ferry: `ferry base --rebuild --rev "+short(r.Commit)+"`", "base %s cannot be trusted", r.ID)
	}
	found, newer, err := listing(r.Target, r.Created)
	ce := &ChangedError{ID: r.ID, Target: r.Target, Recorded: r.TargetSeal, Found: found, Newer: newer, Err: err}
	if err == nil && found == r.TargetSeal {
		return nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		ce.Err = fs.ErrNotExist
	}
	return failure.Wrap(failure.Refused, ce, fmt.Sprintf(
		"something outside Ferry's sandboxes wrote into it; rebuild it with `ferry base --rebuild --rev %s`, and remove agents spawned from it since then (`ferry rm`), whose forks may hold the change",
		short(r.Commit)), "base %s cannot be trusted", r.ID)
}
