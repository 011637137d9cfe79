// Package relocate plans which units of a Cargo target must go before an
// agent builds at host paths with a copy of it (the architecture's
// freshness::plan_relocation), and applies that plan to a fork.
//
// Without the namespace sandbox an agent builds at its own host paths, not
// at the paths the base was built at. Cargo's unit hashes survive the move
// (it hashes path packages relative to the workspace root), but a unit can
// capture the base's absolute paths where Cargo never looks again: a build
// script writing its manifest dir into generated code or a rustc-env
// value, a proc macro reading it from the environment, a test baking in
// env!("CARGO_BIN_EXE_app"). Such a unit would stay fresh while pointing
// at the base. Compute finds those units from what the target records;
// Apply deletes them from a fork, so Cargo rebuilds them (and what depends
// on them) in the agent's first build.
//
// What Compute reads, per unit (Cargo 1.95, both build-dir layouts, found
// by package units' scan, nested workspaces' ferry-ws/ target dirs
// included): its fingerprint files, its rustc dep-info (the inputs and the
// env-dep values: Cargo's own dep-info drops the variables it sets, such
// as CARGO_MANIFEST_DIR and OUT_DIR), and for a build-script run its
// directives and every file it wrote, a megabyte at a time. Not read:
// compiled code (debuginfo and panic locations are cosmetic), cached
// diagnostics, the script's stderr, incremental/ (the first edit pays for
// it) and doc output.
//
// Old paths are found with one needle per root (the store dir as the base
// recorded it, the checkout's git dir): the longest suffix made only of
// bytes no escaping rewrites, so every spelling contains it; what follows
// the needle tells a checkout (always old) from a target dir
// (store.RecordedTarget; <src>/.ferry-target counts as the target). A
// target path may stay when the target is live (Compute's live) and it
// leads into the OUT_DIR of a run the unit depends on; a dead one only in
// a script's own directives other than link arguments (Cargo rewrites the
// exact root-output string) and in a registry crate's compile-time reads
// from its own OUT_DIR. R7, a heuristic: a proc macro whose library names
// a path variable (registry crates on an exact-version allowlist exempt),
// or a local one whose sources use one, the working directory, a
// subprocess or a variable name built at run time, has every unit using
// it removed. A removed compilation loses its fingerprint dir; a run that
// depends on anything removed is removed whole, run dir and OUT_DIR. What
// cannot be read or parsed is removed; a root without a plain 8-byte
// suffix empties the fork. The architecture lists what the plan cannot see.
//
// Callers: Roots.Store spelled as the base's build recorded it, Roots.Src
// the base checkout on disk (local proc macros' sources), and Apply only
// on a fork, never on a ready base's target (invariant 2). Nothing here
// prints.
package relocate

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/units"
)

// Version is the plan format and rule set. A plan saved by another
// version is stale (ErrStale): the caller computes it again.
const Version = 1

// ErrStale is Load's error for a plan written by another version.
var ErrStale = errors.New("relocation plan written by another Ferry version")

// Roots are the base's paths a unit may have recorded: its store dir and
// its checkout's git dir. Store must be the path its target recorded (the
// store dir as the base's build saw it).
type Roots struct {
	Store  string `json:"store"`
	GitDir string `json:"git_dir,omitempty"`
	// Src is the base's checkout as it is on disk now, where the sources
	// of its local proc macros are read (R7). Without it, every local
	// proc macro counts as reading paths, and what uses one is removed.
	Src string `json:"src,omitempty"`
}

// Plan is what a fork of a target removes before an agent builds at host
// paths.
type Plan struct {
	Version int   `json:"version"`
	Roots   Roots `json:"roots"`
	Live    bool  `json:"live"`
	// Own is the live target (relative to the store dir) whose OUT_DIR
	// paths may stay: the target Compute ran on, when live and below the
	// store dir; else empty, and every target path is dead.
	Own string `json:"own,omitempty"`
	// Empty: the fork must be emptied, for EmptyWhy (a root without a
	// plain suffix of 8 bytes: no needle can find its spellings).
	Empty    bool   `json:"empty,omitempty"`
	EmptyWhy string `json:"empty_why,omitempty"`
	// Remove lists what Apply deletes, relative to the target, with
	// forward slashes: the fingerprint dirs of removed compilations,
	// removed build-script runs whole, what could not be read.
	Remove []Removal `json:"remove"`
	// Rebuilds are the fingerprint dirs of the units Cargo rebuilds in
	// the first build after Apply: the removed ones and every unit that
	// depends on one.
	Rebuilds []string `json:"rebuilds"`
	Units    int      `json:"units"` // units planned
	Kept     int      `json:"kept"`  // units the plan keeps whole
	// Nested are the nested workspaces' target dirs (ferry-ws/<path>),
	// planned like the rest and kept.
	Nested []string `json:"nested,omitempty"`
}

// Removal is one path Apply deletes, and why.
type Removal struct {
	Path string `json:"path"`
	Why  string `json:"why"`
}

// Applied is what Apply removed, as base.json and agent.json record it.
type Applied = record.Applied

