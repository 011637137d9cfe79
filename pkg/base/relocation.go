package base

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/relocate"
	"github.com/ferrydev/ferry/pkg/store"
)

// A fork that builds at other paths than its base did (an agent without the
// namespace sandbox, or a sandboxed agent of a base built without it, or a
// seeded refresh without it) gets the relocation plan of package relocate:
// the units of the base's target that recorded one of the base's paths are
// removed from the fork, so Cargo rebuilds them at the fork's paths. A base
// built at host paths computes its plan before base.json and stores it as
// relocation.json, its target then being live (immutable, kept by gc while
// an agent references it); a namespace base's target paths (the canonical
// mountpoints, empty on the host) are dead, and its plan is computed at
// each spawn.

// RelocationRoots are the paths base r's target may have recorded: the
// store dir its build saw (the canonical mountpoints and the base's own
// directories are all inside it) and its checkout's git dir; and its
// checkout as it is on disk, where its local proc macros' sources are
// read.
func RelocationRoots(r *Record) (relocate.Roots, error) {
	gitDir, err := worktreeGitDir(r.Src)
	if err != nil {
		return relocate.Roots{}, fmt.Errorf("base %s: %w", r.ID, err)
	}
	// The store dir as spelled, not resolved: the build ran with PWD set
	// to a path below it, and Cargo records paths from PWD (a store
	// reached through a symbolic link is recorded through the link).
	return relocate.Roots{Store: r.Store, GitDir: gitDir, Src: r.Src}, nil
}

// worktreeGitDir reads the git dir a linked worktree's .git file names.
func worktreeGitDir(worktree string) (string, error) {
	f := filepath.Join(worktree, ".git") // git's own layout: not a store path
	b, err := os.ReadFile(f)
	if err != nil {
		return "", fmt.Errorf("read the checkout's git dir: %w", err)
	}
	dir, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: ")
	if !ok {
		return "", fmt.Errorf("%s: not a worktree link", f)
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(worktree, dir)
	}
	return filepath.Clean(dir), nil
}

// Relocation returns the plan a fork of ready base r applies when it
// builds at other paths than r did: r's relocation.json for a base built at
// host paths (computed again, live, when an older Ferry wrote it or it is
// missing; the base stays as it is), else a plan computed on r's target
// with every target path dead.
func Relocation(r *Record) (*relocate.Plan, error) {
	roots, err := RelocationRoots(r)
	if err != nil {
		return nil, err
	}
	if !r.HostPaths() {
		return relocate.Compute(r.Target, roots, false)
	}
	p, err := relocate.Load(store.BaseFiles(r.Dir).Relocation)
	if err == nil {
		return p, nil
	}
	if !errors.Is(err, relocate.ErrStale) && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("base %s: %w", r.ID, err)
	}
	return relocate.Compute(r.Target, roots, true)
}

// planRelocation computes, for base r built at host paths, the plan its
// forks apply and saves it as relocation.json, before base.json.
func planRelocation(r *Record) error {
	roots, err := RelocationRoots(r)
	if err != nil {
		return err
	}
	p, err := relocate.Compute(r.Target, roots, true)
	if err != nil {
		return fmt.Errorf("plan the relocation of the base's target: %w", err)
	}
	return relocate.Save(store.BaseFiles(r.Dir).Relocation, p)
}

// relocateSeed applies a dead plan of seed's target to r's clone of it
// (r builds at host paths), before the warm build: units that recorded the
// seed's paths rebuild, so the new base never depends on the seed, which
// gc may collect.
func relocateSeed(r, seed *Record) (relocate.Applied, error) {
	roots, err := RelocationRoots(seed)
	if err != nil {
		return relocate.Applied{}, err
	}
	p, err := relocate.Compute(r.Target, roots, false)
	if err != nil {
		return relocate.Applied{}, fmt.Errorf("plan the relocation of the seed's target: %w", err)
	}
	a, err := p.Apply(r.Target)
	if err != nil {
		return a, fmt.Errorf("relocate the seed's target: %w", err)
	}
	return a, nil
}
