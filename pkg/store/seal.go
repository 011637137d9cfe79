package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ferrydev/ferry/pkg/failure"
)

// Sealing. Inside every sandbox (an agent's session and cargo calls, a
// base's warm commands) the store parent is read-only: an agent cannot
// overwrite a base's target, another agent's fork, the shim on PATH or the
// bus files, however it names them. The bus directory and the signing keys
// are not even readable there: each is covered by an empty read-only
// filesystem (Secrets). Only the canonical checkout and target
// (separate mounts) stay writable, and so do the entries of the store
// parent that are not Ferry's: worktrees kept under $FERRY_HOME/worktrees,
// or anything else a user put there.

// Sealing is what a sandbox makes of the store parent: Root read-only,
// except Writable, and Masked hidden (Secrets).
type Sealing struct {
	Root     string
	Writable []string
	Masked   []string
}

// Seal returns what a sandbox of this store seals (the store parent), the
// paths below it that stay writable, and those it hides.
func (s *Store) Seal() (Sealing, error) {
	seal := Sealing{Root: s.Parent, Masked: Secrets(s.Parent)}
	ents, err := os.ReadDir(s.Parent)
	if errors.Is(err, fs.ErrNotExist) {
		return seal, nil
	}
	if err != nil {
		return Sealing{}, err
	}
	// Made now if missing, so that every namespace hides them: one
	// created later would show in a namespace that outlives this call
	// (an overlay agent's), and a joined namespace must hide each.
	for _, d := range seal.Masked {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return Sealing{}, err
		}
	}
	for _, e := range ents {
		if ferrys(s.Parent, e) {
			continue
		}
		seal.Writable = append(seal.Writable, filepath.Join(s.Parent, e.Name()))
	}
	return seal, nil
}

// ferrys reports whether entry e of the store parent is Ferry's: the shim's
// bin/, the bus directory, or a repository's store (it holds store.json).
func ferrys(parent string, e fs.DirEntry) bool {
	switch e.Name() {
	case "bin", filepath.Base(BusDir(parent)), filepath.Base(KeysDir(parent)):
		return true
	}
	if !e.IsDir() {
		return e.Type()&fs.ModeSymlink != 0 // a link is not followed, so nothing to keep
	}
	_, err := os.Lstat(filepath.Join(parent, e.Name(), "store.json"))
	return err == nil
}

// CheckWritable refuses to change a store that this process sees sealed:
// it runs inside an agent's sandbox (or a base's warm build), where the
// store is read-only by design.
func (s *Store) CheckWritable() error {
	if !readOnlyMount(s.Parent) {
		return nil
	}
	if !masked(s.Parent) {
		// Read-only, but not sealed: the filesystem itself is.
		return failure.New(failure.Prereq,
			"point FERRY_HOME (or [store] dir in ferry.toml) at a writable directory, or remount the filesystem read-write",
			"the store %s is on a read-only filesystem: Ferry writes its bases, agents and records there", s.Parent)
	}
	return failure.New(failure.Refused,
		"run Ferry's commands for other agents and bases outside the agent's sandbox (from the shell that started it, not from `ferry shell` or `ferry run`)",
		"the store %s is read-only here: this process runs inside an agent's sandbox, which may not change bases, agents or the store", s.Parent)
}
