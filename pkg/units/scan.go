package units

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// What a target dir holds, from Cargo's own description of it
// (src/cargo/core/compiler/layout.rs, build_runner/compilation_files.rs
// and fingerprint/mod.rs, Cargo 1.95 to 1.99). Every build goes to a
// profile dir, <target>/[<triple>/]<profile>/, holding a .cargo-lock. A
// unit is one compilation (or build-script run) with a hash, its metadata
// hash (16 hex digits); a few units share one hash and directory (rustdoc
// units, and a path package's dylib or cdylib, use a hash of the package
// id alone). Two layouts:
//
// Legacy (every stable Cargo so far):
//
//	.fingerprint/<pkg>-<hash>/    the fingerprints: <name>, <name>.json,
//	                              dep-<name>, output-<name>, invoked.timestamp
//	build/<pkg>-<hash>/           a build script, compiled; or its run: out/, output, …
//	deps/<crate>-<hash>…          rustc's outputs, named with the hash
//	deps/artifact/<pkg>-<hash>/   artifact dependencies
//	examples/<crate>-<hash>…      examples, named with the hash
//	incremental/                  rustc's incremental state (not by unit)
//	<uplifted files>              bins, root libs, proc macros and dylibs,
//	examples/<uplifted files>     hard links to outputs, without the hash
//
// Build units (-Zbuild-dir-new-layout):
//
//	build/<pkg>/<hash>/           everything of one unit:
//	    fingerprint/ out/ run/    its fingerprints, outputs, and a build script's run
//	incremental/  examples/  <uplifted files>
//
// <name> is <flavor><kind>-<target name>: flavor test- (test units), doc-
// (rustdoc) or run- (a build script's run); kind lib, bin, example,
// integration-test, bench or build-script.
//
// The scan is strict where units could hide: a profile dir's entry neither
// layout has, a .fingerprint/ entry or build/ entry that is no unit, or
// fingerprints in a directory without a .cargo-lock (Cargo makes none on
// NFS) make the observation incomplete (UnknownLayout). It never follows a
// symlink: a link where a layout has a directory is unknown too.

// Layout is one of Cargo's build-dir layouts.
type Layout int

const (
	// Legacy is every stable Cargo's layout: .fingerprint/, build/, deps/.
	Legacy Layout = iota + 1
	// BuildUnits is the layout behind -Zbuild-dir-new-layout: build/<pkg>/<hash>/.
	BuildUnits
)

func (l Layout) String() string {
	switch l {
	case Legacy:
		return "legacy"
	case BuildUnits:
		return "build-units"
	}
	return "unknown"
}

// Unit is one fingerprint dir of a profile dir, and what belongs to it.
// Paths are relative to the target, with forward slashes.
type Unit struct {
	Profile string // the profile dir
	Layout  Layout
	Package string
	Hash    string
	Dir     string // the fingerprint dir
	// Fingerprints are the fingerprints in Dir: one, except where units
	// share a hash (see above).
	Fingerprints []*Fingerprint
	// Paths are everything that belongs to the unit: Dir, its build dir,
	// its outputs named with its hash (BuildUnits: its one directory).
	Paths []string
	// Written: Cargo wrote in Dir after the threshold.
	Written bool
	// Named: a message of the warm build names the unit.
	Named bool
	// Used is the verdict: the warm build compiled it or found it fresh.
	Used bool
	// Why says how the verdict was reached.
	Why string

	outputs []string // files whose inodes identify it (uplifted files' sources), lazily
	listed  bool
}

// Fingerprint is one of a unit's fingerprints (for one target), named as
// Cargo names it after the target.
type Fingerprint struct {
	Name    string
	Files   []string  // its files in the unit's fingerprint dir
	Hash    bool      // its hash file (Name) is there and not empty
	ModTime time.Time // of its hash file
	Written bool      // one of its files was written after the threshold
	Named   bool      // a message names it
	Match   Match     // how messages named it
	Dropped bool      // unused in a used unit: Prune removes its files
}

// profile is one profile dir being scanned.
type profile struct {
	rel       string
	layout    map[Layout]bool
	units     []*Unit
	byHash    map[string][]*Unit
	legacy    map[string]*Unit // by "<pkg>-<hash>"
	buildUnit map[string]*Unit // by "<pkg>/<hash>"
}

