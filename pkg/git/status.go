package git

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// StatusEntry is one line of `git status --porcelain=v1`.
type StatusEntry struct {
	// X is the index status and Y the worktree status (' ', 'M', 'T', 'A',
	// 'D', 'R', 'C', 'U'); both are '?' for an untracked path and '!' for
	// an ignored one.
	X, Y byte
	Path string // relative to the worktree top; a directory ends in '/'
	Orig string // the source of a rename or copy, else ""
}

// Dirty returns the status of the worktree at dir: changed tracked paths,
// every untracked file (not just its directory), and the ignored paths that
// match an ignore rule (an ignored directory appears once, as "dir/",
// without its contents). An empty result means the worktree is clean.
//
// It runs with --no-optional-locks, so a status taken from the outside
// (gc looking at an agent) never holds the index lock while the agent's own
// git commands want it; the price is that git does not save its refreshed
// index stat data.
func (r *Repo) Dirty(dir string) ([]StatusEntry, error) {
	if dir == "" {
		dir = r.Top
	}
	out, err := runWith(dir, []string{"--no-optional-locks"},
		"status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignored=matching")
	if err != nil {
		return nil, wrapf(err, "status of %s", dir)
	}
	st, err := parseStatus(out)
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", dir, err)
	}
	return st, nil
}

// parseStatus reads porcelain v1 with -z: "XY path\0", followed by
// "orig\0" when X or Y is a rename or copy.
func parseStatus(out []byte) ([]StatusEntry, error) {
	var (
		entries  []StatusEntry
		wantOrig bool
	)
	err := eachRecord(out, func(rec string) error {
		if wantOrig {
			entries[len(entries)-1].Orig = rec
			wantOrig = false
			return nil
		}
		if len(rec) < 4 || rec[2] != ' ' {
			return fmt.Errorf("malformed status line %q", rec)
		}
		e := StatusEntry{X: rec[0], Y: rec[1], Path: rec[3:]}
		entries = append(entries, e)
		wantOrig = e.X == 'R' || e.X == 'C' || e.Y == 'R' || e.Y == 'C'
		return nil
	})
	if err != nil {
		return nil, err
	}
	if wantOrig {
		return nil, fmt.Errorf("status ends inside the rename of %q", entries[len(entries)-1].Path)
	}
	return entries, nil
}

// Untracked returns the untracked paths git status shows at or below path
// (relative to dir) in the worktree at dir: none when the ignore rules
// ignore all of it.
func (r *Repo) Untracked(dir, path string) ([]string, error) {
	out, err := runWith(dir, []string{"--no-optional-locks"},
		"status", "--porcelain=v1", "-z", "--untracked-files=all", "--", path)
	if err != nil {
		return nil, wrapf(err, "status of %s in %s", path, dir)
	}
	st, err := parseStatus(out)
	if err != nil {
		return nil, fmt.Errorf("status of %s in %s: %w", path, dir, err)
	}
	var paths []string
	for _, e := range st {
		if e.X == '?' {
			paths = append(paths, e.Path)
		}
	}
	return paths, nil
}

// Ignored reports whether the worktree at dir ignores path (relative to
// dir) as it is now: git matches a pattern with a trailing slash only
// against a directory, and sees a symbolic link as a file.
func (r *Repo) Ignored(dir, path string) (bool, error) {
	_, err := run(dir, "check-ignore", "-q", "--", path)
	if err == nil {
		return true, nil
	}
	var ce *CommandError
	if errors.As(err, &ce) && ce.ExitCode() == 1 {
		return false, nil
	}
	return false, wrapf(err, "check whether %s ignores %s", dir, path)
}

// Exclude makes every worktree of the repository ignore pattern, a line of
// gitignore syntax, through the exclude file of its common git dir
// (info/exclude, which git reads in every worktree and never commits),
// unless that file has the line already. It appends the line, so a
// concurrent edit of the file loses nothing; two concurrent calls may
// write it twice, which git reads as once.
func (r *Repo) Exclude(pattern string) error {
	out, err := run(r.Top, "rev-parse", "--git-path", "info/exclude")
	if err != nil {
		return wrapf(err, "locate the exclude file of %s", r.Top)
	}
	path := strings.TrimRight(string(out), "\n")
	if !filepath.IsAbs(path) {
		path = filepath.Join(r.Top, path)
	}
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	for line := range strings.Lines(string(data)) {
		if strings.TrimRight(line, "\r\n") == pattern {
			return nil
		}
	}
	add := pattern + "\n"
	if len(data) > 0 && data[len(data)-1] != '\n' {
		add = "\n" + add
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(add); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
