package git

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/failure"
)

// Worktree is one entry of `git worktree list`.
type Worktree struct {
	Path       string // as git recorded it (git stores it with symlinks resolved)
	Head       string // commit id; empty for a bare main worktree or an unborn branch
	Branch     string // checked-out branch without "refs/heads/"; empty when detached
	Detached   bool
	Bare       bool // the main "worktree" of a bare repository
	Locked     bool
	LockReason string
	Prunable   bool // git would prune it: its directory is gone
}

// Worktrees lists the repository's worktrees, the main one first.
//
// git reads each worktree's lock file after seeing that it exists, and
// dies when another process unlocked that worktree in between (a
// concurrent base build taking the spare checkout does). That race, and
// only it, is asked again: the listing is not wrong, only early.
func (r *Repo) Worktrees() ([]Worktree, error) {
	var out []byte
	var err error
	for try := 0; ; try++ {
		out, err = run(r.Top, "worktree", "list", "--porcelain", "-z")
		if err == nil || try == listTries-1 || !lockFileRace(stderrOf(err)) {
			break
		}
		time.Sleep(time.Duration(try+1) * time.Millisecond)
	}
	if err != nil {
		return nil, wrapf(err, "list worktrees of %s", r.Top)
	}
	wts, err := parseWorktrees(out)
	if err != nil {
		return nil, fmt.Errorf("list worktrees of %s: %w", r.Top, err)
	}
	return wts, nil
}

// listTries bounds how often Worktrees asks again after losing the race
// on a lock file; each try waits a millisecond longer than the last.
const listTries = 20

// lockFileRace reports whether git's standard error is its death on a
// worktree's lock file that vanished between its check and its read.
func lockFileRace(stderr string) bool {
	path, ok := strings.CutPrefix(stderr, "fatal: failed to read '")
	if !ok {
		return false
	}
	path, rest, ok := strings.Cut(path, "'")
	return ok && filepath.Base(path) == "locked" && strings.Contains(rest, "No such file or directory")
}

// parseWorktrees reads `worktree list --porcelain -z`: NUL-terminated
// "key[ value]" lines, each record ended by an empty line.
func parseWorktrees(out []byte) ([]Worktree, error) {
	var wts []Worktree
	var cur *Worktree
	for len(out) > 0 {
		i := bytes.IndexByte(out, 0)
		if i < 0 {
			return nil, fmt.Errorf("unterminated line %q in worktree list", out)
		}
		line := string(out[:i])
		out = out[i+1:]
		if line == "" {
			cur = nil
			continue
		}
		key, val, _ := strings.Cut(line, " ")
		if key == "worktree" {
			wts = append(wts, Worktree{Path: val})
			cur = &wts[len(wts)-1]
			continue
		}
		if cur == nil {
			return nil, fmt.Errorf("worktree list line %q outside a record", line)
		}
		switch key {
		case "HEAD":
			cur.Head = val
		case "branch":
			cur.Branch = strings.TrimPrefix(val, "refs/heads/")
		case "detached":
			cur.Detached = true
		case "bare":
			cur.Bare = true
		case "locked":
			cur.Locked = true
			cur.LockReason = val
		case "prunable":
			cur.Prunable = true
		}
		// Unknown keys come from newer gits; ignore them.
	}
	return wts, nil
}

// FindWorktree returns the registered worktree whose path is path (compared
// with symlinks resolved), and whether there is one.
func (r *Repo) FindWorktree(path string) (Worktree, bool, error) {
	want, err := ResolvePath(path)
	if err != nil {
		return Worktree{}, false, fmt.Errorf("find worktree %s: %w", path, err)
	}
	wts, err := r.Worktrees()
	if err != nil {
		return Worktree{}, false, err
	}
	for _, wt := range wts {
		if got, err := ResolvePath(wt.Path); err == nil && got == want {
			return wt, true, nil
		}
	}
	return Worktree{}, false, nil
}