// Compute plans the relocation of target, built by a base whose paths are
// roots. live: the base's own target paths may stay (a base built without
// the namespace, which gc keeps while an agent references it); false: every
// target path is dead.
//
// It keeps every unit unless something recorded in the target shows an
// old path: one found with a needle of a root, leading into the checkout
// or git dir, or into a target dir (a dead one, or the live target
// outside the OUT_DIRs of the runs the unit depends on). Exempt are a
// build script's own directives other than link arguments (Cargo rewrites
// the exact root-output string in them) and a registry crate's compile-time
// reads from its own OUT_DIR. Whatever uses a proc macro that reads paths
// (R7) is removed too, and so is every build-script run that depends on
// anything removed.
func Compute(target string, roots Roots, live bool) (*Plan, error) {
	p := &Plan{Version: Version, Roots: roots, Live: live, Remove: []Removal{}, Rebuilds: []string{}}
	ns, why := needles(roots)
	if why != "" {
		p.Empty, p.EmptyWhy = true, why
		return p, nil
	}
	l, err := units.List(target)
	if err != nil {
		return nil, failure.Wrap(failure.Internal, err, "rebuild the base (ferry base --rebuild)", "plan the relocation of %s", target)
	}
	c := &computation{target: filepath.Clean(target), roots: roots, live: live, needles: ns, listing: l}
	if live {
		c.own = ownTarget(target, roots.Store)
		p.Own = c.own
	}
	for _, u := range l.Units {
		x := &unitPlan{u: u, ws: l.Workspace(u.Profile)}
		for _, f := range u.Fingerprints {
			x.run = x.run || units.Kind(f.Name) == "run"
			x.doc = x.doc || units.Kind(f.Name) == "doc"
		}
		x.outDir = u.OutDir()
		c.units = append(c.units, x)
	}
	c.read()
	if c.foreign != "" {
		p.Empty = true
		p.EmptyWhy = "the target was not built under the store dir " + roots.Store + ": a build-script run's OUT_DIR is " + c.foreign
		return p, nil
	}
	c.link()
	c.localMacros()
	c.judge()
	c.spread()
	c.plan(p)
	return p, nil
}

// Apply deletes what p lists from fork, a copy of the target p was
// computed on: fingerprint dirs last, so that an Apply cut short leaves no
// unit that looks fresh without its outputs. Nothing is reached through a
// symlink.
func (p *Plan) Apply(fork string) (Applied, error) {
	var a Applied
	hint := "remove the agent (ferry rm --force NAME) and spawn it again"
	if p.Empty {
		ents, err := os.ReadDir(fork)
		if err != nil {
			return a, failure.Wrap(failure.Internal, err, hint, "empty the fork %s", fork)
		}
		for _, e := range ents {
			if err := remove(&a, fork, e.Name()); err != nil {
				return a, failure.Wrap(failure.Internal, err, hint, "empty the fork %s", fork)
			}
		}
		a.Emptied = true
		return a, nil
	}
	order := append([]Removal(nil), p.Remove...)
	sort.SliceStable(order, func(i, j int) bool { return !isFingerprintDir(order[i].Path) && isFingerprintDir(order[j].Path) })
	for _, r := range order {
		if err := remove(&a, fork, r.Path); err != nil {
			return a, failure.Wrap(failure.Internal, err, hint, "relocate the fork %s", fork)
		}
	}
	return a, nil
}

func isFingerprintDir(rel string) bool {
	return strings.Contains("/"+rel, "/.fingerprint/") || filepath.Base(rel) == "fingerprint"
}

// remove deletes rel below root, refusing a path that leaves it or passes
// through a symlink, and counts what it deleted in a.
func remove(a *Applied, root, rel string) error {
	clean := filepath.Clean(filepath.FromSlash(rel))
	if filepath.IsAbs(clean) || clean == "." || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return fmt.Errorf("%s: not a path inside the target", rel)
	}
	dir := root
	parts := strings.Split(clean, string(filepath.Separator))
	for _, part := range parts[:len(parts)-1] {
		dir = filepath.Join(dir, part)
		fi, err := os.Lstat(dir)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s: %s is not a directory", rel, dir)
		}
	}
	full := filepath.Join(root, clean)
	if _, err := os.Lstat(full); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	err := filepath.WalkDir(full, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		a.Files++
		if fi, err := d.Info(); err == nil && d.Type().IsRegular() {
			a.Bytes += fi.Size()
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := os.RemoveAll(full); err != nil {
		return err
	}
	a.Paths++
	return nil
}

// Save writes p to path atomically (a base's relocation.json).
func Save(path string, p *Plan) error {
	if err := atomicfile.WriteJSON(path, p, 0o644); err != nil {
		return failure.Wrap(failure.Internal, err, "", "save the relocation plan")
	}
	return nil
}

// Load reads the plan at path; a plan of another version is ErrStale, and
// the caller computes it again.
func Load(path string) (*Plan, error) {
	var p Plan
	if err := atomicfile.ReadJSON(path, &p); err != nil {
		return nil, fmt.Errorf("load the relocation plan: %w", err)
	}
	if p.Version != Version {
		return nil, fmt.Errorf("%s: version %d, this Ferry writes %d: %w", path, p.Version, Version, ErrStale)
	}
	return &p, nil
}

// Crates names the packages of units (fingerprint dirs, as Rebuilds holds
// them), sorted, each once: what a person reads as "the first build
// rebuilds". A unit's dir is its package's name and a hash.
func Crates(units []string) []string {
	var out []string
	for _, u := range units {
		name := path.Base(filepath.ToSlash(u))
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i]
		}
		out = append(out, strings.ReplaceAll(name, "_", "-"))
	}
	sort.Strings(out)
	return slices.Compact(out)
}
