package git

import (
	"bytes"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Git's file modes as they appear in the index and in trees.
const (
	ModeFile       uint32 = 0o100644
	ModeExecutable uint32 = 0o100755
	ModeSymlink    uint32 = 0o120000
	ModeGitlink    uint32 = 0o160000 // a submodule's commit
	ModeTree       uint32 = 0o040000
)

// Entry is one index or tree entry.
type Entry struct {
	Mode   uint32 // e.g. ModeFile, ModeExecutable, ModeSymlink, ModeGitlink
	Object string // blob id (commit id for a gitlink)
	Stage  int    // merge stage: 0 normally, 1-3 in a conflict
	Path   string // slash-separated, relative to the worktree top
}

// LsFiles returns the index of the worktree at dir (`ls-files -s`): every
// tracked path with its mode, blob and merge stage, a conflicted path once
// per stage. dir may be any directory of the worktree; paths are always
// relative to its top level.
func (r *Repo) LsFiles(dir string) ([]Entry, error) {
	if dir == "" {
		dir = r.Top
	}
	// ":/" (the top of the worktree) with --full-name lists the whole index
	// even when dir is a subdirectory.
	out, err := run(dir, "ls-files", "--stage", "-z", "--full-name", "--", ":/")
	if err != nil {
		return nil, wrapf(err, "list the index of %s", dir)
	}
	var entries []Entry
	err = eachRecord(out, func(rec string) error {
		meta, p, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 3 {
			return fmt.Errorf("malformed ls-files line %q", rec)
		}
		mode, err := strconv.ParseUint(f[0], 8, 32)
		if err != nil {
			return fmt.Errorf("malformed mode in ls-files line %q", rec)
		}
		stage, err := strconv.Atoi(f[2])
		if err != nil || stage < 0 || stage > 3 {
			return fmt.Errorf("malformed stage in ls-files line %q", rec)
		}
		entries = append(entries, Entry{Mode: uint32(mode), Object: f[1], Stage: stage, Path: p})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the index of %s: %w", dir, err)
	}
	return entries, nil
}

// LsTree returns every non-tree entry of commit's tree, recursively
// (`ls-tree -r --full-tree`), with Stage 0. Gitlinks (submodules) are
// entries; their contents are not listed.
func (r *Repo) LsTree(commit string) ([]Entry, error) {
	out, err := run(r.Top, "ls-tree", "-r", "-z", "--full-tree", "--end-of-options", commit)
	if err != nil {
		return nil, wrapf(err, "list the tree of %s", commit)
	}
	var entries []Entry
	err = eachRecord(out, func(rec string) error {
		meta, p, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 3 {
			return fmt.Errorf("malformed ls-tree line %q", rec)
		}
		mode, err := strconv.ParseUint(f[0], 8, 32)
		if err != nil {
			return fmt.Errorf("malformed mode in ls-tree line %q", rec)
		}
		entries = append(entries, Entry{Mode: uint32(mode), Object: f[2], Path: p})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the tree of %s: %w", commit, err)
	}
	return entries, nil
}

// TreesDiffer reports whether commits a and b differ in the paths that
// pathspecs match (`git diff-tree --quiet`).
func (r *Repo) TreesDiffer(a, b string, pathspecs ...string) (bool, error) {
	_, err := run(r.Top, append([]string{"diff-tree", "--quiet", "-r", "--end-of-options", a, b, "--"}, pathspecs...)...)
	if err == nil {
		return false, nil
	}
	if exitCode(err) == 1 {
		return true, nil
	}
	return false, wrapf(err, "compare %s with %s", a, b)
}

// eachRecord calls fn for each NUL-terminated record of out.
func eachRecord(out []byte, fn func(string) error) error {
	for len(out) > 0 {
		i := bytes.IndexByte(out, 0)
		if i < 0 {
			return fmt.Errorf("unterminated record %q", out)
		}
		if err := fn(string(out[:i])); err != nil {
			return err
		}
		out = out[i+1:]
	}
	return nil
}

// TrackedDirs returns every directory that contains a tracked entry,
// directly or below it, including "" for the top level, sorted. A
// directory holding only a submodule counts; the submodule's own path does
// not.
func TrackedDirs(entries []Entry) []string {
	if len(entries) == 0 {
		return nil
	}
	seen := map[string]bool{"": true}
	for _, e := range entries {
		for d := path.Dir(e.Path); d != "." && d != "/" && !seen[d]; d = path.Dir(d) {
			seen[d] = true
		}
	}
	dirs := make([]string, 0, len(seen))
	for d := range seen {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	return dirs
}
