package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/store"
)

// The build output where people and agent tools look for it. Inside the
// sandbox Cargo writes to the canonical target; a plain shell in the
// worktree (Claude Code's Bash tool runs each command as one) looks for
// ./target/debug/<bin>. So spawn makes one entry of Ferry's own in the
// worktree: a symbolic link target -> the path the fork's backend names for
// the host (fork.Lifecycle.HostLink: the fork's directory for reflink and
// copy, a link into the live namespace for an overlay).
//
// Cargo never uses it: the shim always sets CARGO_TARGET_DIR. It is made
// only where it cannot be mistaken for the user's work:
//
//   - Not when the worktree has anything at target already (a tracked path,
//     or a directory a checkout hook made): that is the user's.
//   - Not when the repository's ignore rules leave it untracked. A pattern
//     with a trailing slash (target/) matches only directories, and git sees
//     a link as a file, so `git status` would list it and `git add -A` would
//     commit a link into the store. Measured with git 2.47: /target and
//     target ignore the link; /target/, target/ and target/* do not. Git has
//     no per-worktree exclude file (info/exclude lives in the common dir,
//     shared with the user's own worktrees, and core.excludesFile per
//     worktree needs extensions.worktreeConfig and replaces the user's
//     global one), so Ferry does not change the rules: it skips the link and
//     says why in the record (TargetLinkSkipped).
//
// The worktree root's mtime is put back after the link is made: stamping set
// it to the base's, and Cargo's rerun-if-changed on a directory compares it.
//
// An ignored link still shows in `git status --ignored`; OwnEntry tells the
// commands that judge a worktree's work (rm, gc's reaping) that it is
// Ferry's, as long as it is still the link Ferry made.

// TargetLink is the link's name at the worktree root, as git status
// names it.
const TargetLink = "target"

// makeTargetLink makes the worktree's target link for agent r, or records
// why it did not. The caller holds the agent lock.
func makeTargetLink(repo *git.Repo, s *store.Store, r *Record, b fork.Backend) error {
	dest, err := b.HostLink(forkOf(s, r))
	if err != nil {
		return err
	}
	link := filepath.Join(r.Worktree, TargetLink)
	if _, err := os.Lstat(link); err == nil {
		r.TargetLinkSkipped = "the worktree has its own " + TargetLink
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	root, err := os.Lstat(r.Worktree)
	if err != nil {
		return err
	}
	if err := os.Symlink(dest, link); err != nil {
		return fmt.Errorf("link %s to the agent's build output: %w", link, err)
	}
	ignored, err := repo.Ignored(r.Worktree, TargetLink)
	if err == nil && !ignored {
		err = os.Remove(link)
		r.TargetLinkSkipped = "the repository's ignore rules do not ignore a symbolic link named " + TargetLink +
			" (a pattern with a trailing slash matches only directories): add /" + TargetLink + " to .gitignore for ./" +
			TargetLink + " to reach the agent's build"
	} else if err == nil {
		r.TargetLink = dest
	}
	if err != nil {
		os.Remove(link)
		return err
	}
	mtime := root.ModTime()
	return os.Chtimes(r.Worktree, mtime, mtime)
}

// OwnEntry reports whether path, as git status names it in r's worktree
// (relative to the worktree root), is an entry Ferry made there and that is
// still as Ferry made it: the target link, pointing where spawn pointed it.
// Commands that judge whether a worktree holds the user's work (rm, gc's
// reaping) skip such entries; a link the user retargeted or replaced is
// theirs.
func OwnEntry(r *Record, path string) bool {
	if r.TargetLink == "" || path != TargetLink {
		return false
	}
	link := filepath.Join(r.Worktree, TargetLink)
	fi, err := os.Lstat(link)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return false
	}
	dest, err := os.Readlink(link)
	return err == nil && dest == r.TargetLink
}

// HostTarget returns the path through which a process outside any sandbox
// reaches agent r's build output now, and whether it does: the fork's
// directory for reflink and copy agents, and for an overlay agent the
// live namespace's view while one lives ("", false otherwise).
func HostTarget(s *store.Store, r *Record) (string, bool) {
	b, err := backendOf(r)
	if err != nil || r.State != Ready {
		return "", false
	}
	return b.Reach(forkOf(s, r))
}
