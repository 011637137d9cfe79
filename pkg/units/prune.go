package units

import (
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Pruned is what Prune removed. Bytes are the apparent sizes of the
// regular files removed (an output hard-linked to an uplifted file that
// stays frees nothing).
type Pruned struct {
	Units        int   // unused units removed whole
	Fingerprints int   // unused fingerprints removed from used units' shared dirs
	Orphans      int   // outputs named with a hash, without a fingerprint
	Files        int   // files and symlinks removed
	Bytes        int64 // their sizes
}

// IncompleteError is Prune refusing an observation that cannot be trusted.
type IncompleteError struct {
	Reasons []Reason
}

func (e *IncompleteError) Error() string {
	msg := fmt.Sprintf("the observation of the warm build's units is incomplete (%d reasons)", len(e.Reasons))
	if len(e.Reasons) > 0 {
		msg += ": " + e.Reasons[0].String()
	}
	return msg
}

// PruneError is a path Prune could not remove.
type PruneError struct {
	Path string // relative to the target
	Err  error
}

func (e *PruneError) Error() string { return fmt.Sprintf("prune %s: %v", e.Path, e.Err) }
func (e *PruneError) Unwrap() error { return e.Err }

// Prune deletes from o's target every unit the warm build did not use
// (its fingerprint dir, build dir, and outputs named with its hash), the
// unused fingerprints of used units' shared dirs, and the orphans. It
// leaves uplifted files, doc/, incremental/ and nested workspaces' target
// dirs. It refuses an incomplete observation (*IncompleteError). Every path
// is reached from the target without following a symlink, so nothing
// outside the target is touched; nothing a used unit holds is removed.
func Prune(o *Observation) (Pruned, error) {
	var p Pruned
	if !o.Complete() {
		return p, &IncompleteError{Reasons: o.Incomplete}
	}
	keep := map[string]bool{}
	for _, u := range o.Used() {
		for _, q := range u.Paths {
			keep[q] = true
		}
	}
	root, err := unix.Open(o.Target, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return p, &PruneError{Path: ".", Err: err}
	}
	defer unix.Close(root)
	remove := func(rel string) error {
		if keep[rel] {
			return nil
		}
		files, bytes, err := removeUnder(root, rel)
		p.Files += files
		p.Bytes += bytes
		if err != nil {
			return &PruneError{Path: rel, Err: err}
		}
		return nil
	}
	for _, u := range o.Units {
		if u.Used {
			for _, f := range u.Fingerprints {
				if !f.Dropped {
					continue
				}
				for _, name := range f.Files {
					if err := remove(path.Join(u.Dir, name)); err != nil {
						return p, err
					}
				}
				p.Fingerprints++
			}
			continue
		}
		// Outputs first and the fingerprint dir last: a prune cut short
		// leaves no unit with a fingerprint and missing outputs.
		paths := append([]string(nil), u.Paths...)
		sort.SliceStable(paths, func(i, j int) bool { return paths[i] != u.Dir && paths[j] == u.Dir })
		for _, q := range paths {
			if err := remove(q); err != nil {
				return p, err
			}
		}
		p.Units++
		if u.Layout == BuildUnits {
			// build/<pkg>/ goes with its last unit, as in a cold build.
			if err := removeEmptyDir(root, path.Dir(u.Paths[0])); err != nil {
				return p, &PruneError{Path: path.Dir(u.Paths[0]), Err: err}
			}
		}
	}
	for _, q := range o.Orphans {
		if err := remove(q); err != nil {
			return p, err
		}
		p.Orphans++
	}
	return p, nil
}

// removeEmptyDir removes the directory rel below root if it is empty.
func removeEmptyDir(root int, rel string) error {
	parent, err := openDir(root, path.Dir(rel))
	if err != nil || parent < 0 {
		return err
	}
	defer unix.Close(parent)
	err = unix.Unlinkat(parent, path.Base(rel), unix.AT_REMOVEDIR)
	if err == nil || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// openDir opens the directory rel below root ("." for root itself)
// without following a symlink on the way; -1 when it is gone.
func openDir(root int, rel string) (int, error) {
	dir, err := unix.Dup(root)
	if err != nil {
		return -1, err
	}
	if rel == "." || rel == "" {
		return dir, nil
	}
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." || c == ".." {
			unix.Close(dir)
			return -1, fmt.Errorf("not a plain relative path: %q", rel)
		}
		fd, err := unix.Openat(dir, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(dir)
		if errors.Is(err, unix.ENOENT) {
			return -1, nil
		}
		if err != nil {
			return -1, err
		}
		dir = fd
	}
	return dir, nil
}

// removeUnder removes rel (relative, with forward slashes) below the
// directory root, and everything in it, never following a symlink: every
// directory on the way is opened with O_NOFOLLOW from its parent. A path
// already gone is not an error.
func removeUnder(root int, rel string) (files int, bytes int64, err error) {
	name := path.Base(rel)
	if rel == "" || name == "." || name == ".." || name == "/" {
		return 0, 0, fmt.Errorf("not a plain relative path: %q", rel)
	}
	dir, err := openDir(root, path.Dir(rel))
	if err != nil || dir < 0 {
		return 0, 0, err
	}
	defer unix.Close(dir)
	return removeAt(dir, name)
}

// removeAt removes name in the directory dir, recursively, without
// following symlinks.
func removeAt(dir int, name string) (files int, bytes int64, err error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, 0, nil
		}
		return 0, 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(dir, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return 0, 0, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			bytes = st.Size
		}
		return 1, bytes, nil
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, err
	}
	f := os.NewFile(uintptr(fd), name)
	names, err := f.Readdirnames(-1)
	if err != nil {
		f.Close()
		return 0, 0, err
	}
	for _, n := range names {
		nf, nb, err := removeAt(fd, n)
		files += nf
		bytes += nb
		if err != nil {
			f.Close()
			return files, bytes, err
		}
	}
	f.Close()
	if err := unix.Unlinkat(dir, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return files, bytes, err
	}
	return files, bytes, nil
}
