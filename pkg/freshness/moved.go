package freshness

// Changes whose mtime does not move.
//
// Cargo trusts mtimes: a file copied or moved into a checkout with its old
// mtime kept (cp -p, cp -a, rsync -a, tar x, mv from another directory,
// touch -d to an old date) looks no newer than the last build, and a
// symlink retargeted after a build leaves Cargo looking at the file the
// link used to reach. Stamping makes the first case certain between
// agents: every stamped file carries the base's old time, so one copied
// from another agent's worktree always looks older than this agent's last
// build. The kernel keeps what the mtime loses: each of these operations
// sets the inode's ctime (a rename, a copy, utimensat, a new link all do),
// and nothing can set a ctime but the clock. So before each build the shim
// calls FreshenMoved, which finds the tracked files and directories
// changed since the agent's last build whose mtime did not follow the
// change (mtime older than ctime) and gives them the current time, and the
// tracked symlinks changed since then, whose ends it freshens the same
// way.
//
// "The agent's last build" is the mark: the mtime of ferry-built in the
// agent's state dir (store.Agent.Freshness, writable in its sandbox, where
// the worktree's git directory is read-only; an agent of an older Ferry
// kept it in that git directory, and its first check looks at everything).
// Where the state dir is read-only after all, a check records nothing, as
// a failed check does, and the next one looks further back. A check
// records the time it *started*, less a margin,
// only after it has freshened everything it found, so a change made while
// it walks, or while the build it precedes runs, has a ctime after the
// mark and is found by the next check; a check that fails records nothing,
// and the next one looks further back. Two checks at once are safe: each
// records only a time before which it has handled every change, and a mark
// set lower than another's only makes the next check look further back.
//
// The margin (markMargin) covers the filesystem clock: the kernel stamps
// inodes from a coarse clock (up to a tick behind time.Now) truncated to
// the filesystem's granularity (a second or two on some), so a change just
// after the check started may carry a ctime a little before it. What a
// check looks at twice costs nothing: it has freshened it already, and a
// freshened file's mtime equals its ctime (UTIME_NOW sets both from one
// clock reading), so it is not picked again.
//
// What is picked that did not need to be: a chmod or chown, a new hard
// link, an editor that saves by renaming (its mtime trails the rename by
// microseconds) — each costs the units that read the file a rebuild, never
// a wrong build. What it cannot see: untracked files (a new file reaches a
// build only through a tracked one that names it, and that one changes),
// and files outside the checkout (a link's end outside it: see Moved.Outside).

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/git"
)

// MarkName is the file in an agent's state dir whose mtime is the
// start of the agent's last check (less markMargin): every change before
// it has been handled.
const MarkName = "ferry-built"

// linksName is the file beside the mark holding each tracked symlink's
// text as the last check (or spawn) saw it, so a retargeted link's old
// end is known.
const linksName = "ferry-links"

// markMargin is how far before its start a check's mark is set (see the
// file comment): more than a coarse clock tick plus the coarsest timestamp
// granularity of a filesystem a worktree may live on (FAT's two seconds).
const markMargin = 2 * time.Second

// Moved is what FreshenMoved found and did.
type Moved struct {
	Checked int // tracked paths and directories looked at
	// Files are the tracked files and directories changed since the last
	// check whose mtime it raised, sorted.
	Files []string
	// Links are the tracked symlinks changed since the last check, sorted;
	// Ends the files and directories of the checkout that they or their
	// previous text lead to, whose mtime it raised.
	Links, Ends []string
	// Outside are the ends of changed links outside the checkout, where
	// no mtime is Ferry's to raise: a unit that read through such a link
	// needs its dep-info emptied (the link_rebuilds rule).
	Outside []string
	// Full is set when there was no mark (an agent spawned before Ferry
	// kept one) or the clock is behind it: every change since the checkout
	// was written counted.
	Full bool
	// Pending is set when onLinks could not handle the changed links yet
	// (ErrLinksPending): nothing was recorded, so the next check finds
	// them again.
	Pending bool
}

