package gc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/store"
)

// Rules a hook-created agent can fail, each a reason to keep it.
const (
	KeptCreating  = "creating"  // its spawn is still running
	KeptWorktree  = "worktree"  // its worktree is missing or not registered: nothing to check it by
	KeptChanges   = "changes"   // uncommitted changes, untracked files, an operation in progress
	KeptCommits   = "commits"   // its branch or HEAD moved past the start commit
	KeptUnreached = "unreached" // commits that only its worktree reaches
	KeptIgnored   = "ignored"   // ignored files other than build output
	KeptBusy      = "busy"      // processes run for it, enter it, or work in its worktree
	KeptLocked    = "locked"    // `git worktree lock`ed (by its tool)
	KeptRecent    = "recent"    // a sign of life less than the reap-after time ago
	KeptNested    = "nested"    // another agent's worktree lies inside its worktree
	KeptRefused   = "refused"   // the removal refused (it changed since it was looked at)
	KeptUnchecked = "unchecked" // a check failed: in doubt, keep
	KeptAdopted   = "adopted"   // an adopted agent whose tool still has its worktree
)

// Verdict is what gc decided about one hook-created agent, and why.
type Verdict struct {
	Name    string `json:"name"`
	Tool    string `json:"tool"`
	Session string `json:"session,omitempty"`
	// Reaped is set when the agent was removed (by a dry run: would be).
	Reaped bool `json:"reaped"`
	// Kept lists every rule that keeps the agent; empty when reaped. A
	// rule that costs a walk of the worktree (recent) is checked only when
	// every other rule holds.
	Kept []Reason `json:"kept"`
	// LastActive is the newest sign of life gc found, when it looked for
	// one; a recent agent's may be older than its newest (gc stops at the
	// first recent one).
	LastActive *time.Time `json:"last_active,omitempty"`
	// Removal is what the reaping removed (not in a dry run).
	Removal *agent.Removal `json:"removal,omitempty"`
}

// Reason is one rule an agent fails: Rule is one of the Kept* names, Detail
// says what was found.
type Reason struct {
	Rule   string `json:"rule"`
	Detail string `json:"detail"`
}

func (r Reason) String() string { return r.Detail }

// keptError stops a reaping under the agent's locks.
type keptError struct{ reasons []Reason }

func (e *keptError) Error() string { return "kept: " + joinReasons(e.reasons) }

func joinReasons(rs []Reason) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.Detail
	}
	return strings.Join(parts, "; ")
}

// beforeReap runs between the look a pass reports and the reaping that
// checks again under the locks: tests change the agent there.
var beforeReap = func(name string) {}

// reaper judges hook-created agents by the rules of the package doc.
type reaper struct {
	repo  *git.Repo
	s     *store.Store
	after time.Duration
	now   func() time.Time
}

// consider judges ready hook-created agent r (all is every agent) and, when
// it is abandoned and the pass is not dry, reaps it. Only a removal that
// fails after its checks passed is an error; a rule gc cannot check keeps
// the agent.
func (p *reaper) consider(r *agent.Record, all []*agent.Record, dry bool) (Verdict, error) {
	v := Verdict{Name: r.Name, Tool: r.Tool, Session: r.Session, Kept: []Reason{}}
	var reasons []Reason
	if held, err := lock.Held(p.s.Agent(r.Name).Lock); err != nil {
		reasons = append(reasons, unchecked("whether a process is entering it", err))
	} else if held {
		reasons = append(reasons, Reason{KeptBusy, "a process is entering it"})
	}
	if busy, err := agent.Busy(p.s, r.Name); err != nil {
		reasons = append(reasons, unchecked("whether processes run for it", err))
	} else if busy {
		reasons = append(reasons, Reason{KeptBusy, "processes run for it (they hold busy.lock or use its overlay)"})
	}
	for _, o := range all {
		if o.Name != r.Name && store.Within(o.Worktree, r.Worktree) {
			reasons = append(reasons, Reason{KeptNested, fmt.Sprintf("agent %q's worktree is inside its worktree", o.Name)})
		}
	}
	var w *agent.Work
	if present(r.Worktree) {
		var err error
		if w, err = agent.WorktreeWork(p.repo, r); err != nil {
			reasons = append(reasons, unchecked("its worktree's status", err))
		}
	}
	var last *time.Time
	if r.Adopted {
		reasons = append(reasons, adoptedReasons(p.repo, r)...)
	} else {
		reasons, last = p.judge(r, w, reasons)
	}
	v.LastActive = last
	if len(reasons) > 0 {
		v.Kept = reasons
		return v, nil
	}
	if dry {
		v.Reaped = true
		return v, nil
	}
	// Again, under the agent's locks with new sessions held out: something
	// may have started since.
	beforeReap(r.Name)
	rm, err := agent.Reap(p.repo, p.s, r.Name, func(r *agent.Record, w *agent.Work) error {
		if r.Adopted {
			if reasons := adoptedReasons(p.repo, r); len(reasons) > 0 {
				return &keptError{reasons}
			}
			return nil
		}
		reasons, last := p.judge(r, w, nil)
		v.LastActive = last
		if len(reasons) > 0 {
			return &keptError{reasons}
		}
		return nil
	})
	var kept *keptError
	switch {
	case err == nil:
		v.Reaped, v.Removal = true, rm
	case errors.As(err, &kept):
		v.Kept = kept.reasons
	case failure.KindOf(err) == failure.Refused:
		v.Kept = []Reason{{KeptRefused, err.Error()}}
	default:
		return v, fmt.Errorf("reap agent %s: %w", r.Name, err)
	}
	return v, nil
}

