package agent

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/record"
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
// (session.RemapTarget); rm and gc do not count the link as the agent's
// work while it leads where spawn made it lead (ferryEntry).

// Remap is what agent.json records of remap mode.
type Remap = record.Remap

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