// scan is the walk of one target dir.
type scan struct {
	root      string
	threshold time.Time
	profiles  map[string]*profile
	units     []*Unit
	orphans   []string
	nested    bool
	reasons   []Reason
	// withNested: walk nested workspaces' target dirs too (List),
	// recording their roots in nestedRoots.
	withNested  bool
	nestedRoots []string
}

func (s *scan) abs(rel string) string { return filepath.Join(s.root, filepath.FromSlash(rel)) }

func (s *scan) incomplete(c Cause, rel, detail string) {
	s.reasons = append(s.reasons, Reason{Cause: c, Path: rel, Detail: detail})
}

// readDir lists rel, or records it as unreadable and returns false.
func (s *scan) readDir(rel string) ([]fs.DirEntry, bool) {
	ents, err := os.ReadDir(s.abs(rel))
	if err != nil {
		s.incomplete(Unreadable, rel, err.Error())
		return nil, false
	}
	return ents, true
}

// walk finds the profile dirs under rel ("" for the target itself), never
// following a symlink, and scans each. Nested workspaces' target dirs are
// not observed.
func (s *scan) walk(rel string) {
	ents, ok := s.readDir(rel)
	if !ok {
		return
	}
	if strings.HasPrefix(rel, nestedDir+"/") {
		for _, e := range ents {
			if e.Name() == "CACHEDIR.TAG" && e.Type().IsRegular() {
				// Cargo marks every target dir it creates.
				s.nestedRoots = append(s.nestedRoots, rel)
			}
		}
	}
	for _, e := range ents {
		if (e.Name() == ".cargo-lock" || e.Name() == ".cargo-build-lock") && e.Type().IsRegular() {
			s.scanProfile(rel, ents)
			return
		}
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		child := path.Join(rel, e.Name())
		if child == nestedDir {
			s.nested = true
			if s.withNested {
				s.walk(child)
			}
			continue
		}
		// Fingerprints outside a profile dir (Cargo makes no .cargo-lock
		// on NFS) would be units nobody observes.
		if e.Name() == ".fingerprint" || (e.Name() == "fingerprint" && isHash(path.Base(rel))) {
			s.incomplete(UnknownLayout, child, "fingerprints in a directory without a .cargo-lock")
			continue
		}
		s.walk(child)
	}
}

// nestedDir holds the target dirs of workspaces nested in the checkout
// (store.NestedTarget).
const nestedDir = "ferry-ws"

// scanProfile lists the units of the profile dir rel, whose entries are ents.
func (s *scan) scanProfile(rel string, ents []fs.DirEntry) {
	p := &profile{rel: rel, layout: map[Layout]bool{}, byHash: map[string][]*Unit{}, legacy: map[string]*Unit{}, buildUnit: map[string]*Unit{}}
	s.profiles[rel] = p
	dirs := map[string]bool{}
	for _, e := range ents {
		name := e.Name()
		switch {
		case name == ".cargo-lock" || name == ".cargo-build-lock" || name == ".cargo-artifact-lock":
		case name == "incremental" && e.IsDir():
		case (name == ".fingerprint" || name == "build" || name == "deps" || name == "examples") && e.IsDir():
			dirs[name] = true
		case e.Type().IsRegular() || e.Type()&fs.ModeSymlink != 0:
			// Uplifted files (bins, root libs, their .d files) stay.
		case e.IsDir() && strings.HasSuffix(name, ".dSYM"):
			// An uplifted binary's debug info (macOS).
		default:
			s.incomplete(UnknownLayout, path.Join(rel, name), "a profile dir holds it, and neither Cargo layout has it")
		}
	}
	if dirs[".fingerprint"] {
		s.scanFingerprints(p)
	}
	if dirs["build"] {
		s.scanBuild(p)
	}
	if dirs["deps"] {
		s.scanOutputs(p, "deps")
	}
	if dirs["examples"] {
		s.scanOutputs(p, "examples")
	}
}