// adoptedReasons are what keeps adopted agent r: its worktree is its
// tool's, so gc releases the fork (never the worktree) only once the tool
// has removed the worktree: gone, and no longer listed by git. A worktree
// missing but still registered (git lists it as prunable) may be on a disk
// unmounted for now.
func adoptedReasons(repo *git.Repo, r *agent.Record) []Reason {
	if present(r.Worktree) {
		return []Reason{{KeptAdopted, fmt.Sprintf("its worktree is %s's: the fork goes when the worktree is removed, or with `ferry rm %s`", orAdopt(r.Tool), r.Name)}}
	}
	_, ok, err := repo.FindWorktree(r.Worktree)
	switch {
	case err != nil:
		return []Reason{unchecked("git's worktree list", err)}
	case ok:
		return []Reason{{KeptWorktree, fmt.Sprintf("its worktree %s is missing but still registered (remove the agent with `ferry rm %s`)", r.Worktree, r.Name)}}
	}
	return nil
}

func orAdopt(tool string) string {
	if tool == "" {
		return "its tool"
	}
	return tool
}

// judge appends to reasons every rule that keeps r whose check needs no
// agent lock: all but whether processes run for it (the removal's Exclude
// checks that) and nesting. w is r's worktree's status, nil when the
// worktree is gone or its status could not be read. Last, when nothing else
// keeps r, it looks for a recent sign of life and returns the newest it saw.
func (p *reaper) judge(r *agent.Record, w *agent.Work, reasons []Reason) ([]Reason, *time.Time) {
	if !present(r.Worktree) {
		// Gone for good or for now (an unmounted disk): nothing tells which,
		// nor what it held.
		return append(reasons, Reason{KeptWorktree, fmt.Sprintf("its worktree %s is missing (remove the agent with `ferry rm %s`)", r.Worktree, r.Name)}), nil
	}
	wt, ok, err := p.repo.FindWorktree(r.Worktree)
	switch {
	case err != nil:
		reasons = append(reasons, unchecked("git's worktree list", err))
	case !ok:
		reasons = append(reasons, Reason{KeptWorktree, fmt.Sprintf("git does not list %s as a worktree", r.Worktree)})
	case wt.Locked:
		detail := "its worktree is locked (git worktree lock)"
		if wt.LockReason != "" {
			detail += ": " + wt.LockReason
		}
		reasons = append(reasons, Reason{KeptLocked, detail})
	}
	admin, err := p.repo.Run(r.Worktree, "rev-parse", "--absolute-git-dir")
	admin = strings.TrimSpace(admin)
	if err != nil {
		return append(reasons, unchecked("its worktree's git dir", err)), nil
	}
	if w != nil {
		if len(w.Changed) > 0 {
			detail := "uncommitted changes (" + agent.Summarize(w.Changed) + ")"
			if w.LockfileChanged {
				detail += "; Cargo.lock differs from the one spawn placed"
			}
			reasons = append(reasons, Reason{KeptChanges, detail})
		}
		if op := inProgress(admin); op != "" {
			reasons = append(reasons, Reason{KeptChanges, op + " is in progress"})
		}
		if user := notBuildOutput(r.Worktree, w.Ignored); len(user) > 0 {
			reasons = append(reasons, Reason{KeptIgnored, "ignored files that are not build output (" + agent.Summarize(user) + ")"})
		}
	}
	reasons = append(reasons, p.commits(r)...)
	if pids := workingIn(r.Worktree, p.s.MntSrc()); len(pids) > 0 {
		reasons = append(reasons, Reason{KeptBusy, "processes work in its worktree (pid " + pidList(pids) + ")"})
	}
	if len(reasons) > 0 || w == nil {
		return reasons, nil
	}
	now := p.now()
	last, err := p.lastSign(r, admin, now.Add(-p.after))
	if err != nil {
		return append(reasons, unchecked("its last sign of life", err)), nil
	}
	if idle := now.Sub(last); idle < p.after {
		reasons = append(reasons, Reason{KeptRecent, fmt.Sprintf("a sign of life %s ago; gc reaps after %s without one",
			human(idle), human(p.after))})
	}
	return reasons, &last
}

