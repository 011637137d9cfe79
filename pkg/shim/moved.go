package shim

import (
	"strings"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/freshness"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/session"
	"github.com/ferrydev/ferry/pkg/store"
)

// freshenMoved runs before a call of agent a that may build: it freshens
// the worktree's tracked files and links changed since the agent's last
// build without their mtime following (freshness.FreshenMoved says how,
// and what "the last build" is), so Cargo sees them.
//
// It runs where the shim first sees the call, before anything else is
// decided: on the host for a call from outside the sandbox (the shim has
// not entered it yet), inside it for one from `ferry run` or `ferry
// shell`, and at host paths for an agent without the sandbox. The worktree
// and its git directory are the same files in each (the sandbox keeps host
// paths, and top may be the canonical mount of the same worktree), and
// the mark lives in the agent's state dir, which its sandbox keeps
// writable (the git directory is read-only there).
//
// Calls that build nothing (cargo -V, metadata, locate-project, tree, …)
// skip it: the classification is the warm build's (planWarm), whose
// unknown subcommands and aliases count as building. Its cost is one read
// of the index and an lstat per tracked path and directory, measured by
// `make bench -only ctime`. When tracked links changed, the dep-info of
// the units that read through them is emptied in the fork first
// (freshness.LinkReaders, the link_rebuilds rule for a retarget after a
// build), which checksum mode needs.
func (c *Call) freshenMoved(s *store.Store, a *record.Agent, top string) error {
	if !mayBuild(c.Args) {
		return nil
	}
	gitDir, err := git.WorktreeGitDir(top)
	if err != nil {
		return failure.Wrap(failure.Refused, err, "repair the worktree link with `git worktree repair` in "+top,
			"cannot find the git directory of agent %q's worktree", a.Name)
	}
	emptyReaders := func(links []string) error {
		view, ok := forkView(s, a)
		if !ok {
			return freshness.ErrLinksPending
		}
		files, err := freshness.LinkReaders(view, s.Dir, top, links)
		if err != nil {
			return err
		}
		return freshness.EmptyDepInfo(view, files)
	}
	if _, err := freshness.FreshenMoved(top, gitDir, s.Agent(a.Name).Freshness, s.Base(a.Base).Src, emptyReaders); err != nil {
		return failure.Wrap(failure.Refused, err,
			"make the worktree's tracked files yours and writable (Ferry raises the mtime of a file copied in with an old one, so Cargo rebuilds from it)",
			"cannot check agent %q's worktree for files changed without a newer mtime", a.Name)
	}
	return nil
}

// forkView is where this process can change agent a's fork as the build
// will see it: the canonical target inside its sandbox, and outside it the
// fork's directory (reflink, copy) or an overlay's live view. An overlay
// with no namespace alive has no view (its upper dir alone is not the
// fork, and a namespace may be mounting it): then the changed links are
// left to the next call (freshness.ErrLinksPending), which finds the
// namespace this one starts and its holder; this build has only the
// raised mtimes of the links' ends, which serve mtime mode where an end
// lies in the checkout.
func forkView(s *store.Store, a *record.Agent) (string, bool) {
	if !a.HostPaths() && session.InSandbox(s, a) {
		return s.MntTarget(), true
	}
	return session.HostTarget(s, a)
}

// mayBuild reports whether a call with cargo arguments args may build
// units: as the warm build decides what to record, an unknown subcommand
// or alias counting as one that does; and not cargo -vV (the verbose
// version, which tools such as rustup ask for).
func mayBuild(args []string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, "+") {
			continue
		}
		if a == "-vV" || a == "-Vv" {
			return false
		}
		break
	}
	return planWarm(args).record
}