// scanFingerprints lists the legacy units of p.
func (s *scan) scanFingerprints(p *profile) {
	dir := path.Join(p.rel, ".fingerprint")
	ents, ok := s.readDir(dir)
	if !ok {
		return
	}
	for _, e := range ents {
		pkg, hash, ok := legacyName(e.Name())
		if !ok || !e.IsDir() {
			s.incomplete(UnknownLayout, path.Join(dir, e.Name()), "not a fingerprint dir <package>-<hash>")
			continue
		}
		u := &Unit{Profile: p.rel, Layout: Legacy, Package: pkg, Hash: hash, Dir: path.Join(dir, e.Name())}
		u.Paths = []string{u.Dir}
		p.layout[Legacy] = true
		p.legacy[e.Name()] = u
		s.add(p, u)
	}
}

// scanBuild sorts the entries of p's build/: legacy build dirs of units
// (or without one: orphans), and build-units package dirs.
func (s *scan) scanBuild(p *profile) {
	dir := path.Join(p.rel, "build")
	ents, ok := s.readDir(dir)
	if !ok {
		return
	}
	for _, e := range ents {
		rel := path.Join(dir, e.Name())
		if !e.IsDir() {
			s.incomplete(UnknownLayout, rel, "a file in build/, where both Cargo layouts keep directories")
			continue
		}
		if u := p.legacy[e.Name()]; u != nil {
			u.Paths = append(u.Paths, rel)
			continue
		}
		_, _, legacy := legacyName(e.Name())
		sub, ok := s.readDir(rel)
		if !ok {
			continue
		}
		if len(sub) > 0 && allHashDirs(sub) {
			s.scanPackage(p, e.Name(), sub)
			continue
		}
		switch {
		case legacy:
			s.orphans = append(s.orphans, rel) // a build dir whose fingerprint is gone
		case len(sub) == 0:
			// An empty package dir of the build-units layout: nothing to keep or remove.
		default:
			s.incomplete(UnknownLayout, rel, "neither a legacy build dir <package>-<hash> nor a package dir of build units")
		}
	}
}

// scanPackage lists the build units of package pkg in p (build/<pkg>/<hash>/).
func (s *scan) scanPackage(p *profile, pkg string, ents []fs.DirEntry) {
	for _, e := range ents {
		rel := path.Join(p.rel, "build", pkg, e.Name())
		fi, err := os.Lstat(s.abs(path.Join(rel, "fingerprint")))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.incomplete(Unreadable, rel, err.Error())
			continue
		}
		if err != nil || !fi.IsDir() {
			s.orphans = append(s.orphans, rel) // outputs without a fingerprint
			continue
		}
		u := &Unit{Profile: p.rel, Layout: BuildUnits, Package: pkg, Hash: e.Name(), Dir: path.Join(rel, "fingerprint"), Paths: []string{rel}}
		p.layout[BuildUnits] = true
		p.buildUnit[pkg+"/"+e.Name()] = u
		s.add(p, u)
	}
}

// scanOutputs gives each unit of p its outputs named with its hash in
// deps/ or examples/ (and deps/artifact/<pkg>-<hash>/); those of no unit
// are orphans. Files without a hash are uplifted (or a path package's
// dylib) and stay.
func (s *scan) scanOutputs(p *profile, name string) {
	dir := path.Join(p.rel, name)
	ents, ok := s.readDir(dir)
	if !ok {
		return
	}
	for _, e := range ents {
		rel := path.Join(dir, e.Name())
		if e.IsDir() {
			if name == "deps" && e.Name() == "artifact" {
				s.scanArtifacts(p, rel)
			}
			continue // rustc's scratch dirs, macOS .dSYM: not units'
		}
		h := fileHash(e.Name())
		if h == "" {
			continue
		}
		owners := p.byHash[h]
		if len(owners) == 0 {
			s.orphans = append(s.orphans, rel)
			continue
		}
		for _, u := range owners {
			u.Paths = append(u.Paths, rel)
		}
	}
}

func (s *scan) scanArtifacts(p *profile, dir string) {
	ents, ok := s.readDir(dir)
	if !ok {
		return
	}
	for _, e := range ents {
		rel := path.Join(dir, e.Name())
		if u := p.legacy[e.Name()]; u != nil {
			u.Paths = append(u.Paths, rel)
		} else if _, _, ok := legacyName(e.Name()); ok {
			s.orphans = append(s.orphans, rel)
		}
	}
}