// WorktreeAddDetached adds a worktree at path with commit checked out on a
// detached HEAD. A relative path is relative to the process's working
// directory. The repository's hooks run, as for every checkout (see the
// package doc).
func (r *Repo) WorktreeAddDetached(path, commit string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("add worktree %s: %w", path, err)
	}
	hooks, err := r.checkoutHooks(abs)
	if err != nil {
		return fmt.Errorf("add worktree %s: %w", abs, err)
	}
	if _, err := runCheckout(r.Top, hooks, "worktree", "add", "--detach", "--", abs, commit); err != nil {
		return wrapf(noSpaceIn(abs, err), "add detached worktree %s at %s", abs, commit)
	}
	return nil
}

// WorktreeMove moves the unlocked worktree at from to the new path to
// (`git worktree move`), which must not exist.
func (r *Repo) WorktreeMove(from, to string) error {
	absFrom, err := filepath.Abs(from)
	if err != nil {
		return fmt.Errorf("move worktree %s: %w", from, err)
	}
	absTo, err := filepath.Abs(to)
	if err != nil {
		return fmt.Errorf("move worktree %s: %w", from, err)
	}
	if _, err := run(r.Top, "worktree", "move", "--", absFrom, absTo); err != nil {
		return wrapf(noSpaceIn(absTo, err), "move worktree %s to %s", absFrom, absTo)
	}
	return nil
}

// CheckoutDetached checks commit out, detached, in the worktree at dir
// (`git checkout --detach`): git rewrites only the files that differ
// from the commit it leaves. It refuses to overwrite local changes. The
// repository's hooks run, as for every checkout.
func (r *Repo) CheckoutDetached(dir, commit string) error {
	hooks, err := r.checkoutHooks(dir)
	if err != nil {
		return fmt.Errorf("check %s out in %s: %w", commit, dir, err)
	}
	if _, err := runCheckout(dir, hooks, "checkout", "-q", "--detach", commit, "--"); err != nil {
		return wrapf(noSpaceIn(dir, err), "check %s out in %s", commit, dir)
	}
	return nil
}

// WorktreeAddBranch adds a worktree at path on a new branch starting at
// commit (`worktree add -b`). It fails if the branch exists. The
// repository's hooks run, as for every checkout.
func (r *Repo) WorktreeAddBranch(path, branch, commit string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("add worktree %s: %w", path, err)
	}
	hooks, err := r.checkoutHooks(abs)
	if err != nil {
		return fmt.Errorf("add worktree %s: %w", abs, err)
	}
	if _, err := runCheckout(r.Top, hooks, "worktree", "add", "--no-track", "-b", branch, "--", abs, commit); err != nil {
		return wrapf(noSpaceIn(abs, err), "add worktree %s on new branch %s at %s", abs, branch, commit)
	}
	return nil
}

// WorktreeLock locks the worktree at path with reason (may be empty), so
// that neither `git worktree prune` nor `git worktree remove` without
// --force --force touches it. Locking a locked worktree is an error.
func (r *Repo) WorktreeLock(path, reason string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("lock worktree %s: %w", path, err)
	}
	args := []string{"worktree", "lock"}
	if reason != "" {
		args = append(args, "--reason", reason)
	}
	if _, err := run(r.Top, append(args, "--", abs)...); err != nil {
		return wrapf(err, "lock worktree %s", abs)
	}
	return nil
}

// WorktreeUnlock unlocks the worktree at path. Unlocking an unlocked
// worktree is an error.
func (r *Repo) WorktreeUnlock(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("unlock worktree %s: %w", path, err)
	}
	if _, err := run(r.Top, "worktree", "unlock", "--", abs); err != nil {
		return wrapf(err, "unlock worktree %s", abs)
	}
	return nil
}

// WorktreeRemove removes exactly the worktree at path, locked or not, with
// whatever changes it holds (`git worktree remove --force --force`).
//
// If its directory is already gone, the worktree is unregistered by deleting
// its administrative directory ($GIT_COMMON_DIR/worktrees/<id>, the one
// whose gitdir file points at path/.git); other worktrees with missing
// directories stay registered, which `git worktree prune` would not
// guarantee. A path that is gone and not registered is already removed and
// not an error. A directory that is there and not registered is refused,
// unless a git works in it (adding it, or deleting what a failed add
// made): it is looked at again once that git is done. The main worktree is
// never removed.
func (r *Repo) WorktreeRemove(path string) error { return r.worktreeRemove(path, true) }

