package base

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

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
// against. Measured on the benchmark's large workspace (100 crates, 7,384
// target files, 1.1 GB): the listing takes about 15 ms with a warm cache,
// where hashing the bytes took seconds; see make bench.

// TargetSeal is what base.json records of the target.
type TargetSeal struct {
	Digest  string `json:"digest"` // SHA-256 of the listing
	Entries int    `json:"entries"`
	Bytes   int64  `json:"bytes"`
}

// listing walks target and returns its seal and the entries whose mtime is
// after since (changed or added after the base was built).
func listing(target string, since time.Time) (TargetSeal, []string, error) {
	h := sha256.New()
	var seal TargetSeal
	var newer []string
	var line []byte // one entry's line, reused: the walk is on spawn's path
	err := filepath.WalkDir(target, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(target, p)
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		size := int64(0)
		if fi.Mode().IsRegular() {
			size = fi.Size()
		}
		line = strconv.AppendQuote(line[:0], rel)
		line = append(line, ' ')
		line = strconv.AppendUint(line, uint64(fi.Mode()), 8)
		line = append(line, ' ')
		line = strconv.AppendInt(line, size, 10)
		line = append(line, ' ')
		line = strconv.AppendInt(line, fi.ModTime().UnixNano(), 10)
		line = append(line, ' ')
		line = strconv.AppendQuote(line, link)
		line = append(line, '\n')
		h.Write(line)
		seal.Entries++
		seal.Bytes += size
		if !since.IsZero() && fi.ModTime().After(since) {
			newer = append(newer, rel)
		}
		return nil
	})
	if err != nil {
		return TargetSeal{}, nil, err
	}
	seal.Digest = hex.EncodeToString(h.Sum(nil))
	return seal, newer, nil
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
