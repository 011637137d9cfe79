package units

import (
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Pruned is what Prune removed. Bytes are the apparent sizes of the
// regular files removed (an output hard-linked to an uplifted file that
// stays frees nothing).
type Pruned struct {
	Units        int   // unused units removed whole
	Fingerprints int   // unused fingerprints removed from used units' shared dirs
	Orphans      int   // outputs named with a hash, without a fingerprint
	Incremental  int   // rustc's incremental dirs of crates whose units went (staleIncremental)
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
// unused fingerprints of used units' shared dirs, the orphans, and the
// incremental dirs those units most likely left (staleIncremental). It
// leaves uplifted files, doc/, the rest of incremental/ and nested
// workspaces' target dirs. It refuses an incomplete observation
// (*IncompleteError). Every path is reached from the target without
// following a symlink, so nothing outside the target is touched; nothing
// a used unit holds is removed.
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
	stale, err := staleIncremental(root, o)
	if err != nil {
		return p, err
	}
	for _, q := range stale {
		if err := remove(q); err != nil {
			return p, err
		}
		p.Incremental++
	}
	return p, nil
}

// staleIncremental lists the incremental dirs Prune removes. rustc keeps a
// crate's incremental state in <profile>/incremental/<crate>-<hash>/, the
// hash taken of the crate's name, kind and -C metadata, which no file of
// Cargo's records: no unit can be told to own a dir. But a unit whose
// metadata changed (a dependency or a feature added: the unit and every
// unit depending on it) is a unit gone and a unit compiled, and the
// compile wrote into the new hash's dir. So a dir goes when a unit of its
// profile and crate was not used (or a used unit's fingerprint of the
// crate was dropped) and the warm build did not write in it (its mtime is
// before the threshold: a session made or removed changes it). Otherwise
// every change of unit inputs would leave one more dir per crate it
// reached, which no cold build has. A dir wrongly taken for stale (a crate
// with another unit of the same name that was fresh) costs that unit's
// next compile its incremental reuse, never a wrong build: rustc starts
// the state anew.
func staleIncremental(root int, o *Observation) ([]string, error) {
	crates := map[string]map[string]bool{} // profile -> crate names
	for _, u := range o.Units {
		for _, f := range u.Fingerprints {
			if u.Used && !f.Dropped {
				continue
			}
			c := fingerprintCrate(f.Name)
			if c == "" {
				continue
			}
			if crates[u.Profile] == nil {
				crates[u.Profile] = map[string]bool{}
			}
			crates[u.Profile][c] = true
		}
	}
	profiles := make([]string, 0, len(crates))
	for prof := range crates {
		profiles = append(profiles, prof)
	}
	sort.Strings(profiles)
	var stale []string
	for _, prof := range profiles {
		rel := path.Join(prof, "incremental")
		dir, err := openDir(root, rel)
		if err != nil {
			return nil, &PruneError{Path: rel, Err: err}
		}
		if dir < 0 {
			continue
		}
		f := os.NewFile(uintptr(dir), rel)
		names, err := f.Readdirnames(-1)
		if err != nil {
			f.Close()
			return nil, &PruneError{Path: rel, Err: err}
		}
		sort.Strings(names)
		for _, name := range names {
			i := strings.LastIndexByte(name, '-')
			if i <= 0 || !crates[prof][name[:i]] {
				continue
			}
			var st unix.Stat_t
			if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				continue
			}
			if !time.Unix(st.Mtim.Unix()).Before(o.Threshold) {
				continue // the warm build made or ended a session in it
			}
			stale = append(stale, path.Join(rel, name))
		}
		f.Close()
	}
	return stale, nil
}

// fingerprintCrate is the crate name rustc compiled for the fingerprint
// named name (<flavor><kind>-<target name>: see scan.go), as it names the
// crate's incremental dir; "" for a build script's run and rustdoc, which
// keep no incremental state, and for a name of no known kind.
func fingerprintCrate(name string) string {
	if Kind(name) != "compile" {
		return ""
	}
	name = strings.TrimPrefix(name, "test-")
	for _, kind := range []string{"lib-", "bin-", "example-", "integration-test-", "bench-", "build-script-"} {
		if t, ok := strings.CutPrefix(name, kind); ok && t != "" {
			return strings.ReplaceAll(t, "-", "_")
		}
	}
	return ""
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
