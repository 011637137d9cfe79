package session

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/store"
)

// HostTarget returns the path through which a process outside any sandbox
// reaches agent r's build output now, and whether it does: the fork's
// directory for reflink and copy agents, and for an overlay agent the
// live namespace's view while one lives ("", false otherwise).
func HostTarget(s *store.Store, r *record.Agent) (string, bool) {
	b, err := Lifecycle(r)
	if err != nil || r.State != record.Ready {
		return "", false
	}
	return b.Reach(Fork(s, r, nil))
}

// Written returns the host directory holding what agent r's builds wrote
// into its fork: the fork's directory for reflink and copy agents, the
// upper layer for an overlay agent (which holds only that). It needs no
// live namespace, so the shim reads it after cargo has exited.
func Written(s *store.Store, r *record.Agent) (string, error) {
	b, err := Lifecycle(r)
	if err != nil {
		return "", err
	}
	return b.Written(Fork(s, r, nil)), nil
}

// RemapTarget is the target dir cargo gets for remap agent r's worktree
// (remap mode: see package agent's remap.go): the link in it, put back
// when something removed it. A link that leads elsewhere, or anything else
// of that name, is not Ferry's to replace: builds are refused until it is
// removed.
func RemapTarget(r *record.Agent) (string, error) {
	link := filepath.Join(r.Worktree, store.RemapLink)
	if record.LinksTo(link, r.Remap.Link) {
		return link, nil
	}
	if _, err := os.Lstat(link); errors.Is(err, fs.ErrNotExist) {
		if err := os.Symlink(r.Remap.Link, link); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("remap mode: put back %s: %w", link, err)
		}
		if record.LinksTo(link, r.Remap.Link) {
			return link, nil
		}
	}
	return "", failure.New(failure.Refused, fmt.Sprintf("remove %s: Ferry puts its link back on the next cargo call", link),
		"%s in agent %q's worktree is not the link to its fork (%s) that its builds in remap mode go through", store.RemapLink, r.Name, r.Remap.Link)
}
