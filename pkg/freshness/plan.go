package freshness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ferrydev/ferry/pkg/git"
)

// Input is what Verify compares: an agent's fresh checkout against the base
// checkout its target was built from.
type Input struct {
	AgentDir   string      // the agent's worktree (a fresh checkout)
	AgentIndex []git.Entry // `git ls-files -s` of the agent worktree, all stages
	BaseDir    string      // the base checkout (<base>/src): stamped, read-only
	BaseTree   []git.Entry // `git ls-tree -r` of the base commit
}

// Skip is a tracked file or directory of the agent checkout that Verify or
// Apply did not stamp, and why. A directory's path is "" for the top level.
type Skip struct {
	Path   string
	Reason string
}

// Reasons a tracked path is not stamped.
const (
	ReasonUnmerged       = "unmerged"
	ReasonSymlink        = "symlink"
	ReasonSubmodule      = "submodule"
	ReasonNotInBase      = "not in the base commit"
	ReasonIndexDiffers   = "mode or blob differs from the base commit"
	ReasonLink           = "reachable through a symlink that resolves differently in the base"
	ReasonParent         = "a parent is not a directory in one of the checkouts"
	ReasonNotRegular     = "not a regular file in the working tree"
	ReasonBaseNotRegular = "not a regular file in the base checkout"
	ReasonContent        = "content differs from the base checkout"
	ReasonUnreadable     = "cannot be compared"
	ReasonNotDir         = "not a directory in one of the checkouts"
	ReasonEntries        = "entries differ from the base checkout"
	ReasonRacy           = "changed during verification"
	ReasonChanged        = "changed after verification"
)

// StampPlan lists what may be stamped in an agent checkout. Only Verify
// builds one; the zero value stamps nothing.
type StampPlan struct {
	agentRoot string // canonical
	in        Input
	links     []linkCheck // the symlinks that resolve differently in the two checkouts
	files     []item
	dirs      []item
	skipped   []Skip
	applied   bool
	stamped   map[string]bool // what Apply did stamp
}

// item is a path to stamp and its metadata when it was verified.
type item struct {
	path string
	meta meta      // the agent's, when verified: Apply stamps only that inode
	to   time.Time // the mtime to give it: the base checkout's entry's
}

// Files returns the tracked files the plan stamps, sorted; after Apply, the
// ones it did stamp.
func (p *StampPlan) Files() []string { return p.paths(p.files) }

// Dirs returns the directories the plan stamps, sorted, "" being the top
// level; after Apply, the ones it did stamp.
func (p *StampPlan) Dirs() []string { return p.paths(p.dirs) }

