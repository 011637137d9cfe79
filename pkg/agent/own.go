package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/lifecycle"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/session"
	"github.com/ferrydev/ferry/pkg/store"
)

// The build output where people and agent tools look for it. Inside the
// sandbox Cargo writes to the canonical target; a plain shell in the
// worktree (Claude Code's Bash tool runs each command as one) looks for
// ./target/debug/<bin>. So spawn makes one entry of Ferry's own in the
// worktree: a symbolic link target -> the path the fork's backend names for
// the host (lifecycle.Lifecycle.HostLink: the fork's directory for reflink and
// copy, a link into the live namespace for an overlay).
//
// Cargo never uses it: the shim always sets CARGO_TARGET_DIR. It is made
// only where it cannot be mistaken for the user's work:
//
//   - Not when the worktree has anything at target already (a tracked path,
//     or a directory a checkout hook made): that is the user's.
//   - Not as a link when the repository's ignore rules leave it untracked.
//     A pattern with a trailing slash (target/) matches only directories,
//     and git sees a link as a file, so `git status` would list it and `git
//     add -A` would commit a link into the store. Measured with git 2.47:
//     /target and target ignore the link; /target/, target/ and target/* do
//     not. There spawn makes target a directory instead, holding one link
//     per entry of the base's target (debug, release, and whatever else the
//     warm build made: .rustc_info.json, a target triple's directory), each
//     to the same name in the agent's build output (TargetLinks): what those
//     patterns ignore. An entry Cargo makes later at the top of the agent's
//     target (a custom profile's directory, another triple's) is not linked.
//   - Not at all when the rules ignore neither. Git has no per-worktree
//     exclude file (info/exclude lives in the common dir, shared with the
//     user's own worktrees, and core.excludesFile per worktree needs
//     extensions.worktreeConfig and replaces the user's global one), so
//     Ferry does not change the rules: it skips the link and says why in the
//     record (TargetLinkSkipped).
//
// The worktree root's mtime is put back after the link is made: stamping set
// it to the base's, and Cargo's rerun-if-changed on a directory compares it.
//
// An ignored link still shows in `git status --ignored`; OwnEntry tells the
// commands that judge a worktree's work (rm, gc's reaping) that it is
// Ferry's, as long as it is still the link Ferry made.

// TargetLink is the link's name at the worktree root, as git status
// names it.
const TargetLink = record.TargetLink

// makeTargetLink makes the worktree's target link for agent r, or records
// why it did not. The caller holds the agent lock.
func makeTargetLink(repo *git.Repo, s *store.Store, r *Record) error {
	if r.TargetLinkSkipped != "" {
		return nil // decided before (Adopt)
	}
	l, err := session.Lifecycle(r)
	if err != nil {
		return err
	}
	dest, err := l.HostLink(session.Fork(s, r, nil))
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
	if err == nil && ignored {
		r.TargetLink = dest
	} else if err == nil {
		if err = os.Remove(link); err == nil {
			err = makeTargetDir(repo, s, r, dest)
		}
	}
	if err != nil {
		os.RemoveAll(link)
		return err
	}
	mtime := root.ModTime()
	return os.Chtimes(r.Worktree, mtime, mtime)
}

// makeTargetDir makes the worktree's target a directory of links to the
// agent's build output at dest, one per entry of the base's target, where
// the ignore rules ignore all of it; otherwise it leaves nothing and
// records why.
func makeTargetDir(repo *git.Repo, s *store.Store, r *Record, dest string) error {
	dir := filepath.Join(r.Worktree, TargetLink)
	names, err := targetNames(session.Fork(s, r, nil))
	if err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	for _, n := range names {
		if err := os.Symlink(filepath.Join(dest, n), filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("link %s to the agent's build output: %w", filepath.Join(dir, n), err)
		}
	}
	shown, err := repo.Untracked(r.Worktree, TargetLink)
	if err != nil {
		return err
	}
	if len(shown) > 0 {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		r.TargetLinkSkipped = "the repository's ignore rules ignore neither a symbolic link nor a directory named " + TargetLink +
			": add /" + TargetLink + " to .gitignore for ./" + TargetLink + " to reach the agent's build"
		return nil
	}
	r.TargetLink, r.TargetLinks = dest, names
	return nil
}

