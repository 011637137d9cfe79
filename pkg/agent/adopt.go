package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferrydev/ferry/internal/failpoint"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/confine"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/store"
)

// Adoption: most agent tools make their worktrees themselves (`git worktree
// add`, then at most a setup script of the tool's), so Ferry cannot spawn
// them. Adopt turns such a worktree, as it stands, into an agent in place:
// the same base choice, stamping and fork as spawn, without making a
// worktree or a branch. Stamping compares the worktree's bytes with the
// base's checkout, so the worktree's own edits (staged, unstaged or
// untracked) are not stamped and rebuild.
//
// An adopted agent is recorded with Adopted set and MadeWorktree and
// MadeBranch clear: the worktree and its branch are the tool's. `ferry rm`
// then removes only what adoption added (the fork, the target link, a
// Cargo.lock it placed and left unchanged) unless asked to remove the
// worktree too, and gc releases the fork once the tool has removed the
// worktree.

// AdoptTool is the tool an adopted agent records when the caller names
// none (`ferry adopt` run by hand).
const AdoptTool = "adopt"

// AdoptOptions are the inputs of one adoption.
type AdoptOptions struct {
	Repo     *git.Repo
	Settings *config.Settings
	Store    *store.Store
	Path     string // the worktree to adopt
	Name     string // the agent's name; default from the worktree's directory name
	Backend  string // default the configured backend
	Tool     string // what adopted it (AdoptTool when empty)
	Session  string
	// InPlace lets the repository's main checkout be adopted: the checkout
	// a cloud agent's container was given, where its tool runs the agent.
	// Its git dir stays read-only in the sandbox, as every agent's does.
	InPlace bool
	// ShimOnPath says whether cargo on the caller's PATH is Ferry's shim,
	// as it will be in the tool's shells. Without it an overlay agent's
	// worktree gets no ./target link: a cargo that is not the shim would
	// find a link it cannot write through (an overlay's fork exists only
	// in its namespace) and fail, where without the link it builds cold.
	ShimOnPath bool
	Progress   io.Writer
}

// Adoption is what Adopt did: the agent, and whether it existed already
// (adopting an agent's worktree again changes nothing).
type Adoption struct {
	*Record
	Already bool `json:"already"`
}

// Adopt makes the worktree at o.Path an agent (see above). Before anything
// is changed it refuses a path that is not a worktree of o.Repo, the main
// checkout, a worktree inside the store or overlapping another agent's,
// and one whose target holds build output Ferry did not make. On failure it
// removes what it added and leaves the worktree as it was but for stamped
// mtimes (which only date unchanged files back to the base's).
func Adopt(o AdoptOptions) (*Adoption, error) {
	start := time.Now()
	s := o.Store
	path, err := adoptable(o)
	if err != nil {
		return nil, err
	}
	if r, err := FindByWorktree(s, path); err != nil {
		return nil, err
	} else if r != nil && r.State == Ready {
		return &Adoption{Record: r, Already: true}, nil
	}
	commit, branch, err := worktreeHead(o.Repo, path)
	if err != nil {
		return nil, err
	}
	if err := checkTarget(s, path); err != nil {
		return nil, err
	}
	if err := s.Init(); err != nil {
		return nil, err
	}
	if err := roomFor(o.Settings, "adopting "+path, s.Dir); err != nil {
		return nil, err
	}
	iso, backend, err := isolation(o.Settings, s, o.Backend, o.Progress, "ferry adopt")
	if err != nil {
		return nil, err
	}
	tool := o.Tool
	if tool == "" {
		tool = AdoptTool
	}

	storeLock, err := lock.Take(s.LockPath())
	if err != nil {
		return nil, err
	}
	conf := confinement(o.Repo, o.Settings, s, iso, path)
	r, agentLock, already, err := reserveAdoption(o, path, commit, branch, tool, backend.Name(), iso.Isolation, conf)
	storeLock.Release()
	if err != nil || already != nil {
		return already, err
	}
	defer agentLock.Release()
	failpoint.Hit("adopt/reserved")

	b, err := base.Read(s, r.Base)
	if err == nil && !o.ShimOnPath && backend.TargetSpec(fork.Paths{BaseTarget: b.Target, AgentDir: s.Agent(r.Name).Dir}).Dir == "" {
		r.TargetLinkSkipped = "cargo on the adopting PATH is not Ferry's shim, and a plain cargo cannot write through the link to an overlay fork: put " +
			s.ShimDir() + " first on PATH in the tool's shells"
	}
	if err == nil {
		err = prepareAdopted(o.Repo, s, r, b, backend)
	}
	if err == nil {
		err = furnish(o.Repo, s, r, b, backend, nil)
	}
	if err == nil {
		r.Timings.Total = since(start)
		r.State = Ready
		if err = write(s, r); err != nil {
			r.State = Creating
		}
	}
	if err != nil {
		if rerr := rollback(o.Repo, s, r); rerr != nil {
			return nil, errors.Join(err, fmt.Errorf("undo the adoption of %s: %w", path, rerr))
		}
		return nil, err
	}
	return &Adoption{Record: r}, nil
}

