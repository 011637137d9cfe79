// Package git drives the git binary for Ferry.
//
// Ferry never reimplements git: hooks, clean/smudge filters, LFS, autocrlf
// and sparse checkout must behave exactly as they do for the user, so every
// operation here executes `git -C <dir> ...`. Each call gets the process
// environment minus the variables that could point git at another repository
// or index (GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE, GIT_PREFIX,
// GIT_COMMON_DIR and a few more; a git hook that runs Ferry inherits some of
// them), with LC_ALL=C and GIT_TERMINAL_PROMPT=0, and no standard input.
// git's standard error becomes part of the returned error (*CommandError).
//
// Repository code runs only where a checkout needs it. Ferry runs git
// outside any sandbox, often in an agent's worktree, whose files any of
// the agent's builds can write: a relative core.hooksPath (husky's .husky,
// say) names a directory of the worktree git runs in, so a hook a build
// script put there would run, unconfined, at Ferry's next git call in that
// worktree. And no call but a checkout needs a hook. So every call runs
// with -c core.hooksPath=/dev/null (a path below which no hook can exist;
// an empty value is no such thing: git 2.39 then looks for hooks at the
// filesystem's root) and -c core.fsmonitor=false (`git status`, `git
// update-index --refresh` and even `git ls-files` run a configured
// fsmonitor program; without one, git looks at every file, with the same
// answer). Only the calls that check a tree out keep the hooks:
// WorktreeAddBranch (spawn, adopt's cold path), WorktreeAddDetached (a
// base's checkout, the store's spare, a pulled base) and CheckoutDetached
// (a spare taken by the next base). A post-checkout hook may change what
// the checkout holds (generated files, LFS), and a base's checkout must be
// what an agent's worktree gets, so both run the same hooks: those of the
// tree being checked out, a relative core.hooksPath taken from it rather
// than from the worktree Ferry was started in (checkoutHooks; a hook that
// fires before the tree is there, worktree add -b's reference-transaction,
// then finds none). Ferry's own post-checkout hook (package hook) runs
// there too. The checkouts do
// without the fsmonitor program like every other call. HooksPath and
// HooksDir ask git about the configuration as it is, which the overrides
// would hide; `git config --get` and `rev-parse --git-path` run nothing.
//
// Everything else that decides what git writes stays: clean and smudge
// filters (LFS's among them), autocrlf, sparse checkout and attributes, in
// the checkouts and in `git status`, which runs the clean filter to
// compare a changed file with the index. The configuration that can start
// other programs needs no override, because no call here reaches it: a
// pager starts only on a terminal, and git's output here goes to a pipe;
// diff.external and textconv drivers only show diffs (TreesDiffer asks
// diff-tree --quiet, which compares object ids); core.editor, gpg.program
// and credential helpers belong to commands Ferry does not run (commit,
// signed tags) or to the network. The one network call, the pipeline's
// `git fetch`, keeps core.sshCommand and the credential helpers it needs,
// with hooks and fsmonitor off like the rest.
//
// Machine-readable output is always requested NUL-terminated (-z), so paths
// with spaces, newlines or non-UTF-8 bytes come back verbatim. Paths are
// compared after resolving symlinks (/tmp may be a link), including paths
// whose last components no longer exist.
//
// Worktrees are only ever unregistered one at a time, by the removal of that
// worktree: this package has no prune, because `git worktree prune` would
// also drop the user's own worktrees whose directories are only temporarily
// missing (an unmounted disk, a moved directory).
package git

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/ferrydev/ferry/pkg/failure"
)

// Repo is a git repository seen from one of its worktrees.
type Repo struct {
	// Top is the top level of the worktree the repository was opened from:
	// absolute, cleaned, symlinks resolved.
	Top string
	// common is CommonDir's answer when Open learned it (with the top
	// level, in one git call), else "".
	common string
}

// Open finds the git worktree containing dir.
//
// Outside any repository, in a bare repository and inside a git directory it
// returns a failure.Prereq error with a hint.
func Open(dir string) (*Repo, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open git repository at %s: %w", dir, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("open git repository at %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("open git repository at %s: not a directory", dir)
	}
	// The common directory comes with the top level: nearly every caller
	// asks for it next (the store is keyed by it), and each git call costs
	// a few milliseconds of a command's start.
	out, err := run(abs, "rev-parse", "--show-toplevel", "--git-common-dir")
	top, common, _ := strings.Cut(strings.TrimSuffix(string(out), "\n"), "\n")
	top = strings.TrimSpace(top)
	if err != nil || top == "" {
		return nil, classifyOpen(abs, err)
	}
	if !filepath.IsAbs(top) {
		return nil, fmt.Errorf("open git repository at %s: git reported a relative top level %q", dir, top)
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(top))
	if err != nil {
		return nil, fmt.Errorf("open git repository at %s: %w", dir, err)
	}
	r := &Repo{Top: real}
	if common != "" {
		// Relative to the directory git ran in (abs), as older gits print
		// it; a failure here leaves CommonDir to ask again.
		r.common, _ = resolvePath(abs, common)
	}
	return r, nil
}