// ErrLinksPending is what an onLinks callback of FreshenMoved returns when
// it cannot handle the changed links now but a later check can: the check
// then records nothing, and the call goes on.
var ErrLinksPending = errors.New("changed links left to the next check")

// Settle writes the first mark for the checkout at worktree, as spawn's
// last step (after stamping, freshening and the worktree's target link):
// just after the newest ctime of its tracked paths and directories
// (spawn's own changes, which are not changes of the agent's), and the
// text of each tracked symlink. A change made in the worktree while spawn
// runs would be taken for spawn's; nobody has the worktree yet.
func Settle(worktree, gitDir, stateDir string) error {
	root, err := canonicalDir(worktree)
	if err != nil {
		return fmt.Errorf("settle %s: %w", worktree, err)
	}
	entries, err := indexPaths(root, gitDir)
	if err != nil {
		return err
	}
	var newest unix.Timespec
	links := map[string]string{}
	err = eachTracked(root, entries, func(t *trackedPath) error {
		if tsAfter(t.st.Ctim, newest) {
			newest = t.st.Ctim
		}
		if t.st.Mode&unix.S_IFMT == unix.S_IFLNK {
			text, err := os.Readlink(filepath.Join(root, filepath.FromSlash(t.rel)))
			if err != nil {
				return err
			}
			links[t.rel] = text
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("settle %s: %w", worktree, err)
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	if err := writeLinks(stateDir, links); err != nil {
		return err
	}
	return writeMark(stateDir, tsTime(newest).Add(time.Nanosecond))
}

// FreshenMoved freshens what changed in the checkout at worktree since the
// last check without its mtime following (see the file comment), then
// moves the mark to this check's start. gitDir is the worktree's git
// directory (its index lists the tracked paths), stateDir where the mark
// and the links file live; baseSrc the base checkout, whose link text stands for the old
// one of a link the agent added after spawn. When links changed, onLinks
// (if not nil) is called with them before anything is recorded, so a
// failure there leaves them to the next check: the shim empties the
// dep-info of the units that read through them (LinkReaders). When
// onLinks returns ErrLinksPending, FreshenMoved records nothing and
// returns no error (Moved.Pending).
func FreshenMoved(worktree, gitDir, stateDir, baseSrc string, onLinks func(links []string) error) (Moved, error) {
	var mv Moved
	start := time.Now()
	root, err := canonicalDir(worktree)
	if err != nil {
		return mv, fmt.Errorf("freshen moved files in %s: %w", worktree, err)
	}
	prev, ok := readMark(stateDir)
	if !ok || prev.After(start.Add(markMargin)) {
		// No mark, or a clock set back behind it: a change made since
		// has a ctime before the mark. Look at everything.
		prev, mv.Full = time.Time{}, true
	}
	since := unix.NsecToTimespec(prev.UnixNano())
	entries, err := indexPaths(root, gitDir)
	if err != nil {
		return mv, err
	}
	known, err := readLinks(stateDir)
	if err != nil {
		return mv, err
	}
	var links []string
	err = eachTracked(root, entries, func(t *trackedPath) error {
		mv.Checked++
		if tsBefore(t.st.Ctim, since) {
			return nil
		}
		if _, was := known[t.rel]; was || t.st.Mode&unix.S_IFMT == unix.S_IFLNK {
			links = append(links, t.rel) // a link now or at the last check
			if t.st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return nil
			}
		}
		if !tsBefore(t.st.Mtim, t.st.Ctim) {
			return nil // the mtime followed: Cargo sees the change
		}
		if err := t.raise(); err != nil {
			return err
		}
		mv.Files = append(mv.Files, t.rel)
		return nil
	})
	if err != nil {
		return mv, fmt.Errorf("freshen moved files in %s: %w", worktree, err)
	}
	if len(links) > 0 {
		sort.Strings(links)
		err := freshenLinks(&mv, root, stateDir, baseSrc, known, links, entries, onLinks)
		if errors.Is(err, ErrLinksPending) {
			mv.Pending = true
			sort.Strings(mv.Files)
			return mv, nil
		}
		if err != nil {
			return mv, err
		}
	}
	sort.Strings(mv.Files)
	next := start.Add(-markMargin)
	if next.Before(prev) {
		next = prev
	}
	return mv, writeMark(stateDir, next)
}

// freshenLinks raises the mtime of what each changed link leads to in the
// checkout, now and before: its previous text's end (from the links file,
// else the base checkout's link) and its current end. A file is raised; a
// directory is raised with every tracked path below it. Cargo reads a
// rustc input through a link by the link's path or by where it led when
// the unit was built (its canonical path, when that lies in the input's
// package), and a build script's rerun-if-changed path through the link:
// whichever it checks is then newer than the unit. Ends outside the
// checkout are listed in Outside.
func freshenLinks(mv *Moved, root, stateDir, baseSrc string, known map[string]string, links []string, entries []git.IndexPath, onLinks func([]string) error) error {
	baseRoot, _ := canonicalDir(baseSrc) // no base checkout: no old end from it
	ends := map[string]bool{}
	outside := map[string]bool{}
	addEnd := func(r resolution) {
		if r.loop {
			return
		}
		if rel, ok := within(root, r.end); ok {
			ends[rel] = true
		} else if baseRoot != "" {
			if rel, ok := within(baseRoot, r.end); ok {
				ends[rel] = true // the base's end stands for the agent's same path
				return
			}
			outside[r.end] = true
		} else {
			outside[r.end] = true
		}
	}
	changed := false
	for _, l := range links {
		old, ok := known[l]
		text, err := os.Readlink(filepath.Join(root, filepath.FromSlash(l)))
		if err != nil {
			// No longer a link (a file or directory took its place, and
			// the walk looked at it as such): where it led still counts.
			mv.Links = append(mv.Links, l)
			addEnd(resolveText(root, l, old))
			delete(known, l)
			changed = true
			continue
		}
		if ok && old == text {
			continue // as the last check left it (it looks within the margin again)
		}
		mv.Links = append(mv.Links, l)
		addEnd(resolve(root, l))
		if ok {
			addEnd(resolveText(root, l, old))
		} else if baseRoot != "" {
			addEnd(resolve(baseRoot, l))
		}
		known[l], changed = text, true
	}
	if !changed {
		return nil
	}
	for rel := range ends {
		n, err := raiseTree(root, rel, entries)
		if err != nil {
			return err
		}
		if n > 0 {
			mv.Ends = append(mv.Ends, rel)
		}
	}
	for p := range outside {
		mv.Outside = append(mv.Outside, p)
	}
	sort.Strings(mv.Links)
	sort.Strings(mv.Ends)
	sort.Strings(mv.Outside)
	if onLinks != nil {
		if err := onLinks(mv.Links); err != nil {
			return err
		}
	}
	return writeLinks(stateDir, known)
}

// resolveText is where link rel of the checkout at root would lead with
// link text text.
func resolveText(root, rel, text string) resolution {
	if filepath.IsAbs(text) {
		return resolve("/", strings.TrimPrefix(filepath.ToSlash(text), "/"))
	}
	return resolve(root, path.Join(path.Dir(rel), filepath.ToSlash(text)))
}

// raiseTree raises the mtime of rel in the checkout and, when it is a
// directory, of every tracked path below it; it returns how many paths it
// raised.
func raiseTree(root, rel string, entries []git.IndexPath) (int, error) {
	p := filepath.Join(root, filepath.FromSlash(rel))
	fi, err := os.Lstat(p)
	if err != nil {
		return 0, nil // gone, or a link to nothing
	}
	if err := raise(p); err != nil {
		return 0, err
	}
	n := 1
	if !fi.IsDir() {
		return n, nil
	}
	prefix := rel + "/"
	if rel == "" {
		prefix = ""
	}
	i := sort.Search(len(entries), func(i int) bool { return entries[i].Path >= prefix })
	for ; i < len(entries) && strings.HasPrefix(entries[i].Path, prefix); i++ {
		if err := raise(filepath.Join(root, filepath.FromSlash(entries[i].Path))); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// raise gives path (not followed) the current time as its mtime, keeping
// its access time. UTIME_NOW makes the mtime the very ctime the kernel
// sets, so the next check does not pick the path again.
func raise(p string) error {
	ts := []unix.Timespec{{Nsec: utimeOmit}, {Nsec: utimeNow}}
	err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "utimensat", Path: p, Err: err}
	}
	return nil
}

// indexPaths lists the tracked paths of the worktree from its index file,
// or from git when Ferry does not read that index itself (a split index).
func indexPaths(root, gitDir string) ([]git.IndexPath, error) {
	entries, err := git.ReadIndexPaths(filepath.Join(gitDir, "index"))
	if errors.Is(err, git.ErrIndexFormat) {
		r, err := git.Open(root)
		if err != nil {
			return nil, err
		}
		list, err := r.LsFiles(root)
		if err != nil {
			return nil, err
		}
		entries = make([]git.IndexPath, len(list))
		for i, e := range list {
			entries[i] = git.IndexPath{Path: e.Path, Mode: e.Mode}
		}
		return entries, nil
	}
	return entries, err
}

// trackedPath is one path eachTracked visits: rel in the checkout, whose
// top is open as rootfd (or the top itself, rel "", with rootfd -1).
type trackedPath struct {
	root   string
	rel    string
	rootfd int
	st     unix.Stat_t
	dir    bool
}

// raise gives the path the current time as its mtime, not following a
// link: neither the path nor a directory on its way, which the walk's
// lstat of rel did not rule out (it follows a link in rel's directories
// as it resolves them). So the directories are opened one by one from the
// top without following one; a directory replaced by a link since the
// walk leaves the path unchanged.
func (t *trackedPath) raise() error {
	ts := []unix.Timespec{{Nsec: utimeOmit}, {Nsec: utimeNow}}
	if t.rel == "" {
		return raise(t.root)
	}
	dirfd, name, err := openParent(t.rootfd, t.rel)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return nil
		}
		return &os.PathError{Op: "open", Path: filepath.Join(t.root, filepath.FromSlash(path.Dir(t.rel))), Err: err}
	}
	if dirfd != t.rootfd {
		defer unix.Close(dirfd)
	}
	err = unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "utimensat", Path: t.rel, Err: err}
	}
	return nil
}

