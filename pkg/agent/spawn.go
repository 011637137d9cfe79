package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ferrydev/ferry/internal/failpoint"
	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/confine"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/freshness"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

// SpawnOptions are the inputs of one spawn.
type SpawnOptions struct {
	Repo     *git.Repo
	Settings *config.Settings
	Store    *store.Store
	Name     string
	From     string // REF the worktree starts at; default HEAD
	Path     string // worktree path; default <worktree parent>/<store key>/<name>
	Branch   string // default <branch prefix><name>
	Backend  string // default the configured backend
	// Tool and Session record the agent tool a hook spawns for (see
	// Record); empty for ferry spawn.
	Tool    string
	Session string
	// Place are files the agent's tool needs in the worktree and that no
	// commit holds (Claude Code's local settings, for releases that read
	// them from the worktree): written once the worktree is furnished, and
	// Ferry's own while unchanged (Record.Placed).
	Place    []Placed
	Progress io.Writer
}

// Spawn creates agent o.Name: a worktree on a new branch, stamped against
// the chosen base, with a fork of the base's target. On failure it removes
// only what it created.
func Spawn(o SpawnOptions) (*Record, error) {
	start := time.Now()
	// Bad input first, before anything is made: git would otherwise refuse
	// the branch or the path only after the agent was recorded, in its own
	// words.
	if err := CheckName(o.Name); err != nil {
		return nil, err
	}
	s := o.Store
	branch := o.Branch
	if branch == "" {
		branch = o.Settings.BranchPrefix + o.Name
	}
	if err := o.Repo.CheckBranchName(branch); err != nil {
		return nil, err
	}
	path, label := o.Path, "--path"
	if path == "" {
		path, label = DefaultPath(o.Repo, o.Settings, s, o.Name), "worktree path"
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if err := checkPathForm(path, label); err != nil {
		return nil, err
	}
	from := o.From
	if from == "" {
		from = "HEAD"
	}
	commit, err := o.Repo.ResolveCommit(from)
	if err != nil {
		return nil, err
	}
	if err := s.Init(); err != nil {
		return nil, err
	}
	if err := roomFor(o.Settings, fmt.Sprintf("spawning agent %q", o.Name), s.Dir, path); err != nil {
		return nil, err
	}
	iso, backend, err := isolation(o.Settings, s, o.Backend, o.Progress, "ferry spawn")
	if err != nil {
		return nil, err
	}

	// Under the store lock: check that name, branch and path are free,
	// choose the base, and record the agent as creating.
	storeLock, err := lock.Take(s.LockPath())
	if err != nil {
		return nil, err
	}
	conf := confinement(o.Repo, o.Settings, s, iso, "")
	r, agentLock, err := reserve(o, commit, branch, path, backend.Name(), iso.Isolation, conf)
	storeLock.Release()
	if err != nil {
		return nil, err
	}
	defer agentLock.Release()
	failpoint.Hit("spawn/reserved")

	b, err := base.Read(s, r.Base)
	if err == nil {
		err = create(o, r, b, backend)
	}
	if err == nil {
		r.Timings.Total = since(start)
		r.State = Ready
		if err = write(s, r); err != nil {
			r.State = Creating // the record on disk still says so
		}
	}
	if err != nil {
		if rerr := rollback(o.Repo, s, r); rerr != nil {
			return nil, incompleteRollback(r.Name, err, rerr)
		}
		return nil, err
	}
	return r, nil
}

// roomFor checks each of paths (the store, the worktree) against the
// free-space floor before an agent is made there: refused, nothing is.
func roomFor(settings *config.Settings, what string, paths ...string) error {
	for _, p := range paths {
		if err := settings.MinFree.Check(p, what); err != nil {
			return err
		}
	}
	return nil
}

// isolation decides how a new agent's builds are isolated and which fork
// backend it gets (backendName, else the configured one), saying on
// progress, as prog, why a host that blocks the sandbox builds at host
// paths. It is decided once, at spawn or adoption: a host that blocks the
// sandbox gets an agent building at host paths (mode auto) or no agent
// (mode on), never one whose every cargo call fails.
func isolation(settings *config.Settings, s *store.Store, backendName string, progress io.Writer, prog string) (sandbox.Decision, fork.Backend, error) {
	iso, err := sandbox.Decide(settings.SandboxMode)
	if err != nil {
		return iso, nil, err
	}
	if w := iso.Warning(); w != "" && progress != nil {
		fmt.Fprintf(progress, "%s: warning: %s\n", prog, w)
	}
	if backendName == "" {
		backendName = settings.Backend
	}
	var backend fork.Backend
	if iso.Isolation == sandbox.IsolationOff {
		backend, err = fork.SelectUnsandboxed(backendName, s.Dir)
	} else {
		backend, err = fork.Select(backendName, s.Dir)
	}
	return iso, backend, err
}

// confinement decides what a new agent's sandbox makes of the rest of the
// host (confine.Decide: two sandbox probes, a few milliseconds), for an
// agent in the namespace sandbox; nil for one that builds at host paths.
// The repository's checkout and git dir, and the directory the agents'
// worktrees go to, are kept the host's, read-only, inside the private
// layers, but for the agent's own worktree (the main checkout, adopted in
// place), whose git dir the session keeps read-only; [sandbox] writable is
// recorded as it is now.
func confinement(repo *git.Repo, settings *config.Settings, s *store.Store, iso sandbox.Decision, worktree string) *confine.Record {
	if iso.Isolation != sandbox.IsolationNamespace || knobs.SkipConfine() {
		return nil
	}
	var ro []string
	for _, p := range append(confine.Repository(repo), filepath.Dir(DefaultPath(repo, settings, s, "agent"))) {
		if worktree == "" || !git.SamePath(p, worktree) {
			ro = append(ro, p)
		}
	}
	if err := os.MkdirAll(s.TmpDir(), 0o755); err != nil {
		return &confine.Record{Gaps: []confine.Gap{{What: "the host outside the store is writable from builds", Why: err.Error()}}}
	}
	rec := confine.Decide(s.Parent, s.TmpDir(), os.Environ(), settings.SandboxWritable, ro)
	return &rec
}

// incompleteRollback is the error of a spawn that failed and could not
// remove all it made (on a full disk, git cannot even lock packed-refs to
// delete the branch). What is left stays recorded in agent.json, state
// creating, which the next spawn of the name and gc both roll back.
func incompleteRollback(name string, err, rerr error) error {
	hint := fmt.Sprintf("once the cause is fixed, `ferry spawn %s` again or `ferry gc` finishes the rollback", name)
	if h := failure.HintOf(err); h != "" {
		hint += "\n" + h
	}
	return failure.Wrap(failure.KindOf(err), errors.Join(err, fmt.Errorf("roll back agent %s: %w", name, rerr)), hint,
		"spawn of agent %q failed, and the rollback is incomplete: `ferry spawn %s` again or `ferry gc` finishes it", name, name)
}

// reserve runs under the store lock.
func reserve(o SpawnOptions, commit, branch, path, backend, isolation string, conf *confine.Record) (*Record, *lock.Lock, error) {
	s := o.Store
	if old, err := Read(s, o.Name); err == nil {
		if old.State == Ready {
			return nil, nil, failure.New(failure.Refused, "choose another name, or remove it with `ferry rm "+o.Name+"`",
				"agent %q already exists at %s", o.Name, old.Worktree)
		}
		// A spawn that did not finish: roll it back if its spawner is gone.
		l, err := lock.TryTake(s.Agent(o.Name).Lock)
		if err == lock.ErrBusy {
			return nil, nil, failure.New(failure.Refused, "wait for it to finish", "agent %q is being created by another process", o.Name)
		}
		if err != nil {
			return nil, nil, err
		}
		err = rollback(o.Repo, s, old)
		l.Release()
		if err != nil {
			return nil, nil, fmt.Errorf("roll back the unfinished spawn of %q: %w", o.Name, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	} else if _, err := os.Stat(s.Agent(o.Name).Dir); err == nil {
		// A directory without a record: spawn died before writing it.
		if err := platform.RemoveTree(s.Agent(o.Name).Dir); err != nil {
			return nil, nil, err
		}
	}
	if _, err := o.Repo.Run("", "show-ref", "--verify", "--quiet", "refs/heads/"+branch); err == nil {
		if o.Branch != "" {
			// Named by the user: theirs to delete.
			return nil, nil, failure.New(failure.Refused, "pass another --branch, or delete the branch", "branch %q already exists", branch)
		}
		if err := reclaimBranch(o.Repo, s, branch, commit); err != nil {
			return nil, nil, err
		}
	}
	if err := checkPath(o, path); err != nil {
		return nil, nil, err
	}
	b, err := chooseBase(s, commit)
	if err != nil {
		return nil, nil, err
	}
	r := &Record{
		Format: Format, Name: o.Name, State: Creating, Branch: branch, Worktree: path,
		StartCommit: commit, Base: b.ID, BaseCommit: b.Commit, Backend: backend, Isolation: isolation,
		Tool: o.Tool, Session: o.Session, Created: time.Now().UTC(), Confinement: conf,
	}
	if err := os.MkdirAll(s.Agent(o.Name).Dir, 0o755); err != nil {
		return nil, nil, err
	}
	l, err := lock.TryTake(s.Agent(o.Name).Lock)
	if err != nil {
		return nil, nil, err
	}
	if err := write(s, r); err != nil {
		l.Release()
		platform.RemoveTree(s.Agent(o.Name).Dir)
		return nil, nil, err
	}
	return r, l, nil
}

// reclaimBranch deals with branch, the agent's own (its prefix and name),
// which exists though no agent of this name does: left by an agent whose
// store was deleted under it, or made by hand. It refuses while an agent records the branch or a worktree has
// it checked out (that worktree is adopted again, with its work), and
// deletes it when it holds nothing commit does not (a registered
// worktree whose directory is gone is pruned first); a branch with
// commits of its own is refused, as someone's work. The caller holds the
// store lock, under which every spawn records its branch before making it.
func reclaimBranch(repo *git.Repo, s *store.Store, branch, commit string) error {
	taken := failure.New(failure.Refused, "pass another --branch, or delete the branch", "branch %q already exists", branch)
	all, damaged, err := Scan(s)
	if err != nil || len(damaged) > 0 {
		return taken // whose it is cannot be told
	}
	for _, r := range all {
		if r.Branch == branch {
			return failure.New(failure.Refused, "pass another --branch", "branch %q is agent %q's", branch, r.Name)
		}
	}
	wts, err := repo.Worktrees()
	if err != nil {
		return err
	}
	for _, wt := range wts {
		if wt.Branch != branch {
			continue
		}
		if !wt.Prunable {
			return failure.New(failure.Refused,
				fmt.Sprintf("`cd %s && ferry adopt` makes it an agent again, its work kept; or remove it (git worktree remove) and the branch (git branch -D %s)", wt.Path, branch),
				"branch %q is checked out at %s, a worktree no agent records (was the store deleted?)", branch, wt.Path)
		}
		if _, err := repo.Run("", "worktree", "prune"); err != nil {
			return fmt.Errorf("prune the worktree of branch %s, whose directory is gone: %w", branch, err)
		}
	}
	tip, err := repo.ResolveCommit("refs/heads/" + branch)
	if err != nil {
		return err
	}
	if mine, err := repo.IsAncestor(tip, commit); err != nil || !mine {
		return failure.New(failure.Refused,
			fmt.Sprintf("pass another --branch (or name), or delete the branch (git branch -D %s) if its work is not wanted", branch),
			"branch %q already exists and holds commits %.12s does not", branch, commit)
	}
	if _, err := repo.Run("", "branch", "-D", "--", branch); err != nil {
		return fmt.Errorf("delete branch %s, which holds nothing of its own: %w", branch, err)
	}
	return nil
}

// checkPathForm refuses, as bad input, a worktree path git cannot create a
// worktree at whatever the store holds: a dangling symlink (git finds
// something there and refuses), or one below something that is not a
// directory. It runs before anything is made; what is the matter with path
// names it as label (the flag that gave it, or where it came from).
func checkPathForm(path, label string) error {
	for p := path; ; p = filepath.Dir(p) {
		fi, err := os.Lstat(p)
		if err == nil {
			if fi.Mode()&fs.ModeSymlink != 0 {
				target, err := os.Stat(p)
				if errors.Is(err, fs.ErrNotExist) {
					dest, _ := os.Readlink(p)
					what := label + " " + path
					if p != path {
						what += ": " + p
					}
					return failure.New(failure.Usage,
						"pass a --path that does not exist yet (or is an empty directory), or remove the symlink or create what it points to",
						"%s is a symlink to %s, which does not exist", what, dest)
				}
				if err != nil {
					return fmt.Errorf("check %s %s: %w", label, path, err)
				}
				fi = target
			}
			if p != path && !fi.IsDir() {
				return failure.New(failure.Usage, "pass a --path whose parent directories exist or can be created",
					"%s %s: %s is not a directory", label, path, p)
			}
			return nil // the first thing that exists is fine; checkPath judges path itself
		}
		// ENOTDIR: something above is not a directory; the walk finds it.
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return fmt.Errorf("check %s %s: %w", label, path, err)
		}
		if filepath.Dir(p) == p {
			return nil
		}
	}
}

// checkPath refuses a worktree path that is taken, inside the store, or
// overlapping another agent's worktree (invariant 5).
func checkPath(o SpawnOptions, path string) error {
	if store.Within(path, o.Store.Dir) {
		return failure.New(failure.Refused, "choose a --path outside the store, or set FERRY_WORKTREES / [agent] worktree-dir elsewhere",
			"agent worktree %s would be inside the store %s", path, o.Store.Dir)
	}
	all, err := All(o.Store)
	if err != nil {
		return err
	}
	for _, a := range all {
		if store.Within(path, a.Worktree) || store.Within(a.Worktree, path) {
			return failure.New(failure.Refused, "choose a --path that neither contains nor lies inside another agent's worktree",
				"agent worktree %s would overlap agent %q at %s", path, a.Name, a.Worktree)
		}
	}
	if ents, err := os.ReadDir(path); err == nil && len(ents) > 0 {
		return failure.New(failure.Refused, "choose another --path or name", "path %s exists and is not empty", path)
	} else if err == nil || !errors.Is(err, fs.ErrNotExist) {
		if fi, serr := os.Stat(path); serr == nil && !fi.IsDir() {
			return failure.New(failure.Refused, "choose another --path", "path %s exists and is not a directory", path)
		}
	}
	if (store.Within(path, o.Repo.Top) || store.Within(o.Repo.Top, path)) && !InRepoWorktrees(o.Repo, path) {
		return failure.New(failure.Refused, "choose a --path outside the repository's worktree, or under its "+config.RepoWorktrees+"/ ([paths] worktrees = \"repo\")",
			"agent worktree %s would overlap the repository worktree %s", path, o.Repo.Top)
	}
	return nil
}

// DefaultPath is where spawn puts agent name's worktree when not told:
// <worktree parent>/<store key>/<name>, or, with [paths] worktrees =
// "repo", <main checkout>/.claude/worktrees/<name>, where Claude Code puts
// its own (some of its versions refuse a hook's worktree elsewhere).
func DefaultPath(repo *git.Repo, settings *config.Settings, s *store.Store, name string) string {
	if settings.WorktreesInRepo {
		return filepath.Join(mainTop(repo), filepath.FromSlash(config.RepoWorktrees), name)
	}
	return filepath.Join(settings.WorktreeParent, s.Key, name)
}

// InRepoWorktrees reports whether path lies below the repository's
// .claude/worktrees/ directory (of its main checkout or of the worktree
// repo was opened from).
func InRepoWorktrees(repo *git.Repo, path string) bool {
	for _, top := range []string{repo.Top, mainTop(repo)} {
		dir := filepath.Join(top, filepath.FromSlash(config.RepoWorktrees))
		if path != dir && store.Within(path, dir) {
			return true
		}
	}
	return false
}

// MainTop is the repository's main checkout (the first worktree git
// lists), or repo.Top when that cannot be said.
func MainTop(repo *git.Repo) string { return mainTop(repo) }

func mainTop(repo *git.Repo) string {
	if wts, err := repo.Worktrees(); err == nil && len(wts) > 0 && !wts[0].Bare {
		if p, err := filepath.EvalSymlinks(wts[0].Path); err == nil {
			return p
		}
	}
	return repo.Top
}

// ErrNoBase is the refusal of a spawn or an adoption while the store has
// no base at all (none built yet, the first still building).
var ErrNoBase = errors.New("no base to spawn from")

// chooseBase picks the current base if it is at commit, else the newest
// ready base at commit, else the current base.
//
// A damaged current (its file, or its base's record) is refused only when
// no ready base at commit can serve instead: named, with its fix.
func chooseBase(s *store.Store, commit string) (*base.Record, error) {
	cur, curErr := s.Current()
	if curErr != nil && failure.AsDamaged(curErr) == nil {
		return nil, curErr
	}
	var chosen *base.Record
	if cur != "" {
		if r, err := base.Read(s, cur); err == nil && r.Commit == commit {
			chosen = r
		}
	}
	if chosen == nil {
		list, err := base.List(s)
		if err != nil {
			return nil, err
		}
		for _, e := range list { // newest first
			if e.Record != nil && e.Record.Commit == commit {
				chosen = e.Record
				break
			}
		}
	}
	if chosen == nil && curErr != nil {
		return nil, curErr
	}
	if chosen == nil && cur != "" {
		r, err := base.Read(s, cur)
		if failure.AsDamaged(err) != nil {
			// Its own hint says how to build it again.
			return nil, failure.Wrap(failure.Refused, err, "", "the current base %s cannot be read", cur)
		}
		if err != nil {
			return nil, failure.Wrap(failure.Refused, err, "rebuild it with `ferry base`", "the current base %s cannot be read", cur)
		}
		chosen = r
	}
	if chosen == nil {
		return nil, failure.Wrap(failure.Refused, ErrNoBase, "build one first with `ferry base` (or keep one warm with `ferry up`)", "")
	}
	for what, p := range map[string]string{"checkout": chosen.Src, "target": chosen.Target} {
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			return nil, failure.New(failure.Refused, "rebuild the base with `ferry base --rev "+chosen.Commit[:12]+"`",
				"base %s has no %s at %s: stamping cannot be verified", chosen.ID, what, p)
		}
	}
	// A base changed since it was built would spread to every agent forked
	// from it.
	if err := base.Verify(chosen); err != nil {
		return nil, err
	}
	return chosen, nil
}

// create does the slow work outside the store lock, holding the agent lock.
func create(o SpawnOptions, r *Record, b *base.Record, backend fork.Backend) error {
	s := o.Store
	t := time.Now()
	if InRepoWorktrees(o.Repo, r.Worktree) {
		// Out of the main checkout's status, as Claude Code's own are meant
		// to be.
		if err := o.Repo.Exclude("/" + config.RepoWorktrees + "/"); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(r.Worktree), 0o755); err != nil {
		return err
	}
	// Record what is about to be made before making it: a crash between the
	// two leaves a record that rollback checks against what exists.
	r.MadeWorktree, r.MadeBranch = true, true
	if err := write(s, r); err != nil {
		return err
	}
	failpoint.Hit("spawn/before-worktree")
	if err := o.Repo.WorktreeAddBranch(r.Worktree, r.Branch, r.StartCommit); err != nil {
		return err
	}
	failpoint.Hit("spawn/after-worktree")
	if err := copyLockfile(o.Repo, r, b); err != nil {
		return err
	}
	if r.HostPaths() && b.Modes.Remap {
		if err := makeRemapLink(o.Repo, s, r, b, backend); err != nil {
			return err
		}
	}
	r.Timings.Worktree = since(t)
	return furnish(o.Repo, s, r, b, backend, o.Place)
}

// furnish makes r's worktree, checked out at r.StartCommit, an agent of
// base b: it stamps what verifies, forks the base's target (relocated
// where the agent builds at other paths), links the worktree's target to
// the fork and settles the worktree's state for the shim. Spawn and
// Adopt share it; the caller holds the agent lock.
func furnish(repo *git.Repo, s *store.Store, r *Record, b *base.Record, backend fork.Backend, place []Placed) error {
	plan, err := stampWorktree(repo, r, b)
	if err != nil {
		return err
	}
	failpoint.Hit("spawn/after-stamp")
	if err := forkTarget(s, r, b, backend, plan); err != nil {
		return err
	}
	failpoint.Hit("spawn/after-fork")
	if err := makeTargetLink(repo, s, r); err != nil {
		return err
	}
	if err := placeFiles(r, place); err != nil {
		return err
	}
	failpoint.Hit("furnish/after-link")
	// The agent's builds start from here: the shim freshens what changes
	// after this without its mtime following (freshness.FreshenMoved).
	// Settled last, so nothing spawn did counts as the agent's: making the
	// target link keeps the top directory's stamped mtime, which moves its
	// ctime.
	gitDir, err := git.WorktreeGitDir(r.Worktree)
	if err != nil {
		return err
	}
	return freshness.Settle(r.Worktree, gitDir, s.Agent(r.Name).Freshness)
}

// stampWorktree gives agent r's worktree files that are the base's the
// base checkout's mtimes (freshness.Verify's plan, applied), freshens
// what it skipped, and refreshes the index's stat data.
func stampWorktree(repo *git.Repo, r *Record, b *base.Record) (*freshness.StampPlan, error) {
	t := time.Now()
	index, err := repo.LsFiles(r.Worktree)
	if err != nil {
		return nil, err
	}
	tree, err := repo.LsTree(b.Commit)
	if err != nil {
		return nil, err
	}
	plan, err := freshness.Verify(freshness.Input{AgentDir: r.Worktree, AgentIndex: index, BaseDir: b.Src, BaseTree: tree})
	if err != nil {
		return nil, err
	}
	st, err := plan.Apply()
	if err != nil {
		return nil, err
	}
	fresh, err := freshness.FreshenSkipped(r.Worktree, plan, time.Now())
	if err != nil {
		return nil, err
	}
	r.Stamp = StampStats{Files: st.Files, Dirs: st.Dirs, Skipped: len(plan.Skipped()), Freshened: fresh}
	// The index's stat data predates stamping; refresh it so git status is
	// quick and clean.
	if _, err := repo.Run(r.Worktree, "update-index", "-q", "--refresh"); err != nil {
		var ce *git.CommandError
		if !errors.As(err, &ce) || ce.ExitCode() != 1 {
			return nil, err
		}
	}
	r.Timings.Stamp = since(t)
	return plan, nil
}

// forkTarget forks base b's target for agent r (relocated where either
// builds at host paths), empties the dep-info the link_rebuilds rule
// names, and makes the fork durable before the record says ready.
func forkTarget(s *store.Store, r *Record, b *base.Record, backend fork.Backend, plan *freshness.StampPlan) error {
	t := time.Now()
	fs, err := backend.Fork(fork.Paths{BaseTarget: b.Target, AgentDir: s.Agent(r.Name).Dir})
	if err != nil {
		// copy_file_range names no path when the store fills up.
		return failure.NoSpaceAt(s.Agent(r.Name).Dir, err)
	}
	r.Fork = ForkStats{Files: fs.Files, Dirs: fs.Dirs, Bytes: fs.Bytes}
	if r.HostPaths() || b.HostPaths() {
		// The agent builds at other paths than the base did.
		a, err := relocateFork(s, r, b, backend)
		if err != nil {
			return err
		}
		r.Fork.Relocated = &a
	}
	r.FreshnessEnv = b.FreshnessEnv()
	// The link_rebuilds rule runs in both modes. Checksum mode needs it
	// for every link that leads elsewhere: Cargo compares the content at
	// the path it recorded (the link's old end, when that lies in the
	// package), and leaving it unstamped does not change that. mtime mode
	// is safe where a link has an end in the checkout: both ends, and all
	// below them, are left unstamped and freshened above, newer than any
	// unit of the base, and Cargo records such an input either by that
	// end or by the path through the link, whose mtime it takes from the
	// end in the agent. It is not safe for a link that leads from one
	// place outside the checkout to another: Cargo takes the mtime of the
	// file the link leads to, which Ferry does not freshen (Cargo 1.95:
	// such a retarget to an old file compiles nothing).
	if r.Fork.LinkRebuilds, err = linkRebuilds(s, r, b, backend, plan); err != nil {
		return err
	}
	r.Timings.Fork = since(t)
	// The record is about to say ready, which promises the fork: make it
	// durable first, as a base's target is before base.json. It also
	// leaves the filesystem's work for the fork (a clone's metadata, a
	// copy's data) to spawn instead of the agent's first build: on XFS a
	// reflink fork's first no-op build took about 1.5x a plain one while
	// that work ran, about 1.1x after it (fresh agents of the large bench
	// workspace, paired with plain no-op builds), for some 30-45 ms here.
	// An overlay's fork is two empty directories and the dep-info files
	// emptied above: nothing to wait for, and its spawn stays a handful of
	// metadata operations.
	if spec := backend.TargetSpec(fork.Paths{BaseTarget: b.Target, AgentDir: s.Agent(r.Name).Dir}); spec.Overlay == nil {
		t = time.Now()
		if err := atomicfile.SyncTree(spec.Dir); err != nil {
			return err
		}
		r.Timings.Sync = since(t)
	}
	return nil
}

// linkRebuilds empties, in agent r's fork (an overlay fork's upper dir),
// the Cargo dep-info of the units the link_rebuilds rule names for the
// agent's checkout against base b's (package freshness), from the
// symlinks plan, the stamping's verification, found retargeted; and
// returns the files it emptied.
func linkRebuilds(s *store.Store, r *Record, b *base.Record, backend fork.Backend, plan *freshness.StampPlan) ([]string, error) {
	files, err := plan.LinkRebuilds(b.Target, s.Dir)
	if err != nil || len(files) == 0 {
		return nil, err
	}
	spec := backend.TargetSpec(fork.Paths{BaseTarget: b.Target, AgentDir: s.Agent(r.Name).Dir})
	if spec.Overlay != nil {
		return files, freshness.EmptyDepInfo(spec.Overlay.Upper, files)
	}
	// The relocation plan may have removed a unit whole.
	var kept []string
	for _, f := range files {
		if _, err := os.Lstat(filepath.Join(spec.Dir, filepath.Dir(filepath.FromSlash(f)))); err == nil {
			kept = append(kept, f)
		}
	}
	return kept, freshness.EmptyDepInfo(spec.Dir, kept)
}

// relocateFork applies base b's relocation plan to agent r's fork, which
// builds at other paths than b's target recorded: the agent's own host
// paths, or the canonical ones for a sandboxed agent of a base built at
// host paths. An overlay fork has no directory on the host to apply it to,
// so such an agent is refused.
func relocateFork(s *store.Store, r *Record, b *base.Record, backend fork.Backend) (Relocated, error) {
	spec := backend.TargetSpec(fork.Paths{BaseTarget: b.Target, AgentDir: s.Agent(r.Name).Dir})
	if spec.Dir == "" {
		return Relocated{}, failure.New(failure.Refused,
			"rebuild the base in the sandbox (`ferry base --rebuild` with [sandbox] mode auto or on), or use backend reflink or copy",
			"base %s was built at host paths, and a fork with backend %s cannot be relocated", b.ID, backend.Name())
	}
	plan, err := base.Relocation(b)
	if err != nil {
		return Relocated{}, err
	}
	a, err := plan.Apply(spec.Dir)
	return Relocated{Applied: a, Rebuilds: len(plan.Rebuilds)}, err
}

// copyLockfile gives the agent the base's Cargo.lock when the repository
// does not track one, so it resolves the same versions the base built, and
// records its digest: the file is Ferry's, not the agent's work, until the
// agent changes it.
func copyLockfile(repo *git.Repo, r *Record, b *base.Record) error {
	if _, err := repo.Run("", "cat-file", "-e", r.StartCommit+":Cargo.lock"); err == nil {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(b.Src, "Cargo.lock"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	dst := filepath.Join(r.Worktree, "Cargo.lock")
	if _, err := os.Lstat(dst); err == nil {
		return nil // a hook made one; keep it
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		return err
	}
	r.PlacedLockfile = digest(data)
	return nil
}

// digest names data's content as the record keeps it.
func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Rollback removes what an unfinished spawn of r made. The caller holds the
// store lock and the agent lock (whose holder, the spawner, is gone).
func Rollback(repo *git.Repo, s *store.Store, r *Record) error { return rollback(repo, s, r) }

// rollback removes what a spawn of r made: the worktree if it added it, the
// branch if it still points at the starting commit, and the agent dir. The
// caller holds the agent lock or knows the spawner is gone.
func rollback(repo *git.Repo, s *store.Store, r *Record) error {
	var errs []error
	if r.MadeWorktree {
		// The spawn's git may outlive it: look once it is done.
		git.SettleWorktree(r.Worktree)
		if wt, ok, err := repo.FindWorktree(r.Worktree); err != nil {
			errs = append(errs, err)
		} else if ok && (wt.Branch == r.Branch || wt.Adding()) {
			// Added on the agent's branch, or still being added (its
			// HEAD not set yet): this spawn's, as the path was free when
			// it reserved it.
			if err := repo.WorktreeRemove(r.Worktree); err != nil {
				errs = append(errs, err)
			}
		} else if !ok {
			// git died before registering it: the directory is this spawn's
			// partial checkout if it holds a worktree link (the path was
			// free when the spawn reserved it).
			if fi, err := os.Lstat(filepath.Join(r.Worktree, ".git")); err == nil && fi.Mode().IsRegular() {
				if err := os.RemoveAll(r.Worktree); err != nil {
					errs = append(errs, err)
				}
			} else if ents, err := os.ReadDir(r.Worktree); err == nil && len(ents) == 0 {
				os.Remove(r.Worktree)
			}
		}
	}
	if r.MadeBranch {
		if out, err := repo.Run("", "rev-parse", "--verify", "--quiet", "refs/heads/"+r.Branch); err == nil &&
			strings.TrimSpace(out) == r.StartCommit {
			if _, err := repo.Run("", "branch", "-D", "--", r.Branch); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if r.Adopted {
		if err := undoAdoption(r); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := removeDir(s, r.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeDir removes an agent's directory, its record last but for the lock
// (held by the caller): while anything else is left, agent.json (state
// creating) tells the next spawn of the name, or gc, to finish the job.
func removeDir(s *store.Store, name string) error {
	dir := s.Agent(name).Dir
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if p := filepath.Join(dir, e.Name()); p != s.Agent(name).Record && p != s.Agent(name).Lock {
			if err := platform.RemoveTree(p); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(s.Agent(name).Record); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return platform.RemoveTree(dir)
}

func since(t time.Time) float64 {
	return float64(time.Since(t).Round(time.Millisecond)) / float64(time.Second)
}
