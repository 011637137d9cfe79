package git

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ResolvePath returns p as an absolute, cleaned path with symlinks resolved.
// Unlike filepath.EvalSymlinks it accepts a path whose trailing components do
// not exist: the longest existing prefix is resolved and the rest appended,
// so a worktree whose directory was deleted still compares equal to the path
// git recorded for it.
func ResolvePath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	var rest []string
	cur := abs
	for {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			for i := len(rest) - 1; i >= 0; i-- {
				real = filepath.Join(real, rest[i])
			}
			return real, nil
		}
		// A path below a regular file (ENOTDIR) cannot exist either.
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return "", err
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return abs, nil
		}
		rest = append(rest, filepath.Base(cur))
		cur = parent
	}
}

// SamePath reports whether a and b name the same location once made
// absolute and resolved with ResolvePath. Paths that cannot be resolved are
// compared as cleaned absolute paths.
func SamePath(a, b string) bool {
	ra, errA := ResolvePath(a)
	rb, errB := ResolvePath(b)
	if errA != nil || errB != nil {
		aa, _ := filepath.Abs(a)
		ab, _ := filepath.Abs(b)
		return aa == ab
	}
	return ra == rb
}

// exists reports whether p exists (without following a final symlink).
func exists(p string) (bool, error) {
	_, err := os.Lstat(p)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, err
}