// adoptable returns o.Path, absolute with symbolic links resolved, when it
// is the top of a worktree of o.Repo other than the main checkout, outside
// the store; otherwise it says what it is.
func adoptable(o AdoptOptions) (string, error) {
	if o.Path == "" {
		return "", failure.New(failure.Usage, "name the worktree to adopt, or run `ferry adopt` inside it", "no worktree to adopt")
	}
	abs, err := filepath.Abs(o.Path)
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return "", failure.New(failure.Usage, "name a worktree made with `git worktree add`",
			"%s is not a directory", abs)
	}
	path, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	notOurs := failure.New(failure.Usage,
		"adopt a worktree of "+o.Repo.Top+" (`git worktree list` shows them), or run ferry from the repository the worktree belongs to",
		"%s is not a worktree of the repository %s", abs, o.Repo.Top)
	wts, err := o.Repo.Worktrees()
	if err != nil {
		return "", err
	}
	idx := -1
	for i, wt := range wts {
		if git.SamePath(wt.Path, path) {
			idx = i
			break
		}
	}
	if idx < 0 {
		for _, wt := range wts {
			if store.Within(path, wt.Path) {
				return "", failure.New(failure.Usage, "name the worktree's top directory, "+wt.Path,
					"%s is inside the worktree %s, not its top", abs, wt.Path)
			}
		}
		return "", notOurs
	}
	if idx == 0 && !o.InPlace {
		return "", failure.New(failure.Usage,
			"adopt a worktree made with `git worktree add`; the main checkout stays yours (build it with cargo as usual, or spawn an agent with `ferry spawn NAME`); "+
				"in a container whose checkout is its agent's (a cloud agent), `ferry adopt --in-place` makes it one",
			"%s is the repository's main checkout, not a worktree", abs)
	}
	if store.Within(path, o.Store.Dir) {
		return "", failure.New(failure.Usage, "adopt a worktree outside the store",
			"%s is inside the store %s", abs, o.Store.Dir)
	}
	return path, nil
}

// worktreeHead returns the commit the worktree at path has checked out and
// its branch ("" when detached).
func worktreeHead(repo *git.Repo, path string) (commit, branch string, err error) {
	out, err := repo.Run(path, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
	commit = strings.TrimSpace(out)
	if err != nil || commit == "" {
		return "", "", failure.New(failure.Usage, "commit something on its branch first",
			"the worktree %s has no commit checked out", path)
	}
	if out, err := repo.Run(path, "symbolic-ref", "-q", "--short", "HEAD"); err == nil {
		branch = strings.TrimSpace(out)
	}
	return commit, branch, nil
}

// checkTarget refuses a worktree whose target, or remap mode's link,
// holds something: build output Ferry did not make (a tool's own build,
// a copied target) that stamping would otherwise let Cargo trust. What an
// adoption killed before its record said so left there (links into an
// agent directory of s that no ready agent owns) is removed instead.
func checkTarget(s *store.Store, path string) error {
	for _, name := range []string{TargetLink, store.RemapLink} {
		p := filepath.Join(path, name)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if fi.IsDir() {
			if ents, err := os.ReadDir(p); err == nil && len(ents) == 0 {
				continue // an empty directory: prepareAdopted removes it
			}
		}
		if leftover(s, p) {
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("remove %s, left by an adoption that did not finish: %w", p, err)
			}
			continue
		}
		what := "build output"
		if fi.Mode()&fs.ModeSymlink != 0 {
			dest, _ := os.Readlink(p)
			what = "a link to " + dest
		}
		return failure.New(failure.Refused,
			fmt.Sprintf("keep it with `mv %s %s.keep` or discard it with `rm -rf %s`, then adopt again", p, p, p),
			"%s holds %s that Ferry did not make; adopting would mix it with the base's", p, what)
	}
	return nil
}

// leftover reports whether p is a link, or a directory holding only links,
// into the directory of an agent of s that is not ready: what an adoption
// that died made.
func leftover(s *store.Store, p string) bool {
	links := []string{p}
	if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
		ents, err := os.ReadDir(p)
		if err != nil {
			return false
		}
		links = links[:0]
		for _, e := range ents {
			links = append(links, filepath.Join(p, e.Name()))
		}
	}
	for _, l := range links {
		dest, err := os.Readlink(l)
		if err != nil {
			return false
		}
		rel, err := filepath.Rel(s.AgentsDir(), dest)
		if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
			return false
		}
		name, _, _ := strings.Cut(rel, string(filepath.Separator))
		if r, err := Read(s, name); err == nil && r.State == Ready {
			return false
		}
	}
	return true
}