// commits checks that r's worktree is on its branch, the branch still at
// the start commit, and that nothing only the worktree reaches holds a
// commit: its HEAD, its HEAD's and its branch's reflogs (a commit reset
// away) and its per-worktree refs. All of those go with the worktree.
func (p *reaper) commits(r *agent.Record) []Reason {
	var reasons []Reason
	head, err := p.repo.Run(r.Worktree, "symbolic-ref", "-q", "HEAD")
	head = strings.TrimSpace(head)
	switch {
	case err != nil && head == "":
		reasons = append(reasons, Reason{KeptCommits, "its HEAD is detached"})
	case head != "refs/heads/"+r.Branch:
		reasons = append(reasons, Reason{KeptCommits, fmt.Sprintf("its HEAD is on %s, not on its branch %s", strings.TrimPrefix(head, "refs/heads/"), r.Branch)})
	}
	tip, err := p.repo.Run("", "rev-parse", "--verify", "--quiet", "refs/heads/"+r.Branch)
	tip = strings.TrimSpace(tip)
	switch {
	case err != nil || tip == "":
		reasons = append(reasons, Reason{KeptCommits, fmt.Sprintf("its branch %s is gone", r.Branch)})
	case tip != r.StartCommit:
		n := "new"
		if out, err := p.repo.Run("", "rev-list", "--count", r.StartCommit+".."+tip); err == nil {
			n = strings.TrimSpace(out)
		}
		reasons = append(reasons, Reason{KeptCommits, fmt.Sprintf("its branch %s has %s commit(s) since the start (or was moved)", r.Branch, n)})
	}

	tips, err := p.worktreeTips(r)
	if err != nil {
		return append(reasons, unchecked("what its worktree reaches", err))
	}
	lost, err := agent.Unreached(p.repo, tips, r.Branch)
	if err != nil {
		return append(reasons, unchecked("what its worktree reaches", err))
	}
	if len(lost) > 0 {
		reasons = append(reasons, Reason{KeptUnreached, fmt.Sprintf("%d commit(s) that only its worktree reaches (its HEAD, reflogs or per-worktree refs)", len(lost))})
	}
	return reasons
}

// worktreeTips lists the commits r's worktree keeps reachable, without
// repeats.
func (p *reaper) worktreeTips(r *agent.Record) ([]string, error) {
	var out []string
	head, err := p.repo.Run(r.Worktree, "rev-parse", "--verify", "--quiet", "HEAD")
	if err != nil {
		return nil, err
	}
	out = append(out, strings.Fields(head)...)
	for _, ref := range []string{"HEAD", "refs/heads/" + r.Branch} {
		if _, err := p.repo.Run(r.Worktree, "rev-parse", "--verify", "--quiet", ref); err != nil {
			continue // no such ref (a branch gone): its reflog went with it
		}
		log, err := p.repo.Run(r.Worktree, "rev-list", "--walk-reflogs", "--ignore-missing", ref)
		if err != nil {
			return nil, err
		}
		out = append(out, strings.Fields(log)...)
	}
	refs, err := p.repo.Run(r.Worktree, "for-each-ref", "--format=%(objectname)", "refs/worktree/", "refs/bisect/", "refs/rewritten/")
	if err != nil {
		return nil, err
	}
	out = append(out, strings.Fields(refs)...)
	sort.Strings(out)
	return compact(out), nil
}

func compact(s []string) []string {
	var out []string
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// inProgress names the git operation under way in the worktree whose git
// dir is admin, or "".
func inProgress(admin string) string {
	for _, op := range []struct{ file, name string }{
		{"rebase-merge", "a rebase"}, {"rebase-apply", "a rebase or am"}, {"MERGE_HEAD", "a merge"},
		{"CHERRY_PICK_HEAD", "a cherry-pick"}, {"REVERT_HEAD", "a revert"}, {"BISECT_LOG", "a bisect"},
	} {
		if _, err := os.Lstat(filepath.Join(admin, op.file)); err == nil {
			return op.name
		}
	}
	return ""
}

// notBuildOutput returns the ignored paths (relative to worktree, as git
// status names them) that are not build output.
func notBuildOutput(worktree string, ignored []string) []string {
	var out []string
	for _, rel := range ignored {
		if !buildOutput(worktree, rel) {
			out = append(out, rel)
		}
	}
	return out
}

// buildOutput reports whether rel lies in (or is) a directory below the
// worktree that Cargo made for its output: Cargo puts a CACHEDIR.TAG naming
// itself into every target dir it creates, whatever its name or place, and
// the tag says the directory holds nothing that cannot be made again.
func buildOutput(worktree, rel string) bool {
	for d := filepath.Join(worktree, filepath.FromSlash(strings.TrimSuffix(rel, "/"))); d != worktree && strings.HasPrefix(d, worktree+"/"); d = filepath.Dir(d) {
		if cargoTagged(d) {
			return true
		}
	}
	return false
}

// cacheDirSignature starts every CACHEDIR.TAG (https://bford.info/cachedir/).
var cacheDirSignature = []byte("Signature: 8a477f597d28d172789f06886806bc55")

// cargoTagged reports whether dir holds a CACHEDIR.TAG that Cargo wrote.
func cargoTagged(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "CACHEDIR.TAG"))
	if err != nil {
		return false
	}
	defer f.Close()
	head, _ := io.ReadAll(io.LimitReader(f, 512))
	return bytes.HasPrefix(head, cacheDirSignature) && bytes.Contains(head, []byte("created by cargo"))
}