// classifyOpen explains why rev-parse --show-toplevel found no worktree at dir.
func classifyOpen(dir string, topErr error) error {
	if failure.KindOf(topErr) == failure.Prereq {
		return topErr // git itself is missing
	}
	if strings.Contains(stderrOf(topErr), "dubious ownership") {
		return failure.Wrap(failure.Prereq, topErr,
			"git refuses repositories owned by another user; if you trust it, run `git config --global --add safe.directory <path>` as git suggests",
			"git refuses the repository at %s", dir)
	}
	out, err := run(dir, "rev-parse", "--is-bare-repository", "--is-inside-work-tree")
	if err != nil {
		if failure.KindOf(err) == failure.Prereq {
			return err
		}
		if exitCode(err) != 128 {
			return fmt.Errorf("open git repository at %s: %w", dir, err)
		}
		return failure.Wrap(failure.Prereq, err,
			"run Ferry inside a git worktree of the project (cd into it or pass its path)",
			"not inside a git repository: %s", dir)
	}
	lines := strings.Fields(string(out))
	if len(lines) >= 1 && lines[0] == "true" {
		return failure.New(failure.Prereq,
			"Ferry needs a worktree; create one with `git worktree add <path>` and run Ferry there",
			"%s is in a bare git repository, which has no worktree", dir)
	}
	if len(lines) >= 2 && lines[1] == "false" {
		return failure.New(failure.Prereq,
			"run Ferry from the worktree, not from inside its .git directory",
			"%s is inside a git directory, not a worktree", dir)
	}
	if topErr == nil {
		topErr = errors.New("git printed no top level")
	}
	return fmt.Errorf("open git repository at %s: %w", dir, topErr)
}

// Run runs git -C dir args... with the package's environment and returns
// its standard output verbatim. An empty dir means r.Top.
func (r *Repo) Run(dir string, args ...string) (string, error) {
	if dir == "" {
		dir = r.Top
	}
	out, err := run(dir, args...)
	return string(out), err
}

// CommonDir returns the repository's common git directory (shared by all
// worktrees): absolute, cleaned, symlinks resolved.
func (r *Repo) CommonDir() (string, error) {
	if r.common != "" {
		return r.common, nil
	}
	return r.revParsePath("--git-common-dir")
}

// GitDir returns the git directory of the worktree at r.Top (for a linked
// worktree, $GIT_COMMON_DIR/worktrees/<id>): absolute, cleaned, symlinks
// resolved.
func (r *Repo) GitDir() (string, error) {
	return r.revParsePath("--git-dir")
}

func (r *Repo) revParsePath(flag string) (string, error) {
	out, err := run(r.Top, "rev-parse", flag)
	if err != nil {
		return "", wrapf(err, "locate git directory of %s", r.Top)
	}
	p := strings.TrimRight(string(out), "\n")
	if p == "" {
		return "", fmt.Errorf("locate git directory of %s: rev-parse %s printed nothing", r.Top, flag)
	}
	real, err := resolvePath(r.Top, p)
	if err != nil {
		return "", fmt.Errorf("locate git directory of %s: %w", r.Top, err)
	}
	return real, nil
}

// resolvePath makes p, a path git printed running in dir, absolute, clean
// and free of symlinks: older gits print paths relative to the working
// directory (-C dir).
func resolvePath(dir, p string) (string, error) {
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return filepath.EvalSymlinks(filepath.Clean(p))
}

// objectID is compiled on first use (see quoted).
var objectID = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`) })

// ResolveCommit returns the full object id of the commit rev names (a
// branch, tag, short id, HEAD~2, ...; tags are peeled). A rev that names no
// commit is a failure.Usage error. rev is never read as an option, even when
// it starts with '-'.
func (r *Repo) ResolveCommit(rev string) (string, error) {
	const hint = "list recent commits with `git log --oneline -5` and branches with `git branch -a`"
	if rev == "" {
		return "", failure.New(failure.Usage, hint, "empty revision names no commit")
	}
	out, err := run(r.Top, "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}")
	if err != nil {
		// --verify --quiet exits 1 for a well-formed question with no answer;
		// 128 means git itself failed (a corrupt repository, say).
		if exitCode(err) == 1 {
			// git said nothing (--quiet): its exit status is no news to a user.
			return "", failure.New(failure.Usage, hint, "revision %q names no commit", rev)
		}
		return "", wrapf(err, "resolve revision %q", rev)
	}
	id := strings.TrimSpace(string(out))
	if !objectID().MatchString(id) {
		return "", fmt.Errorf("resolve revision %q: git printed %q, not an object id", rev, id)
	}
	return id, nil
}

// IsAncestor reports whether commit a is an ancestor of commit b (`git
// merge-base --is-ancestor`; a commit is its own ancestor). A commit the
// repository does not have is an error.
func (r *Repo) IsAncestor(a, b string) (bool, error) {
	_, err := run(r.Top, "merge-base", "--is-ancestor", "--end-of-options", a, b)
	if err == nil {
		return true, nil
	}
	if exitCode(err) == 1 {
		return false, nil
	}
	return false, wrapf(err, "is %s an ancestor of %s", a, b)
}

// CheckBranchName refuses, as failure.Usage, a name git would not accept
// for a new branch (`git check-ref-format --branch`). A name that git
// expands, such as @{-1} for the branch checked out before, is refused too:
// it names another branch, not a new one.
func (r *Repo) CheckBranchName(name string) error {
	const hint = "choose a name git accepts for a branch: no '..', spaces, ~ ^ : ? * [ or \\, " +
		"not starting with '-' nor ending in '.' or '.lock' (`git check-ref-format --branch NAME` checks one)"
	out, err := run(r.Top, "check-ref-format", "--branch", name)
	if err != nil {
		if exitCode(err) == 128 {
			return failure.New(failure.Usage, hint, "%q is not a valid branch name", name)
		}
		return wrapf(err, "check branch name %q", name)
	}
	if got := strings.TrimSpace(string(out)); got != name {
		return failure.New(failure.Usage, hint, "branch name %q is git shorthand for the existing branch %q, not a new name", name, got)
	}
	return nil
}