// reserveAdoption runs under the store lock: the worktree is still no
// agent's (else the existing agent is returned), the name is free, the base
// chosen, and the agent recorded as creating.
func reserveAdoption(o AdoptOptions, path, commit, branch, tool, backend, isolation string, conf *confine.Record) (*Record, *lock.Lock, *Adoption, error) {
	s := o.Store
	all, err := All(s)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, a := range all {
		if git.SamePath(a.Worktree, path) {
			if a.State == Ready {
				return nil, nil, &Adoption{Record: a, Already: true}, nil
			}
			// An adoption that did not finish: undo it if its adopter is gone.
			l, err := lock.TryTake(s.Agent(a.Name).Lock)
			if err == lock.ErrBusy {
				return nil, nil, nil, failure.New(failure.Refused, "wait for it to finish",
					"agent %q is being made of %s by another process", a.Name, path)
			}
			if err != nil {
				return nil, nil, nil, err
			}
			err = rollback(o.Repo, s, a)
			l.Release()
			if err != nil {
				return nil, nil, nil, fmt.Errorf("undo the unfinished adoption of %s: %w", path, err)
			}
			continue
		}
		if store.Within(path, a.Worktree) || store.Within(a.Worktree, path) {
			return nil, nil, nil, failure.New(failure.Refused, "adopt a worktree that neither contains nor lies inside another agent's",
				"%s overlaps agent %q's worktree %s", path, a.Name, a.Worktree)
		}
	}
	name := o.Name
	if name != "" {
		if err := CheckName(name); err != nil {
			return nil, nil, nil, err
		}
		if _, err := Read(s, name); err == nil {
			return nil, nil, nil, failure.New(failure.Refused, "pass another --name", "agent %q already exists", name)
		}
	} else if name, err = freeName(s, filepath.Base(path)); err != nil {
		return nil, nil, nil, err
	}
	if _, err := os.Stat(s.Agent(name).Dir); err == nil {
		if err := platform.RemoveTree(s.Agent(name).Dir); err != nil { // left by an adoption that died before its record
			return nil, nil, nil, err
		}
	}
	b, err := chooseBase(s, commit)
	if err != nil {
		return nil, nil, nil, err
	}
	r := &Record{
		Format: Format, Name: name, State: Creating, Branch: branch, Worktree: path,
		StartCommit: commit, Base: b.ID, BaseCommit: b.Commit, Backend: backend, Isolation: isolation,
		Tool: tool, Session: o.Session, Created: time.Now().UTC(), Adopted: true, Confinement: conf,
	}
	if err := os.MkdirAll(s.Agent(name).Dir, 0o755); err != nil {
		return nil, nil, nil, err
	}
	l, err := lock.TryTake(s.Agent(name).Lock)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := write(s, r); err != nil {
		l.Release()
		platform.RemoveTree(s.Agent(name).Dir)
		return nil, nil, nil, err
	}
	return r, l, nil, nil
}

// freeName is want made a valid agent name (CleanName), with "-2", "-3" …
// appended while an agent has it.
func freeName(s *store.Store, want string) (string, error) {
	for n := 1; n <= 100; n++ {
		name := CleanName(want, "worktree", n)
		if _, err := Read(s, name); errors.Is(err, fs.ErrNotExist) {
			return name, nil
		} else if err != nil {
			return "", err
		}
	}
	return "", failure.New(failure.Refused, "pass --name", "no free agent name for %q", want)
}

// prepareAdopted puts into an adopted worktree what spawn puts into a
// new one before stamping: the base's Cargo.lock where the commit tracks
// none and the worktree has none, and remap mode's link; an empty target
// directory (a tool's placeholder) makes way for the target link.
func prepareAdopted(repo *git.Repo, s *store.Store, r *Record, b *base.Record, backend fork.Backend) error {
	t := time.Now()
	if err := os.Remove(filepath.Join(r.Worktree, TargetLink)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the empty %s: %w", filepath.Join(r.Worktree, TargetLink), err)
	}
	if err := copyLockfile(repo, r, b); err != nil {
		return err
	}
	if err := write(s, r); err != nil { // rollback removes the placed file by its digest
		return err
	}
	if r.HostPaths() && b.Modes.Remap {
		if err := makeRemapLink(repo, s, r, b, backend); err != nil {
			return err
		}
		if err := write(s, r); err != nil {
			return err
		}
	}
	r.Timings.Worktree = since(t)
	return nil
}

// undoAdoption removes from an adopted worktree what adoption put there
// and left as it made it: the target link (or directory of links), remap
// mode's link and the placed Cargo.lock.
func undoAdoption(r *Record) error {
	var errs []error
	if r.TargetLink != "" && OwnEntry(r, TargetLink) {
		if err := os.RemoveAll(filepath.Join(r.Worktree, TargetLink)); err != nil {
			errs = append(errs, err)
		}
	}
	if r.Remap != nil {
		if link := filepath.Join(r.Worktree, store.RemapLink); record.LinksTo(link, r.Remap.Link) {
			if err := os.Remove(link); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if r.PlacedLockfile != "" && placedLockfileUnchanged(r) {
		if err := os.Remove(filepath.Join(r.Worktree, lockfile)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