// errRecent stops a walk at the first sign of life newer than its bound.
var errRecent = errors.New("recent")

// lastSign returns the newest sign of life of agent r, or the first one
// newer than since: its spawn; the modification times of what its
// worktree's git dir (admin) holds (the index, HEAD and reflogs: git
// commands in the worktree); of every file and directory in the worktree
// (an edit, even one undone, or a file made and deleted); and of its fork's
// entries three levels down (a build that compiled anything adds files to
// target/<profile>/deps or incremental/), but not of the agent dir itself
// or its lock files, which taking a lock makes. Processes running for the
// agent and processes working in the worktree are checked apart; this is
// for the time between them.
func (p *reaper) lastSign(r *agent.Record, admin string, since time.Time) (time.Time, error) {
	last := r.Created
	seen := func(t time.Time) error {
		if t.After(last) {
			last = t
		}
		if last.After(since) {
			return errRecent
		}
		return nil
	}
	walk := func(root string, depth int, skip func(string) bool) error {
		rootDepth := strings.Count(root, "/")
		return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) {
					return nil // overlayfs's work/work (mode 0), or gone while walked
				}
				return err
			}
			if skip != nil && skip(path) {
				if d.IsDir() && path != root {
					return fs.SkipDir
				}
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return nil
			}
			if err := seen(fi.ModTime()); err != nil {
				return err
			}
			if d.IsDir() && depth > 0 && strings.Count(path, "/")-rootDepth >= depth {
				return fs.SkipDir
			}
			return nil
		})
	}
	err := seen(last)
	if err == nil {
		err = walk(admin, 0, nil)
	}
	if err == nil {
		dotGit := filepath.Join(r.Worktree, ".git")
		err = walk(r.Worktree, 0, func(p string) bool { return p == dotGit })
	}
	if err == nil {
		// Not the agent dir itself nor its lock files: taking a lock makes
		// its file, so gc's own look (and the removal's) would count.
		files := p.s.Agent(r.Name)
		err = walk(files.Dir, 3, func(p string) bool {
			return p == files.Dir || p == files.Lock || p == files.Busy || p == files.MountLock
		})
	}
	if err != nil && err != errRecent {
		return time.Time{}, err
	}
	return last, nil
}

// workingIn returns the processes whose working directory lies in the
// worktree dir: seen at its host path, or, from inside an agent's sandbox,
// at the store's canonical mountpoint mntSrc where it is mounted. An agent
// tool's session (Claude Code's own process, the shells of its tool calls)
// holds no busy.lock while it works in the worktree.
func workingIn(dir, mntSrc string) []int {
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		dir = d // as the kernel prints it
	}
	wt, err := os.Stat(dir)
	if err != nil {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		proc := filepath.Join("/proc", e.Name())
		cwd, err := os.Readlink(filepath.Join(proc, "cwd"))
		if err != nil {
			continue // gone, or not ours to read
		}
		switch {
		case cwd == dir || strings.HasPrefix(cwd, dir+"/"):
			pids = append(pids, pid)
		case cwd == mntSrc || strings.HasPrefix(cwd, mntSrc+"/"):
			// In a sandbox: which worktree is mounted there, for it?
			if fi, err := os.Stat(filepath.Join(proc, "root", mntSrc)); err == nil && os.SameFile(fi, wt) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func pidList(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ", ")
}

func present(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir()
}

func unchecked(what string, err error) Reason {
	return Reason{KeptUnchecked, fmt.Sprintf("could not check %s: %v", what, err)}
}

// human writes d for people: seconds under a minute, then minutes, then
// hours and minutes ("45s", "30m", "24h", "1h30m").
func human(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Round(time.Second)/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	}
	h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
	if m == 0 {
		return fmt.Sprintf("%dh", h)
	}
	return fmt.Sprintf("%dh%dm", h, m)
}
