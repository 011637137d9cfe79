package git

import (
	"path/filepath"
	"strings"
)

// HooksPath returns core.hooksPath as git reads it (a leading ~ expanded,
// a relative path as written), or "" when it is not set. It is asked
// again on every call (one git process, about a millisecond): a watcher
// keeps its Repo for as long as it runs.
func (r *Repo) HooksPath() (string, error) {
	out, err := runPlain(r.Top, "config", "--type=path", "--get", "core.hooksPath")
	switch {
	case exitCode(err) == 1:
		return "", nil // not set
	case err != nil:
		return "", wrapf(err, "read core.hooksPath of %s", r.Top)
	}
	return strings.TrimRight(string(out), "\n"), nil
}

// HooksDir returns the directory git run in r.Top takes hooks from
// (`rev-parse --git-path hooks`): core.hooksPath when it is set, else the
// common git dir's hooks/. A relative answer is relative to r.Top.
func (r *Repo) HooksDir() (string, error) {
	out, err := runPlain(r.Top, "rev-parse", "--git-path", "hooks")
	if err != nil {
		return "", wrapf(err, "locate the hooks of %s", r.Top)
	}
	return strings.TrimRight(string(out), "\n"), nil
}

// checkoutHooks is the core.hooksPath a checkout of the worktree at dir
// runs with: a relative core.hooksPath made absolute below dir, else ""
// (git's own reading). git takes a relative one from its working
// directory, which for `git worktree add` is the worktree Ferry runs it
// from, perhaps an agent's whose files any of its builds can write; so a
// checkout runs the hooks of the tree it checks out, for a base as for an
// agent, wherever Ferry was started.
func (r *Repo) checkoutHooks(dir string) (string, error) {
	p, err := r.HooksPath()
	if err != nil || p == "" || filepath.IsAbs(p) {
		return "", err
	}
	return filepath.Join(dir, p), nil
}
