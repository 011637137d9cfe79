package units

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Listing is every unit of a target, with no warm build to judge them by
// (List). Unlike Analyze, it includes nested workspaces' target dirs.
type Listing struct {
	Target string
	Units  []*Unit
	// Nested are the nested workspaces' target dirs found (relative to
	// the target: ferry-ws/<path>), each the root of its units' Profile.
	Nested []string
	// Orphans are outputs named with a hash whose fingerprint is gone.
	Orphans []string
	// Problems are what the scan could not read or place: unreadable
	// directories and files, and entries neither Cargo layout has.
	Problems []Reason
}

// List scans every unit of target, including those of the nested
// workspaces' target dirs under ferry-ws/, without following a symlink.
// The error is for a target that cannot be scanned at all; what could not
// be read is in Listing.Problems.
func List(target string) (*Listing, error) {
	fi, err := os.Lstat(target)
	if err != nil {
		return nil, fmt.Errorf("list units: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("list units: %s is not a directory", target)
	}
	s := &scan{root: filepath.Clean(target), threshold: time.Now(), profiles: map[string]*profile{}, withNested: true}
	s.walk("")
	sort.Strings(s.orphans)
	sort.Strings(s.nestedRoots)
	return &Listing{Target: s.root, Units: s.units, Nested: s.nestedRoots, Orphans: s.orphans, Problems: s.reasons}, nil
}

// Workspace returns the nested workspace's target dir (ferry-ws/<path>)
// that holds the profile dir profile, or "" for the target's own: the
// deepest marked with Cargo's CACHEDIR.TAG, else the profile's parent.
func (l *Listing) Workspace(profile string) string {
	if !strings.HasPrefix(profile, nestedDir+"/") {
		return ""
	}
	best := ""
	for _, n := range l.Nested {
		if strings.HasPrefix(profile, n+"/") && len(n) > len(best) {
			best = n
		}
	}
	if best == "" {
		best = path.Dir(profile)
	}
	return best
}

// Kind returns what the fingerprint named name is of: a build script's
// run ("run-…"), rustdoc ("doc-…"), or a compilation.
func Kind(name string) string {
	switch {
	case strings.HasPrefix(name, "run-"):
		return "run"
	case strings.HasPrefix(name, "doc-"):
		return "doc"
	}
	return "compile"
}

// RunDir returns the directory of u's build-script run (its output,
// root-output and out/, relative to the target), or "" when u is no run.
func (u *Unit) RunDir() string {
	run := false
	for _, f := range u.Fingerprints {
		run = run || Kind(f.Name) == "run"
	}
	if !run {
		return ""
	}
	switch u.Layout {
	case Legacy:
		for _, p := range u.Paths[1:] {
			if path.Dir(p) == path.Join(u.Profile, "build") {
				return p
			}
		}
	case BuildUnits:
		return path.Join(u.Paths[0], "run")
	}
	return ""
}

// OutDir returns u's OUT_DIR (relative to the target) when u is a
// build-script run, else "".
func (u *Unit) OutDir() string {
	switch {
	case u.RunDir() == "":
		return ""
	case u.Layout == BuildUnits:
		return path.Join(u.Paths[0], "out")
	}
	return path.Join(u.RunDir(), "out")
}
