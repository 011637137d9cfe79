package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/store"
	"github.com/ferrydev/ferry/pkg/toolchain"
)

// Remap mode (package remap; [sandbox] remap-paths): an agent spawned
// without the namespace from a base built in remap mode builds in remap
// mode too, as its base did, so the rustc command lines of the two are the
// same and rustc's incremental state carries over (with a rustc that
// allows it: toolchain.ProbeRemap). Its worktree gets the link
// <worktree>/.ferry-target to its fork, made before the worktree is
// compared with the base's checkout (which has its own link at the same
// place, so their roots hold the same entries), and ignored through the
// repository's info/exclude, as the base's is. The shim gives cargo the
// link as its target dir and ferry-rustc as its workspace wrapper
// (RemapTarget); rm and gc do not count the link as the agent's work while
// it leads where spawn made it lead (ferryEntry).

// Remap is what agent.json records of remap mode.
type Remap struct {
	Link    string `json:"link"`    // where <worktree>/.ferry-target leads: the fork
	Channel string `json:"channel"` // the base toolchain's channel, for ferry-rustc (toolchain.Channel)
	// Wrapper is ferry-rustc as the base's build named it (the store's
	// RemapWrapper, spelled as the commands saw the store parent): Cargo
	// keys its rustc-info cache on the wrapper's path.
	Wrapper string `json:"wrapper"`
}

// makeRemapLink puts remap mode's link into agent r's worktree, leading to
// the fork backend will make, and records it in r.
func makeRemapLink(repo *git.Repo, s *store.Store, r *Record, b *base.Record, backend fork.Backend) error {
	dest := backend.TargetSpec(fork.Paths{BaseTarget: b.Target, AgentDir: s.Agent(r.Name).Dir}).Dir
	if dest == "" {
		// Only the overlay has no directory on the host, and it is refused
		// without the namespace.
		return failure.New(failure.Refused, "use backend reflink or copy",
			"base %s was built in remap mode, and a fork with backend %s has no directory for its link", b.ID, backend.Name())
	}
	if err := repo.Exclude("/" + store.RemapLink); err != nil {
		return fmt.Errorf("remap mode: %w", err)
	}
	if err := os.Symlink(dest, filepath.Join(r.Worktree, store.RemapLink)); err != nil {
		return fmt.Errorf("remap mode: link the worktree to its fork: %w", err)
	}
	r.Remap = &Remap{Link: dest, Channel: toolchain.Channel(b.Toolchain.RustcVersion), Wrapper: s.RemapWrapper()}
	return nil
}

// RemapTarget is the target dir cargo gets for remap agent r's worktree:
// the link in it, put back when something removed it. A link that leads
// elsewhere, or anything else of that name, is not Ferry's to replace:
// builds are refused until it is removed.
func RemapTarget(r *Record) (string, error) {
	link := filepath.Join(r.Worktree, store.RemapLink)
	if linksTo(link, r.Remap.Link) {
		return link, nil
	}
	if _, err := os.Lstat(link); errors.Is(err, fs.ErrNotExist) {
		if err := os.Symlink(r.Remap.Link, link); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("remap mode: put back %s: %w", link, err)
		}
		if linksTo(link, r.Remap.Link) {
			return link, nil
		}
	}
	return "", failure.New(failure.Refused, fmt.Sprintf("remove %s: Ferry puts its link back on the next cargo call", link),
		"%s in agent %q's worktree is not the link to its fork (%s) that its builds in remap mode go through", store.RemapLink, r.Name, r.Remap.Link)
}
