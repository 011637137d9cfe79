package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/store"
)

// Pending adoptions: a hook that cannot give a tool a warm agent now (no
// base yet, the base still building) still lets the tool have its worktree,
// cold, and records it here; once a base is ready, the builder adopts every
// pending worktree that has not built yet (its target is empty), so the
// tool's next build there is warm. A worktree that built meanwhile, or
// went, is dropped: adopting it would mix its own build output with the
// base's.

// Pending is one worktree waiting for a base, <store>/pending/<hash>.json.
type Pending struct {
	Worktree string    `json:"worktree"`
	Tool     string    `json:"tool"`
	Session  string    `json:"session,omitempty"`
	Name     string    `json:"name,omitempty"` // the agent name the hook would have given
	Commit   string    `json:"commit"`
	Asked    time.Time `json:"asked"`
}

func pendingPath(s *store.Store, worktree string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(worktree)))
	return filepath.Join(s.PendingDir(), hex.EncodeToString(sum[:8])+".json")
}

// AddPending records p (replacing an older record of its worktree).
func AddPending(s *store.Store, p Pending) error {
	if err := os.MkdirAll(s.PendingDir(), 0o755); err != nil {
		return err
	}
	if p.Asked.IsZero() {
		p.Asked = time.Now().UTC()
	}
	return atomicfile.WriteJSON(pendingPath(s, p.Worktree), p, 0o644)
}

// DropPending removes the record of worktree, if any.
func DropPending(s *store.Store, worktree string) error {
	err := os.Remove(pendingPath(s, worktree))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// PendingAll returns every pending record, oldest first. A record that
// cannot be read is skipped (a half-written one cannot exist: records are
// written whole).
func PendingAll(s *store.Store) ([]Pending, error) {
	ents, err := os.ReadDir(s.PendingDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Pending
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		var p Pending
		if err := atomicfile.ReadJSON(filepath.Join(s.PendingDir(), e.Name()), &p); err != nil || p.Worktree == "" {
			continue
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Asked.Before(out[j].Asked) })
	return out, nil
}

// BaseBuilding reports whether a base of s is being built now: a builder
// holds one of the bases' locks.
func BaseBuilding(s *store.Store) (bool, error) {
	ents, err := os.ReadDir(s.BasesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if held, err := lock.Held(s.BaseLock(id)); err == nil && held {
			return true, nil
		}
	}
	return false, nil
}