// targetNames are the names a target directory of links holds: the
// entries at the top of the base's target but the nested workspaces'
// (Ferry's), and the two profiles Cargo builds without being asked for
// one, sorted.
func targetNames(a lifecycle.Agent) ([]string, error) {
	base, err := a.BaseTarget()
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(base)
	if err != nil {
		return nil, err
	}
	names := []string{"debug", "release"}
	nested := filepath.Base(store.NestedTargets(base))
	for _, e := range ents {
		if n := e.Name(); n != nested && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names, nil
}

// OwnEntry reports whether path, as git status names it in r's worktree
// (relative to the worktree root), is an entry Ferry made there and that is
// still as Ferry made it: the target link, pointing where spawn pointed it.
// Commands that judge whether a worktree holds the user's work (rm, gc's
// reaping) skip such entries; a link the user retargeted or replaced is
// theirs.
//
// For a target directory of links (TargetLinks), git names the directory
// ("target/") or, under a pattern such as target/*, each link
// ("target/debug"): the directory is Ferry's while it holds exactly its
// links, each as spawn made it; one link is Ferry's while it is as spawn
// made it.
func OwnEntry(r *Record, path string) bool {
	if r.TargetLink == "" {
		return false
	}
	if r.TargetLinks == nil {
		return path == TargetLink && record.LinksTo(filepath.Join(r.Worktree, TargetLink), r.TargetLink)
	}
	dir := filepath.Join(r.Worktree, TargetLink)
	if name, ok := strings.CutPrefix(path, TargetLink+"/"); ok && name != "" {
		return slices.Contains(r.TargetLinks, name) && record.LinksTo(filepath.Join(dir, name), filepath.Join(r.TargetLink, name))
	}
	if path != TargetLink && path != TargetLink+"/" {
		return false
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return false
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != len(r.TargetLinks) {
		return false
	}
	for _, n := range r.TargetLinks {
		if !record.LinksTo(filepath.Join(dir, n), filepath.Join(r.TargetLink, n)) {
			return false
		}
	}
	return true
}

// Placed is a file spawn places in an agent's worktree for its tool.
type Placed struct {
	Rel  string // relative to the worktree, with '/'
	Data []byte
}

// placeFiles writes the files of place that r's worktree does not have
// (one the commit or a checkout hook put there is the user's, and stays),
// and records each it wrote in r.Placed. The mtimes of the directories it
// wrote into that were there before (the worktree's root, a tracked
// .claude) are put back, as for the target link: stamping set them.
func placeFiles(r *Record, place []Placed) error {
	for _, p := range place {
		path := filepath.Join(r.Worktree, filepath.FromSlash(p.Rel))
		if _, err := os.Lstat(path); err == nil {
			continue
		}
		kept := map[string]os.FileInfo{}
		for d := filepath.Dir(path); ; d = filepath.Dir(d) {
			if fi, err := os.Lstat(d); err == nil {
				kept[d] = fi
			}
			if d == r.Worktree || len(d) <= len(r.Worktree) {
				break
			}
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, p.Data, 0o600); err != nil {
			return fmt.Errorf("place %s in the worktree: %w", p.Rel, err)
		}
		if r.Placed == nil {
			r.Placed = map[string]string{}
		}
		r.Placed[p.Rel] = digest(p.Data)
		for d, fi := range kept {
			if err := os.Chtimes(d, fi.ModTime(), fi.ModTime()); err != nil {
				return err
			}
		}
	}
	return nil
}

// HostTarget returns the path through which a process outside any sandbox
// reaches agent r's build output now, and whether it does
// (session.HostTarget).
func HostTarget(s *store.Store, r *Record) (string, bool) { return session.HostTarget(s, r) }

// Written returns the host directory holding what agent r's builds wrote
// into its fork (session.Written).
func Written(s *store.Store, r *Record) (string, error) { return session.Written(s, r) }
