package freshness

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// FreshenSkipped gives every file, symlink and directory under agentDir,
// agentDir included, that p did not stamp an mtime no older than notBefore:
// one with an older mtime gets the current time, or notBefore if the clock
// is behind it. So neither a hook that restores commit times nor a clock
// that went backwards can make an unstamped path look older than the base's
// build. Symlinks are changed as links, never followed; an entry named .git
// (the worktree's link to its repository, or a nested repository's) is
// neither changed nor entered. Access times are kept.
//
// p is the plan applied to agentDir; nil, or one never applied, stamped
// nothing, so everything is freshened. It returns how many paths it changed.
func FreshenSkipped(agentDir string, p *StampPlan, notBefore time.Time) (int, error) {
	root, err := canonicalDir(agentDir)
	if err != nil {
		return 0, fmt.Errorf("freshen %s: %w", agentDir, err)
	}
	var stamped map[string]bool
	if p != nil && p.applied {
		if p.agentRoot != root {
			return 0, fmt.Errorf("freshen %s: the stamp plan is for %s", agentDir, p.agentRoot)
		}
		stamped = p.stamped
	}
	to := time.Now()
	if to.Before(notBefore) {
		to = notBefore
	}
	n := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != root {
				return nil // removed while we walk: nothing left to freshen
			}
			return err
		}
		if d.Name() == ".git" && path != root {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := within(root, path)
		if stamped[rel] {
			return nil
		}
		changed, err := raiseMtime(path, notBefore, to)
		if err != nil {
			return err
		}
		if changed {
			n++
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("freshen %s: %w", agentDir, err)
	}
	return n, nil
}

// raiseMtime sets path's mtime (not following a symlink) to to when it is
// older than notBefore.
func raiseMtime(path string, notBefore, to time.Time) (bool, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	if !tsTime(st.Mtim).Before(notBefore) {
		return false, nil
	}
	ts := []unix.Timespec{st.Atim, unix.NsecToTimespec(to.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false, &os.PathError{Op: "utimensat", Path: path, Err: err}
	}
	return true, nil
}