// Skipped returns the tracked files and directories that are not stamped,
// with the reason, sorted by path; after Apply it includes those that
// changed since verification.
func (p *StampPlan) Skipped() []Skip {
	out := slices.Clone(p.skipped)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func (p *StampPlan) paths(items []item) []string {
	out := make([]string, 0, len(items))
	for _, it := range items {
		if !p.applied || p.stamped[it.path] {
			out = append(out, it.path)
		}
	}
	return out
}

var errSameDir = errors.New("the agent checkout is the base checkout")

func roots(in Input) (agentRoot, baseRoot string, err error) {
	if agentRoot, err = canonicalDir(in.AgentDir); err != nil {
		return "", "", fmt.Errorf("agent checkout: %w", err)
	}
	if baseRoot, err = canonicalDir(in.BaseDir); err != nil {
		return "", "", fmt.Errorf("base checkout: %w", err)
	}
	if agentRoot == baseRoot {
		return "", "", fmt.Errorf("%s: %w", agentRoot, errSameDir)
	}
	return agentRoot, baseRoot, nil
}

// Verify decides which tracked files and directories of the agent's checkout
// may carry the mtime of their twin in the base checkout (invariant 1). A file may if it is at merge stage 0, a
// regular file, has the base commit's mode and blob, has the base
// checkout's bytes, and no symlink that resolves differently in the two
// checkouts leads to it or to a directory above it. A directory may if its
// entry names are the base checkout's. Verify changes nothing; Apply stamps.
func Verify(in Input) (*StampPlan, error) {
	agentRoot, baseRoot, err := roots(in)
	if err != nil {
		return nil, fmt.Errorf("verify stamping: %w", err)
	}
	base := make(map[string]git.Entry, len(in.BaseTree))
	for _, e := range in.BaseTree {
		if e.Stage != 0 {
			return nil, fmt.Errorf("verify stamping: base tree entry %s has stage %d", e.Path, e.Stage)
		}
		if _, dup := base[e.Path]; dup {
			return nil, fmt.Errorf("verify stamping: base tree lists %s twice", e.Path)
		}
		base[e.Path] = e
	}
	unmerged := map[string]bool{}
	seen := map[git.Entry]bool{}
	for _, e := range in.AgentIndex {
		if e.Stage != 0 {
			unmerged[e.Path] = true
		}
		k := git.Entry{Stage: e.Stage, Path: e.Path}
		if seen[k] {
			return nil, fmt.Errorf("verify stamping: agent index lists %s at stage %d twice", e.Path, e.Stage)
		}
		seen[k] = true
	}

	links := retargeted(agentRoot, baseRoot, in.AgentIndex, in.BaseTree)
	x := exclusion{}
	for _, l := range links {
		x.add(l, agentRoot, baseRoot)
	}
	v := &verifier{agentRoot: agentRoot, baseRoot: baseRoot, x: x, realDirs: map[string]bool{}}
	plan := &StampPlan{agentRoot: agentRoot, in: in, links: links}

	// Cheap checks first; the survivors have their bytes compared.
	var todo []string
	for _, e := range in.AgentIndex {
		if e.Stage != 0 || unmerged[e.Path] {
			continue // reported once, below
		}
		if r := v.precheck(e, base, unmerged); r != "" {
			plan.skipped = append(plan.skipped, Skip{e.Path, r})
			continue
		}
		todo = append(todo, e.Path)
	}
	for p := range unmerged {
		plan.skipped = append(plan.skipped, Skip{p, ReasonUnmerged})
	}
	results := make([]fileResult, len(todo))
	batches := compareBatches(todo)
	work := make(chan []int, len(batches))
	for _, b := range batches {
		work <- b
	}
	close(work)
	var wg sync.WaitGroup
	for range min(8, len(batches)) {
		wg.Go(func() {
			var bufs compareBuffers
			for b := range work {
				v.compareDir(todo, b, results, &bufs)
			}
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.reason != "" {
			plan.skipped = append(plan.skipped, Skip{todo[i], r.reason})
			continue
		}
		plan.files = append(plan.files, item{todo[i], r.meta, r.to})
	}
	sort.Slice(plan.files, func(i, j int) bool { return plan.files[i].path < plan.files[j].path })

	for _, d := range git.TrackedDirs(in.AgentIndex) {
		m, to, reason := v.checkDir(d)
		if reason != "" {
			plan.skipped = append(plan.skipped, Skip{d, reason})
			continue
		}
		plan.dirs = append(plan.dirs, item{d, m, to})
	}
	return plan, nil
}

type verifier struct {
	agentRoot, baseRoot string
	x                   exclusion
	realDirs            map[string]bool // absolute path: a directory, not a link
}

func (v *verifier) agentPath(rel string) string {
	return filepath.Join(v.agentRoot, filepath.FromSlash(rel))
}

func (v *verifier) basePath(rel string) string {
	return filepath.Join(v.baseRoot, filepath.FromSlash(rel))
}

// precheck applies every rule but the content comparison to a stage-0 entry
// of the agent index; it returns why the file is not stamped, or "".
func (v *verifier) precheck(e git.Entry, base map[string]git.Entry, unmerged map[string]bool) string {
	switch {
	case unmerged[e.Path]:
		return ReasonUnmerged // rule 1; Verify reports these itself
	case e.Mode == git.ModeSymlink:
		return ReasonSymlink
	case e.Mode == git.ModeGitlink:
		return ReasonSubmodule
	case e.Mode != git.ModeFile && e.Mode != git.ModeExecutable:
		return fmt.Sprintf("mode %o", e.Mode)
	}
	b, ok := base[e.Path]
	switch {
	case !ok:
		return ReasonNotInBase
	case b.Mode != e.Mode || b.Object != e.Object:
		return ReasonIndexDiffers
	case v.x.covers(e.Path):
		return ReasonLink
	case !v.parentsReal(e.Path):
		return ReasonParent
	}
	return ""
}

// parentsReal reports whether every directory above rel, up to the top, is
// a directory (not a symlink to one) in both checkouts, so that a path
// names the same file as in git's view of the tree.
func (v *verifier) parentsReal(rel string) bool {
	for d := path.Dir(rel); d != "." && d != "/"; d = path.Dir(d) {
		if !v.realDir(v.agentPath(d)) || !v.realDir(v.basePath(d)) {
			return false
		}
	}
	return true
}

func (v *verifier) realDir(p string) bool {
	ok, seen := v.realDirs[p]
	if !seen {
		m, err := lstatMeta(p)
		ok = err == nil && m.isDir()
		v.realDirs[p] = ok
	}
	return ok
}

type fileResult struct {
	meta   meta
	to     time.Time // the base file's mtime
	reason string
}

// compareBatch bounds the files of one directory a comparing goroutine
// takes at a time, so that a directory of many files is compared on
// every goroutine.
const compareBatch = 64

// compareBatches splits the indices of paths (slash-separated) into
// batches of files of one directory, at most compareBatch each.
func compareBatches(paths []string) [][]int {
	var dirs []string
	byDir := map[string][]int{}
	for i, p := range paths {
		d := path.Dir(p)
		if _, ok := byDir[d]; !ok {
			dirs = append(dirs, d)
		}
		byDir[d] = append(byDir[d], i)
	}
	var out [][]int
	for _, d := range dirs {
		for idx := byDir[d]; len(idx) > 0; {
			n := min(len(idx), compareBatch)
			out = append(out, idx[:n])
			idx = idx[n:]
		}
	}
	return out
}

// compareDir compares the files todo[i] for each i of batch, all in one
// directory, into results[i]: each stat'ed and opened relative to the
// directory in both checkouts (by its full path where a directory does
// not open). The directories' own paths resolve as the full paths do:
// precheck found both real directories.
func (v *verifier) compareDir(todo []string, batch []int, results []fileResult, bufs *compareBuffers) {
	dir := path.Dir(todo[batch[0]])
	if dir == "." {
		dir = ""
	}
	adir, aerr := openNoFollow(v.agentPath(dir), true)
	bdir, berr := openNoFollow(v.basePath(dir), true)
	for _, i := range batch {
		rel := todo[i]
		a, b := pathPlace(v.agentPath(rel)), pathPlace(v.basePath(rel))
		if aerr == nil {
			a.dfd, a.name = int(adir), path.Base(rel)
		}
		if berr == nil {
			b.dfd, b.name = int(bdir), path.Base(rel)
		}
		results[i] = compareFile(a, b, bufs)
	}
	if aerr == nil {
		adir.close()
	}
	if berr == nil {
		bdir.close()
	}
}

// compareFile compares the agent's file a with the base checkout's b, byte
// for byte. The agent file's metadata is taken before reading and must be
// the same after, and the descriptor read must be the inode lstat saw.
func compareFile(a, b place, bufs *compareBuffers) fileResult {
	before, err := a.lstat()
	if err != nil || !before.isRegular() {
		return fileResult{reason: ReasonNotRegular}
	}
	bm, err := b.lstat()
	if err != nil || !bm.isRegular() {
		return fileResult{reason: ReasonBaseNotRegular}
	}
	if before.size != bm.size {
		return fileResult{reason: ReasonContent}
	}
	same, err := bufs.sameBytes(a, before, b, bm)
	if err != nil {
		if errors.Is(err, errRacy) {
			return fileResult{reason: ReasonRacy}
		}
		return fileResult{reason: ReasonUnreadable + ": " + err.Error()}
	}
	if !same {
		return fileResult{reason: ReasonContent}
	}
	after, err := a.lstat()
	if err != nil || after != before {
		return fileResult{reason: ReasonRacy}
	}
	return fileResult{meta: before, to: tsTime(bm.mtime)}
}

var errRacy = errors.New("file replaced while being verified")

// compareBuffers are one comparing goroutine's read buffers, grown to the
// largest file it compared up to a chunk. Most tracked files are small,
// and a fresh pair of 64 KiB chunks per file cost more than the reads: on
// the benchmark's large workspace (1,238 files) Verify took 74-96 ms with
// them, 26-35 ms without.
type compareBuffers struct{ a, b []byte }

// sameBytes streams both files and compares them; each must still be the
// inode described by its meta once open.
func (bufs *compareBuffers) sameBytes(ap place, am meta, bp place, bm meta) (bool, error) {
	af, err := openChecked(ap, am)
	if err != nil {
		return false, err
	}
	defer af.close()
	bf, err := openChecked(bp, bm)
	if err != nil {
		return false, err
	}
	defer bf.close()
	const chunk = 64 << 10
	// One more byte than the file: a file that grew since lstat fills
	// the buffer and is read on, to be caught below.
	if n := int(min(am.size+1, chunk)); len(bufs.a) < n {
		bufs.a, bufs.b = make([]byte, n), make([]byte, n)
	}
	abuf, bbuf := bufs.a, bufs.b
	var total int64
	for {
		an, aerr := af.read(abuf)
		bn, berr := bf.read(bbuf)
		if err := errors.Join(aerr, berr); err != nil {
			return false, err
		}
		if an != bn || !bytes.Equal(abuf[:an], bbuf[:bn]) {
			return false, nil
		}
		total += int64(an)
		if an < len(abuf) {
			// A read of a regular file returns less than asked only
			// at its end, so both ended here, without the read that
			// returns nothing. A length other than the one lstat gave
			// means a file changed while it was read (or a read
			// returned short: not stamped either).
			if total != am.size || total != bm.size {
				return false, errRacy
			}
			return true, nil
		}
	}
}

func openChecked(p place, want meta) (fd, error) {
	f, err := p.open()
	if err != nil {
		return -1, err
	}
	got, err := f.meta()
	if err != nil {
		f.close()
		return -1, &os.PathError{Op: "fstat", Path: p.path, Err: err}
	}
	if got.dev != want.dev || got.ino != want.ino {
		f.close()
		return -1, errRacy
	}
	return f, nil
}

// checkDir decides whether the tracked directory rel may be stamped: it must
// be a directory in both checkouts, not below a link that resolves
// differently, and hold the same entry names as the base's (".git" at the
// top is ignored on both sides).
func (v *verifier) checkDir(rel string) (meta, time.Time, string) {
	if v.x.covers(rel) {
		return meta{}, time.Time{}, ReasonLink
	}
	ap, bp := v.agentPath(rel), v.basePath(rel)
	if rel != "" {
		if !v.parentsReal(rel) {
			return meta{}, time.Time{}, ReasonParent
		}
		if !v.realDir(ap) || !v.realDir(bp) {
			return meta{}, time.Time{}, ReasonNotDir
		}
	}
	before, err := lstatMeta(ap)
	if err != nil || !before.isDir() {
		return meta{}, time.Time{}, ReasonNotDir
	}
	bm, err := lstatMeta(bp)
	if err != nil || !bm.isDir() {
		return meta{}, time.Time{}, ReasonNotDir
	}
	an, aerr := entryNames(ap, rel == "")
	bn, berr := entryNames(bp, rel == "")
	if aerr != nil || berr != nil {
		return meta{}, time.Time{}, ReasonUnreadable + ": " + errors.Join(aerr, berr).Error()
	}
	if !slices.Equal(an, bn) {
		return meta{}, time.Time{}, ReasonEntries
	}
	if after, err := lstatMeta(ap); err != nil || after != before {
		return meta{}, time.Time{}, ReasonRacy
	}
	return before, tsTime(bm.mtime), ""
}

func entryNames(dir string, top bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if top && e.Name() == ".git" {
			continue
		}
		names = append(names, e.Name())
	}
	return names, nil // os.ReadDir sorts by name
}

// Apply stamps the plan's files and directories: each gets the mtime its
// twin in the base checkout had when it was verified. In a cold base that
// is StampTime for every tracked entry; in a seeded base it is StampTime
// for what seeding proved to be the seed's and the refresh's time for the
// rest. Copying the base's mtime rather than setting a fixed one keeps the
// fingerprints Cargo keeps as mtime values equal: a build script without
// rerun-if-changed records the newest file of its package as "mtime
// (path)" and compares that string, not an order, so an agent file stamped
// to another time than the base's twin would rerun it. Before each
// one it checks that the path is still the inode verified, with the same
// type, permissions, size, mtime and ctime; one that changed is not stamped
// and is listed by Skipped (FreshenSkipped then raises its mtime). Symlinks
// are never followed. A plan is applied at most once.
func (p *StampPlan) Apply() (Stats, error) {
	var st Stats
	if p.applied {
		return st, errors.New("stamp plan already applied")
	}
	p.applied = true
	p.stamped = make(map[string]bool, len(p.files)+len(p.dirs))
	for _, list := range []struct {
		items []item
		n     *int
	}{{p.files, &st.Files}, {p.dirs, &st.Dirs}} {
		for _, it := range list.items {
			ok, err := stampIfUnchanged(filepath.Join(p.agentRoot, filepath.FromSlash(it.path)), it.meta, it.to)
			if err != nil {
				return st, err
			}
			if !ok {
				p.skipped = append(p.skipped, Skip{it.path, ReasonChanged})
				continue
			}
			p.stamped[it.path] = true
			*list.n++
		}
	}
	return st, nil
}