// worktreeRemove is WorktreeRemove; settle: a directory git does not list
// while a git works in it is looked at again once that git is done.
func (r *Repo) worktreeRemove(path string, settle bool) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("remove worktree %s: %w", path, err)
	}
	want, err := ResolvePath(abs)
	if err != nil {
		return fmt.Errorf("remove worktree %s: %w", abs, err)
	}
	wts, err := r.Worktrees()
	if err != nil {
		return fmt.Errorf("remove worktree %s: %w", abs, err)
	}
	var wt *Worktree
	for i := range wts {
		if got, err := ResolvePath(wts[i].Path); err == nil && got == want {
			if i == 0 {
				return failure.New(failure.Refused, "",
					"refusing to remove %s: it is the repository's main worktree", abs)
			}
			wt = &wts[i]
			break
		}
	}
	present, err := exists(abs)
	if err != nil {
		return fmt.Errorf("remove worktree %s: %w", abs, err)
	}
	if !present {
		admin, err := r.adminDirOf(want)
		if err != nil {
			return fmt.Errorf("remove worktree %s: %w", abs, err)
		}
		if admin == "" {
			if wt != nil {
				return fmt.Errorf("remove worktree %s: git lists it but no administrative directory points at it", abs)
			}
			return nil // neither there nor registered: already removed
		}
		if err := os.RemoveAll(admin); err != nil {
			return fmt.Errorf("remove worktree %s: unregister it: %w", abs, err)
		}
		return nil
	}
	if wt == nil {
		if settle && gitAt(want) {
			// A git adding it has not registered it yet, or one that
			// failed (a spawn killed mid-add leaves its git to die on its
			// next write) is deleting what it made: its admin dir first,
			// then the directory. See what it leaves.
			waitAdding(want)
			return r.worktreeRemove(abs, false)
		}
		return fmt.Errorf("remove worktree %s: not a registered worktree of %s", abs, r.Top)
	}
	if wt.Adding() {
		// `git worktree add` is still making it, or died making it.
		waitAdding(want)
		now, ok, err := r.FindWorktree(abs)
		if err != nil {
			return fmt.Errorf("remove worktree %s: %w", abs, err)
		}
		if !ok || now.Adding() {
			return r.unregister(want, abs) // the git adding it died
		}
		wt = &now
	}
	if wt.Locked {
		if err := r.WorktreeUnlock(abs); err != nil {
			return fmt.Errorf("remove worktree %s: %w", abs, err)
		}
	}
	if _, err := run(r.Top, "worktree", "remove", "--force", "--force", "--", abs); err != nil {
		if halfMade(stderrOf(err)) {
			return r.unregister(want, abs)
		}
		return wrapf(err, "remove worktree %s", abs)
	}
	return nil
}

// halfMade reports whether git refused a removal because the worktree's
// link back to the repository (its .git file) is missing: its checkout
// never wrote it (a git killed mid-add), or a removal that deletes the
// directory got past it before it was killed. Git will not remove such a
// worktree; --force --force asked for its contents to go anyway.
func halfMade(stderr string) bool {
	return strings.Contains(stderr, "is not a working tree") ||
		strings.Contains(stderr, "validation failed") && strings.Contains(stderr, ".git' does not exist")
}

// Adding reports whether git is still adding wt, or died adding it: its
// entry is locked as `git worktree add` locks it until it is done, and its
// HEAD is not set yet (listed detached).
func (wt Worktree) Adding() bool { return wt.Locked && wt.LockReason == addingReason }

// addingReason is the lock reason `git worktree add` gives the entry it
// is making (in its admin dir's locked file, removed when it is done; git
// runs with LC_ALL=C, so untranslated). A git killed on the way leaves it.
const addingReason = "initializing"

// AddPatience bounds how long WorktreeRemove waits for a `git worktree
// add` still making the worktree it removes.
var AddPatience = time.Minute

// waitAdding waits, for AddPatience at most, while a git may still be
// making the worktree at path (resolved): a process works in it (the
// checkout, `git reset --hard`, runs there) or names it on its command
// line (`git worktree add`). A spawn killed mid-add leaves its git running
// on; one whose git died too leaves the entry initializing for good.
func waitAdding(path string) {
	deadline := time.Now().Add(AddPatience)
	for time.Now().Before(deadline) && gitAt(path) {
		time.Sleep(50 * time.Millisecond)
	}
}