// openParent opens the directory holding rel (slash-separated, below the
// directory open as rootfd) one name at a time, following no link, and
// returns it (rootfd itself for a name at the top) and rel's last name.
func openParent(rootfd int, rel string) (int, string, error) {
	dir, name := path.Split(rel)
	fd := rootfd
	for part := range strings.SplitSeq(strings.TrimSuffix(dir, "/"), "/") {
		if part == "" {
			continue
		}
		next, err := unix.Openat(fd, part, dirOpenFlags, 0)
		if fd != rootfd {
			unix.Close(fd)
		}
		if err != nil {
			return -1, "", err
		}
		fd = next
	}
	return fd, name, nil
}

// eachTracked calls fn with the lstat of every tracked path of the
// checkout at root that exists (each once, a conflicted one too) and of
// every directory holding one, the top included (dir set). Submodules and
// paths a sparse checkout leaves out are skipped. Calls of fn do not
// overlap, but come in no set order.
//
// It walks the index's order (git sorts it by path, so a directory's
// entries are contiguous), lstat'ing each path relative to the open top
// and each directory on the way once, before what it holds: a tracked
// directory that is a link (or not a directory) is not entered, so
// nothing outside the checkout is looked at. (One replaced by a link
// between its lstat and its entries' is followed by those lstats, which
// only read; trackedPath.raise, the one change, follows no link.) A
// relative lstat costs about what an lstat of one name in an open
// directory does, and saves opening each directory: on the 1 238 files of
// the large bench workspace, 1.4 ms against 2.2 ms. A large index is cut
// into runs walked side by side, one per CPU: the walk is all system
// calls, which is what the shim's check before a build waits for
// (walkRun says how the runs share directories).
func eachTracked(root string, entries []git.IndexPath, fn func(t *trackedPath) error) error {
	runs := splitRuns(entries, min(runtime.GOMAXPROCS(0), maxWalkers))
	if len(runs) == 1 {
		return walkRun(root, entries, 0, len(entries), fn)
	}
	var (
		mu     sync.Mutex
		failed atomic.Bool
		errs   = make([]error, len(runs))
		wg     sync.WaitGroup
	)
	locked := func(t *trackedPath) error {
		if failed.Load() {
			return errWalkStopped
		}
		mu.Lock()
		defer mu.Unlock()
		return fn(t)
	}
	for i, lo := range runs {
		hi := len(entries)
		if i+1 < len(runs) {
			hi = runs[i+1]
		}
		wg.Go(func() {
			if err := walkRun(root, entries, lo, hi, locked); err != nil {
				errs[i] = err
				failed.Store(true)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && err != errWalkStopped {
			return err
		}
	}
	return nil
}

// maxWalkers bounds the runs of one walk; minWalkRun is the fewest index
// entries worth a run of their own (below it, starting a thread costs
// more than the lstats it takes over).
const (
	maxWalkers = 4
	minWalkRun = 512
)

// errWalkStopped ends a run early when another run failed.
var errWalkStopped = errors.New("walk stopped")

// splitRuns cuts entries into up to n runs of about equal length and
// returns the index of each run's first entry. A run never starts inside
// a conflicted path's stages, so each path falls in one run.
func splitRuns(entries []git.IndexPath, n int) []int {
	n = min(n, len(entries)/minWalkRun)
	runs := []int{0}
	for i := 1; i < n; i++ {
		at := i * len(entries) / n
		for at < len(entries) && entries[at].Path == entries[at-1].Path {
			at++
		}
		if at > runs[len(runs)-1] && at < len(entries) {
			runs = append(runs, at)
		}
	}
	return runs
}

// walkRun visits entries[lo:hi] as eachTracked says, with their
// directories. A run that starts after others opens the directories on
// its way itself but leaves to the run before it the visit of those that
// run reached too (the directories holding the last entry it walked):
// each directory is visited by the first run that needs it.
func walkRun(root string, entries []git.IndexPath, lo, hi int, fn func(t *trackedPath) error) error {
	seen := "" // the directory of the entry before the run's, "" at the top
	for i := lo - 1; i >= 0; i-- {
		if e := entries[i]; !e.SkipWorktree && e.Mode != git.ModeGitlink {
			seen = dirOf(e.Path)
			break
		}
	}
	// visited reports whether an earlier run visited directory rel.
	visited := func(rel string) bool {
		return lo > 0 && (rel == seen || strings.HasPrefix(seen, rel+"/"))
	}
	rootfd, err := unix.Open(root, dirOpenFlags, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rootfd)
	t := trackedPath{root: root, rootfd: rootfd}
	// visit lstats rel and calls fn; it reports whether the path exists
	// and, for a directory, is one.
	visit := func(rel string, dir bool) (bool, error) {
		t.rel, t.dir = rel, dir
		var err error
		if rel == "" {
			err = unix.Lstat(root, &t.st)
		} else {
			err = unix.Fstatat(rootfd, rel, &t.st, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
				return false, nil
			}
			return false, &os.PathError{Op: "lstat", Path: filepath.Join(root, filepath.FromSlash(rel)), Err: err}
		}
		if dir && t.st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return false, nil // a link or file where the index has a directory: seen as itself, if tracked
		}
		return true, fn(&t)
	}
	if lo == 0 {
		if ok, err := visit("", true); err != nil || !ok {
			return err
		}
	}
	// The directories on the way to the current entry's, each with whether
	// it is one (a directory that is not is not entered).
	type way struct {
		rel string
		ok  bool
	}
	stack := []way{{"", true}}
	lastDir, lastPath := "", "\x00"
	for _, e := range entries[lo:hi] {
		if e.Path == lastPath || e.SkipWorktree || e.Mode == git.ModeGitlink {
			continue
		}
		lastPath = e.Path
		if d := dirOf(e.Path); d != lastDir {
			lastDir = d
			// Leave what is not on the way to d, then look at the rest of it.
			for len(stack) > 1 && !strings.HasPrefix(d+"/", stack[len(stack)-1].rel+"/") {
				stack = stack[:len(stack)-1]
			}
			for top := stack[len(stack)-1]; top.rel != d; top = stack[len(stack)-1] {
				rest := strings.TrimPrefix(strings.TrimPrefix(d, top.rel), "/")
				name, _, _ := strings.Cut(rest, "/")
				next := way{rel: name}
				if top.rel != "" {
					next.rel = top.rel + "/" + name
				}
				if top.ok {
					if visited(next.rel) {
						var st unix.Stat_t
						next.ok = unix.Fstatat(rootfd, next.rel, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
					} else if next.ok, err = visit(next.rel, true); err != nil {
						return err
					}
				}
				stack = append(stack, next)
			}
		}
		if !stack[len(stack)-1].ok {
			continue
		}
		if _, err := visit(e.Path, false); err != nil {
			return err
		}
	}
	return nil
}

// dirOf is the directory of an index path, "" at the top.
func dirOf(p string) string {
	if d := path.Dir(p); d != "." {
		return d
	}
	return ""
}

func readMark(stateDir string) (time.Time, bool) {
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(stateDir, MarkName), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return time.Time{}, false
	}
	return tsTime(st.Mtim), true
}

// writeMark sets the mark's mtime to t, making the file if need be. No
// fsync: a mark lost in a crash is an older one, which only makes the next
// check look further back.
func writeMark(stateDir string, t time.Time) error {
	p := filepath.Join(stateDir, MarkName)
	ts := []unix.Timespec{{Nsec: utimeOmit}, unix.NsecToTimespec(t.UnixNano())}
	err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.EROFS) {
		return nil // in the agent's sandbox: see the file comment
	}
	if errors.Is(err, unix.ENOENT) {
		var f *os.File
		if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			f.Close()
			err = unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
	}
	if errors.Is(err, unix.EROFS) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("record the build's start in %s: %w", p, err)
	}
	return nil
}

// The links file: for each link, its path and its text, each ending in NUL.
func readLinks(stateDir string) (map[string]string, error) {
	out := map[string]string{}
	data, err := os.ReadFile(filepath.Join(stateDir, linksName))
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	fields := bytes.Split(data, []byte{0})
	for i := 0; i+1 < len(fields); i += 2 {
		out[string(fields[i])] = string(fields[i+1])
	}
	return out, nil
}

func writeLinks(stateDir string, links map[string]string) error {
	p := filepath.Join(stateDir, linksName)
	if len(links) == 0 {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.EROFS) {
			return err
		}
		return nil
	}
	keys := make([]string, 0, len(links))
	for k := range links {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	for _, k := range keys {
		b.WriteString(k + "\x00" + links[k] + "\x00")
	}
	if err := atomicfile.WriteFile(p, b.Bytes(), 0o644); !errors.Is(err, unix.EROFS) {
		return err
	}
	return nil // in the agent's sandbox: the next check outside sees the links changed again
}

func tsBefore(a, b unix.Timespec) bool {
	return a.Sec < b.Sec || a.Sec == b.Sec && a.Nsec < b.Nsec
}

func tsAfter(a, b unix.Timespec) bool { return tsBefore(b, a) }