// add reads u's fingerprints and records it.
func (s *scan) add(p *profile, u *Unit) {
	s.readFingerprints(u)
	p.units = append(p.units, u)
	p.byHash[u.Hash] = append(p.byHash[u.Hash], u)
	s.units = append(s.units, u)
}

// readFingerprints reads the fingerprint dir of u: its fingerprints, and
// whether anything in it was written after the threshold.
func (s *scan) readFingerprints(u *Unit) {
	dir := s.abs(u.Dir)
	fi, err := os.Lstat(dir)
	if err != nil {
		s.incomplete(Unreadable, u.Dir, err.Error())
		return
	}
	u.Written = s.written(fi.ModTime())
	ents, ok := s.readDir(u.Dir)
	if !ok {
		return
	}
	byName := map[string]*Fingerprint{}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			s.incomplete(Unreadable, path.Join(u.Dir, e.Name()), err.Error())
			continue
		}
		w := s.written(info.ModTime())
		u.Written = u.Written || w
		name := e.Name()
		if name == "invoked.timestamp" {
			continue // the unit's, not one fingerprint's
		}
		fpName := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(name, "dep-"), "output-"), ".json")
		f := byName[fpName]
		if f == nil {
			f = &Fingerprint{Name: fpName}
			byName[fpName] = f
			u.Fingerprints = append(u.Fingerprints, f)
		}
		f.Files = append(f.Files, name)
		f.Written = f.Written || w
		if name == fpName {
			f.Hash = info.Size() > 0
			f.ModTime = info.ModTime()
		}
	}
}

func (s *scan) written(t time.Time) bool { return !t.Before(s.threshold) }

// fingerprint returns u's fingerprint name, or nil.
func (u *Unit) fingerprint(name string) *Fingerprint {
	for _, f := range u.Fingerprints {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// outputFiles returns the files that may hold u's uplifted outputs under
// another name: its hash-named outputs and its build dir's files (legacy),
// or the files of its out/ (build units).
func (s *scan) outputFiles(u *Unit) []string {
	if u.listed {
		return u.outputs
	}
	u.listed = true
	var dirs []string
	switch u.Layout {
	case Legacy:
		for _, p := range u.Paths[1:] {
			if strings.HasPrefix(p, path.Join(u.Profile, "build")+"/") {
				dirs = append(dirs, p)
			} else {
				u.outputs = append(u.outputs, p)
			}
		}
	case BuildUnits:
		dirs = append(dirs, path.Join(u.Paths[0], "out"))
	}
	for _, d := range dirs {
		ents, err := os.ReadDir(s.abs(d))
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.Type().IsRegular() {
				u.outputs = append(u.outputs, path.Join(d, e.Name()))
			}
		}
	}
	return u.outputs
}

// statFile returns the identity of the file at rel.
func (s *scan) statFile(rel string) (syscall.Stat_t, bool) {
	var st syscall.Stat_t
	err := syscall.Lstat(s.abs(rel), &st)
	return st, err == nil
}

// legacyName splits a legacy unit dir's name, <package>-<hash>.
func legacyName(name string) (pkg, hash string, ok bool) {
	i := len(name) - hashLen - 1
	if i < 1 || name[i] != '-' || !isHash(name[i+1:]) {
		return "", "", false
	}
	return name[:i], name[i+1:], true
}

// hashLen is the length of Cargo's metadata hashes in names: 16 hex digits.
const hashLen = 16

func isHash(s string) bool {
	if len(s) != hashLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// fileHash returns the hash in an output's name, <crate>-<hash>[.<ext>…]
// (crate names have no '-', so the hash is after the last one that is
// followed by one), or "".
func fileHash(name string) string {
	for i := len(name) - hashLen - 1; i >= 0; i-- {
		if name[i] != '-' {
			continue
		}
		h := name[i+1 : i+1+hashLen]
		if isHash(h) && (i+1+hashLen == len(name) || name[i+1+hashLen] == '.') {
			return h
		}
	}
	return ""
}

func allHashDirs(ents []fs.DirEntry) bool {
	for _, e := range ents {
		if !e.IsDir() || !isHash(e.Name()) {
			return false
		}
	}
	return true
}