// SettleWorktree waits, for AddPatience at most, while a git works in the
// worktree at path or names it on its command line: a `git worktree add`
// that outlived the process that ran it (a spawn killed mid-add) is still
// adding it, or deleting what it made after failing. Once it returns, git
// lists the worktree or not for good (unless something else adds it).
func SettleWorktree(path string) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return
	}
	if want, err := ResolvePath(abs); err == nil {
		abs = want
	}
	waitAdding(abs)
}

// gitAt reports whether a git process works in path or names it on its
// command line. Other processes (a shell left in the directory) do not
// count: whatever a git runs there (hooks, filters) runs while that git
// does.
func gitAt(path string) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		proc := "/proc/" + e.Name() // procfs: not a store path
		if comm, err := os.ReadFile(proc + "/comm"); err != nil || !bytes.HasPrefix(comm, []byte("git")) {
			continue
		}
		if cwd, err := os.Readlink(proc + "/cwd"); err == nil && (cwd == path || strings.HasPrefix(cwd, path+"/")) {
			return true
		}
		if cmd, err := os.ReadFile(proc + "/cmdline"); err == nil && bytes.Contains(cmd, []byte("\x00"+path+"\x00")) {
			return true
		}
	}
	return false
}

// unregister removes the worktree at abs (resolved: want) by hand, its
// admin dir and then its directory: for an entry git refuses to remove
// because it never finished adding it. The caller owns the worktree.
func (r *Repo) unregister(want, abs string) error {
	admin, err := r.adminDirOf(want)
	if err != nil {
		return fmt.Errorf("remove worktree %s: %w", abs, err)
	}
	if admin != "" {
		if err := os.RemoveAll(admin); err != nil {
			return fmt.Errorf("remove worktree %s: unregister it: %w", abs, err)
		}
	}
	if err := os.RemoveAll(abs); err != nil {
		return fmt.Errorf("remove worktree %s: %w", abs, err)
	}
	return nil
}

// adminDirOf returns the administrative directory
// ($GIT_COMMON_DIR/worktrees/<id>) whose gitdir file points at
// worktree/.git, or "" if there is none. worktree is resolved.
func (r *Repo) adminDirOf(worktree string) (string, error) {
	common, err := r.CommonDir()
	if err != nil {
		return "", err
	}
	base := filepath.Join(common, "worktrees") // git's own layout: not a store path
	ents, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	want := filepath.Join(worktree, ".git")
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		admin := filepath.Join(base, e.Name())
		b, err := os.ReadFile(filepath.Join(admin, "gitdir"))
		if err != nil {
			continue // not a worktree record (or a broken one git reports itself)
		}
		target := strings.TrimRight(string(b), "\r\n")
		if target == "" {
			continue
		}
		// worktree.useRelativePaths (git 2.48) records it relative to admin.
		if !filepath.IsAbs(target) {
			target = filepath.Join(admin, target)
		}
		got, err := ResolvePath(target)
		if err != nil {
			continue
		}
		if got == want {
			return admin, nil
		}
	}
	return "", nil
}

// Outside returns the repository opened from a worktree that is not dir
// and not below it, the main one first; r itself when r.Top lies outside
// dir. Git run in a worktree that is being removed fails once its
// directory is gone, so removing a worktree opened from inside it goes
// on from elsewhere.
func (r *Repo) Outside(dir string) (*Repo, error) {
	d, err := ResolvePath(dir)
	if err != nil {
		return nil, err
	}
	inside := func(p string) bool {
		return p == d || strings.HasPrefix(p, d+string(filepath.Separator))
	}
	if !inside(r.Top) {
		return r, nil
	}
	wts, err := r.Worktrees()
	if err != nil {
		return nil, err
	}
	for _, wt := range wts {
		if wt.Bare || wt.Prunable {
			continue
		}
		if p, err := ResolvePath(wt.Path); err == nil && !inside(p) {
			return Open(p)
		}
	}
	return nil, failure.New(failure.Prereq, "run it from the repository's main checkout",
		"no worktree of the repository outside %s to run git in", dir)
}
