// Package freshness decides which files of a checkout Cargo may judge fresh
// against a base's build, and stamps them.
//
// Cargo compares source mtimes with its fingerprint files. A base checkout is
// stamped: every tracked file and directory gets StampTime, far older than
// any artifact, so the warm build's outputs are newer than every source. An
// agent's checkout may reuse those outputs only where its file equals the
// base's, and so only such files may carry the base's mtime (invariant 1 of
// the architecture contract: StampTime in a cold base, or what a seeded
// base's checkout carries); everything else must look newer than the base.
//
// StampBaseCheckout is the only function here that stamps without verifying,
// and it is meant for one caller: the base builder, on a fresh checkout,
// which is the reference itself.
package freshness

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/git"
)

// StampTime is the mtime of every stamped file and directory.
var StampTime = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)

// Stats counts what a stamping pass touched.
type Stats struct {
	Files int `json:"files"`
	Dirs  int `json:"dirs"`
}

const (
	modeGitlink = git.ModeGitlink
)

// StampBaseCheckout sets StampTime on every tracked entry of the fresh base
// checkout at dir (as listed by its index) and on every directory holding
// one, including dir itself. Symlinks are stamped as links, never followed.
// Submodules (gitlinks) are not this checkout's files and are left alone.
func StampBaseCheckout(dir string, entries []git.Entry) (Stats, error) {
	var st Stats
	dirs := map[string]bool{"": true}
	for _, e := range entries {
		if e.Stage != 0 {
			return st, fmt.Errorf("stamp base checkout: %s is unmerged", e.Path)
		}
		if e.Mode == modeGitlink {
			continue
		}
		if err := stamp(filepath.Join(dir, e.Path)); err != nil {
			return st, err
		}
		st.Files++
		for d := filepath.Dir(e.Path); d != "." && d != "/" && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	// Stamping a file does not touch its directory, so the order is free;
	// deepest first keeps it obviously so.
	list := make([]string, 0, len(dirs))
	for d := range dirs {
		list = append(list, d)
	}
	sort.Slice(list, func(i, j int) bool {
		di, dj := strings.Count(list[i], "/"), strings.Count(list[j], "/")
		if di != dj {
			return di > dj
		}
		return list[i] > list[j]
	})
	for _, d := range list {
		if err := stamp(filepath.Join(dir, d)); err != nil {
			return st, err
		}
		st.Dirs++
	}
	return st, nil
}

func stamp(path string) error {
	ts := unix.NsecToTimespec(StampTime.UnixNano())
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("stamp %s: %w", path, err)
	}
	return nil
}
