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

// Cause is why an observation is incomplete.
type Cause int

const (
	// Unobservable: a call asked for human or short messages, or was a
	// subcommand the shim does not know.
	Unobservable Cause = iota + 1
	// Unfinished: a call did not finish (it was killed, or its record
	// could not be written to the end).
	Unfinished
	// Damaged: a record cannot be read.
	Damaged
	// NoCalls: no cargo call was recorded at all (was FERRY_WARM_UNITS
	// passed to the warm commands?).
	NoCalls
	// NoUnit: a message matches no unit.
	NoUnit
	// SeveralUnits: a message matches more than one unit.
	SeveralUnits
	// Predates: a message reports a unit rebuilt whose fingerprint
	// predates the threshold.
	Predates
	// Bypassed: a unit was written but no message reported it, though
	// every call succeeded: a cargo call that bypassed the shim.
	Bypassed
	// Unreadable: a directory or file of the target cannot be read.
	Unreadable
	// UnknownLayout: a profile dir holds what neither of Cargo's
	// layouts has.
	UnknownLayout
)

var causeNames = map[Cause]string{
	Unobservable: "unobservable call", Unfinished: "call did not finish", Damaged: "damaged record",
	NoCalls: "no call recorded", NoUnit: "message matches no unit", SeveralUnits: "message matches several units",
	Predates: "rebuilt unit's fingerprint predates the threshold", Bypassed: "written unit reported by no message",
	Unreadable: "unreadable", UnknownLayout: "unknown layout",
}

func (c Cause) String() string {
	if n, ok := causeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("cause %d", int(c))
}

// Reason is one reason an observation is incomplete.
type Reason struct {
	Cause  Cause
	Path   string // what it is about: a path in the target, or a record file
	Detail string
}

func (r Reason) String() string {
	s := r.Cause.String()
	if r.Path != "" {
		s += ": " + r.Path
	}
	if r.Detail != "" {
		s += ": " + r.Detail
	}
	return s
}

// Observation is what Analyze found in a target: every unit, used or not,
// and whether the observation can be trusted.
type Observation struct {
	Target    string
	Threshold time.Time
	Calls     int // recorded calls
	Failed    int // calls that finished with a failure
	Units     []*Unit
	// Orphans are outputs named with a hash whose fingerprint is gone
	// (relative to the target): Prune removes them.
	Orphans []string
	// Incomplete lists why the observation cannot be trusted. Prune
	// refuses unless it is empty.
	Incomplete []Reason
	// Nested reports that the target holds nested workspaces' target
	// dirs (ferry-ws/), which are not observed: see the package doc.
	Nested bool
}

// Complete reports whether the observation can be trusted.
func (o *Observation) Complete() bool { return len(o.Incomplete) == 0 }

// Used returns the units the warm build used.
func (o *Observation) Used() []*Unit { return o.filter(true) }

// Unused returns the units Prune removes.
func (o *Observation) Unused() []*Unit { return o.filter(false) }

func (o *Observation) filter(used bool) []*Unit {
	var out []*Unit
	for _, u := range o.Units {
		if u.Used == used {
			out = append(out, u)
		}
	}
	return out
}

// Observe is Analyze on a base's target with the threshold and records
// kept in its warm-units directory.
func Observe(target, warmUnits string) (*Observation, error) {
	return observe(target, warmUnits, cargoLinksUplifts)
}

// observe is Observe, told whether Cargo hard-links uplifted files.
func observe(target, warmUnits string, linked bool) (*Observation, error) {
	t, err := Threshold(warmUnits)
	if err != nil {
		return nil, err
	}
	recs, err := ReadRecords(warmUnits)
	if err != nil {
		return nil, err
	}
	return analyze(target, t, recs, linked)
}

// Analyze works out which units in target the warm build recorded in recs
// used, given the write threshold (TakeThreshold). The error is for a
// target that cannot be analysed at all; what makes the observation
// untrustworthy is in Observation.Incomplete.
func Analyze(target string, threshold time.Time, recs []*Record) (*Observation, error) {
	return analyze(target, threshold, recs, cargoLinksUplifts)
}

// analyze is Analyze, told whether Cargo hard-links uplifted files (linked)
// or copies them.
func analyze(target string, threshold time.Time, recs []*Record, linked bool) (*Observation, error) {
	fi, err := os.Lstat(target)
	if err != nil {
		return nil, fmt.Errorf("observe units: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("observe units: %s is not a directory", target)
	}
	s := &scan{root: filepath.Clean(target), threshold: threshold, profiles: map[string]*profile{}}
	s.walk("")
	a := &analysis{scan: s, linked: linked}
	failed, succeeded := 0, 0
	for _, r := range recs {
		if r.Finished && r.Exit.Code == 0 && r.Damaged == "" && r.Unobservable == "" {
			succeeded++
		}
		switch {
		case r.Damaged != "":
			s.incomplete(Damaged, r.File, r.Damaged)
			continue
		case r.Unobservable != "":
			s.incomplete(Unobservable, r.File, fmt.Sprintf("cargo %s: %s", strings.Join(r.Args, " "), r.Unobservable))
			continue
		case !r.Finished:
			s.incomplete(Unfinished, r.File, "cargo "+strings.Join(r.Args, " "))
		case r.Failed():
			failed++
		}
		for i := range r.Messages {
			a.match(r, &r.Messages[i])
		}
	}
	if len(recs) == 0 {
		s.incomplete(NoCalls, "", "")
	}
	// A call killed or failed may have left units it did not build.
	a.decide(succeeded < len(recs))
	sort.Strings(s.orphans)
	return &Observation{
		Target: s.root, Threshold: threshold, Calls: len(recs), Failed: failed,
		Units: s.units, Orphans: s.orphans, Incomplete: s.reasons, Nested: s.nested,
	}, nil
}

type analysis struct {
	*scan
	// linked says Cargo hard-links uplifted files to their unit's output
	// (cargoLinksUplifts): only then can an inode tell units apart.
	linked bool
}

// Match says how messages named a fingerprint: a set of these rules.
type Match uint8

const (
	// ByDir: a file in the unit's own directory (a build dir, an OUT_DIR,
	// a build unit's directory).
	ByDir Match = 1 << iota
	// ByHash: a file named with the unit's hash.
	ByHash
	// ByName: the only unit of the package holding the fingerprint Cargo
	// names after the target (uplifted files, rustdoc's output).
	ByName
	// ByRebuild: among several such units, the only one rebuilt, for a
	// message that reports a rebuild.
	ByRebuild
	// ByInode: among several, the one an uplifted file is a hard link of.
	ByInode
	// BySizeMtime: among several, the one with an output of the uplifted
	// file's length and mtime (where Cargo copies rather than links).
	BySizeMtime
)

func (m Match) String() string {
	var out []string
	for i, n := range []string{"own dir", "hash", "fingerprint name", "rebuild", "inode", "length and mtime"} {
		if m&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return strings.Join(out, ", ")
}

// resolved is where one path a message names leads.
type resolved int

const (
	outside  resolved = iota // not in the observed target (another target, a nested workspace's)
	none                     // in a profile dir, but no unit's
	ownDir                   // in a unit's own directory
	hashed                   // named with a unit's hash
	several                  // named with a hash that several units carry
	uplifted                 // a file without a hash in a profile dir (or its examples/)
	doc                      // rustdoc's output, in <root>/doc/
)

// resolve finds the units path (as recorded by call r) belongs to.
func (a *analysis) resolve(r *Record, p string) (kind resolved, units []*Unit, prof *profile, docRoot string) {
	rel, ok := within(filepath.Clean(r.Target), filepath.Clean(p))
	if !ok || rel == nestedDir || strings.HasPrefix(rel, nestedDir+"/") {
		return outside, nil, nil, ""
	}
	comps := strings.Split(rel, "/")
	for i := 0; i <= len(comps); i++ {
		if prof = a.profiles[path.Join(comps[:i]...)]; prof != nil {
			comps = comps[i:]
			break
		}
	}
	if prof == nil {
		for i, c := range comps[:len(comps)-1] {
			if c == "doc" && i <= 1 {
				return doc, nil, nil, path.Join(comps[:i]...)
			}
		}
		return none, nil, nil, ""
	}
	one := func(u *Unit) (resolved, []*Unit, *profile, string) {
		if u == nil {
			return none, nil, prof, ""
		}
		return ownDir, []*Unit{u}, prof, ""
	}
	n := len(comps)
	switch {
	case n >= 2 && comps[0] == ".fingerprint":
		return one(prof.legacy[comps[1]])
	case n >= 2 && comps[0] == "build":
		if u := prof.legacy[comps[1]]; u != nil {
			return one(u)
		}
		if n >= 3 {
			return one(prof.buildUnit[comps[1]+"/"+comps[2]])
		}
	case n >= 3 && comps[0] == "deps" && comps[1] == "artifact":
		return one(prof.legacy[comps[2]])
	case n == 2 && (comps[0] == "deps" || comps[0] == "examples"):
		if h := fileHash(comps[1]); h != "" {
			switch us := prof.byHash[h]; len(us) {
			case 0:
				return none, nil, prof, ""
			case 1:
				return hashed, us, prof, ""
			default:
				return several, us, prof, ""
			}
		}
		return uplifted, nil, prof, ""
	case n == 1:
		return uplifted, nil, prof, ""
	}
	return none, nil, prof, ""
}

// match finds the unit message m of call r reports and marks it named.
func (a *analysis) match(r *Record, m *Message) {
	switch m.m.Reason {
	case ReasonBuildScript:
		a.matchRun(r, m)
	case ReasonArtifact:
		a.matchArtifact(r, m)
	}
}

// matchRun matches a build-script-executed message by its OUT_DIR, inside
// the directory of the build script's run.
func (a *analysis) matchRun(r *Record, m *Message) {
	what := fmt.Sprintf("build script run of %s (out_dir %s)", m.m.PackageID, m.m.OutDir)
	kind, us, _, _ := a.resolve(r, m.m.OutDir)
	switch kind {
	case outside:
		return
	case ownDir:
	default:
		a.incomplete(NoUnit, r.File, what)
		return
	}
	u := us[0]
	var run *Fingerprint
	for _, f := range u.Fingerprints {
		if strings.HasPrefix(f.Name, "run-build-script-") {
			run = f
		}
	}
	if run == nil {
		a.incomplete(NoUnit, r.File, what+": unit "+u.Dir+" holds no build script run's fingerprint")
		return
	}
	a.mark(u, run, r, ByDir)
}

// matchArtifact matches a compiler-artifact message: by a file in a
// unit's own directory or named with its hash; failing that (uplifted
// files and rustdoc's output carry no hash), as the one unit of the
// package holding the fingerprint Cargo names after the target, and
// among several, the one rebuilt (when the message says so), or the one
// whose outputs include the recorded inode, or failing that the recorded
// length and mtime.
func (a *analysis) matchArtifact(r *Record, m *Message) {
	pkg := PackageName(m.m.PackageID)
	what := fmt.Sprintf("%s target %q of %s", strings.Join(m.m.Target.Kind, ","), m.m.Target.Name, m.m.PackageID)
	stats := map[string]FileStat{}
	for _, f := range m.Files {
		stats[f.Path] = f
	}
	found := map[*Unit]Match{}
	var (
		upl      []FileStat
		profs    = map[*profile]bool{}
		isDoc    bool
		docRoots = map[string]bool{}
		paths    = m.m.paths()
		ours     = len(paths) == 0 // no file at all: look everywhere
	)
	for _, p := range paths {
		kind, us, prof, root := a.resolve(r, p)
		switch kind {
		case outside:
			continue
		case none:
			a.incomplete(NoUnit, r.File, what+": no unit holds "+p)
			return
		case several:
			a.incomplete(SeveralUnits, r.File, what+": several units carry the hash of "+p)
			return
		case ownDir:
			found[us[0]] |= ByDir
		case hashed:
			found[us[0]] |= ByHash
		case uplifted:
			profs[prof] = true
			st, ok := stats[p]
			if !ok {
				st = FileStat{Path: p, Err: "not recorded"}
			}
			upl = append(upl, st)
		case doc:
			isDoc = true
			docRoots[root] = true
		}
		ours = true
	}
	if !ours {
		return // a build in another target dir
	}
	name := fingerprintName(&m.m, isDoc)
	var u *Unit
	var how Match
	switch len(found) {
	case 1:
		for f, h := range found {
			u, how = f, h
		}
	case 0:
		var cands []*Unit
		for _, p := range a.candidateProfiles(profs, docRoots, len(paths) == 0) {
			for _, c := range p.units {
				if c.Package == pkg && c.fingerprint(name) != nil {
					cands = append(cands, c)
				}
			}
		}
		var why string
		u, how, why = a.pick(cands, name, m.m.Fresh, upl)
		if u == nil {
			if len(cands) == 0 {
				a.incomplete(NoUnit, r.File, what+": no unit of package "+pkg+" holds fingerprint "+name)
			} else {
				a.incomplete(SeveralUnits, r.File, fmt.Sprintf("%s: %d units of package %s hold fingerprint %s, %s", what, len(cands), pkg, name, why))
			}
			return
		}
	default:
		a.incomplete(SeveralUnits, r.File, fmt.Sprintf("%s: its files are in %d units", what, len(found)))
		return
	}
	f := u.fingerprint(name)
	if f == nil {
		a.incomplete(NoUnit, r.File, what+": unit "+u.Dir+" holds no fingerprint "+name)
		return
	}
	if !m.m.Fresh && (!f.Hash || f.ModTime.Before(a.threshold)) {
		a.incomplete(Predates, u.Dir, fmt.Sprintf("%s was rebuilt (%s), but fingerprint %s is older than the threshold or empty", what, r.File, name))
	}
	a.mark(u, f, r, how)
}

// candidateProfiles are the profile dirs where a unit whose files carry
// no hash can be: those of its uplifted files, those beside the doc/ dirs
// of its rustdoc output, or, naming no file, all.
func (a *analysis) candidateProfiles(profs map[*profile]bool, docRoots map[string]bool, all bool) []*profile {
	var out []*profile
	for _, p := range a.sortedProfiles() {
		parent := path.Dir(p.rel)
		if parent == "." {
			parent = ""
		}
		if all || profs[p] || docRoots[parent] {
			out = append(out, p)
		}
	}
	return out
}

func (a *analysis) sortedProfiles() []*profile {
	keys := make([]string, 0, len(a.profiles))
	for k := range a.profiles {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]*profile, len(keys))
	for i, k := range keys {
		out[i] = a.profiles[k]
	}
	return out
}

// pick chooses among the candidates for a message without a hash; it
// returns nil and why when it cannot.
func (a *analysis) pick(cands []*Unit, name string, fresh bool, upl []FileStat) (*Unit, Match, string) {
	if len(cands) == 1 {
		return cands[0], ByName, ""
	}
	if len(cands) == 0 {
		return nil, 0, "none"
	}
	if !fresh {
		// Rebuilt: its fingerprint was written after the threshold.
		var w []*Unit
		for _, c := range cands {
			if c.fingerprint(name).Written {
				w = append(w, c)
			}
		}
		if len(w) == 1 {
			return w[0], ByRebuild, ""
		}
	}
	same := func(match func(FileStat, *Unit) bool) *Unit {
		var hit *Unit
		for _, c := range cands {
			for _, st := range upl {
				if st.Err == "" && match(st, c) {
					if hit != nil && hit != c {
						return nil
					}
					hit = c
				}
			}
		}
		return hit
	}
	// Linux: Cargo hard-links an uplifted file to the unit's output.
	if a.linked {
		if u := same(func(st FileStat, c *Unit) bool {
			for _, o := range a.outputFiles(c) {
				if fi, ok := a.statFile(o); ok && uint64(fi.Dev) == st.Dev && fi.Ino == st.Ino {
					return true
				}
			}
			return false
		}); u != nil {
			return u, ByInode, ""
		}
	}
	// Where it copies instead (macOS), length and mtime tell them apart:
	// the copy keeps both.
	if u := same(func(st FileStat, c *Unit) bool {
		for _, o := range a.outputFiles(c) {
			if fi, ok := a.statFile(o); ok && fi.Size == st.Size && fi.Mtim.Nano() == st.MtimeNs {
				return true
			}
		}
		return false
	}); u != nil {
		return u, BySizeMtime, ""
	}
	return nil, 0, "and neither the inode nor the length and mtime of its files tell which"
}

// mark records that a message of call r names fingerprint f of unit u,
// matched how.
func (a *analysis) mark(u *Unit, f *Fingerprint, r *Record, how Match) {
	f.Named = true
	f.Match |= how
	if !u.Named {
		u.Named = true
		u.Why = fmt.Sprintf("reported by %s (%s)", filepath.Base(r.File), how)
	}
}

// decide gives every unit its verdict. A unit a message names is used
// (and in a directory several units share, only the fingerprints named or
// written count). A unit written but named by no message was built by a
// call that bypassed the shim, unless a call did not succeed: Cargo then
// leaves the fingerprint dir of each unit it did not build (empty, or with
// an emptied hash) and reports nothing, and such a unit counts as unused.
func (a *analysis) decide(someFailed bool) {
	for _, u := range a.units {
		switch {
		case u.Named:
			u.Used = true
			if len(u.Fingerprints) < 2 {
				break
			}
			for _, f := range u.Fingerprints {
				if f.Named {
					continue
				}
				if f.Written && !someFailed {
					a.incomplete(Bypassed, u.Dir, "fingerprint "+f.Name+" was written, and no message reported it")
				}
				f.Dropped = true
			}
		case u.Written && !someFailed:
			a.incomplete(Bypassed, u.Dir, "written after the threshold, and no message reported it")
			u.Why = "written, reported by no message"
		case u.Written:
			u.Why = "written by a failed build, reported by no message: it failed to build"
		default:
			u.Why = "neither written nor reported"
		}
	}
}

// fingerprintName is the name Cargo gives the fingerprint of the unit a
// compiler-artifact message reports (fingerprint_file_path in
// compilation_files.rs; the kinds' descriptions are TargetKind's).
func fingerprintName(m *message, isDoc bool) string {
	kind := "lib" // every crate type of a library
	if len(m.Target.Kind) > 0 {
		switch m.Target.Kind[0] {
		case "bin":
			kind = "bin"
		case "example":
			kind = "example"
		case "test":
			kind = "integration-test"
		case "bench":
			kind = "bench"
		case "custom-build":
			kind = "build-script"
		}
	}
	flavor := ""
	if m.Profile.Test {
		flavor = "test-"
	} else if isDoc {
		flavor = "doc-"
	}
	return flavor + kind + "-" + m.Target.Name
}

// packageName reads the package's name from a message's package_id: a
// package ID spec, <source>#<name>@<version>, or <source>#<version> when
// the name is the source URL's last path segment; before Cargo 1.77,
// "<name> <version> (<source>)".
// PackageName reads the package name from a Cargo package id: the spec
// form (path+file:///…/crates/app#0.1.0, registry+…#serde@1.0.1, a git
// source with a query) or the older "name version (source)".
func PackageName(id string) string {
	if i := strings.LastIndexByte(id, '#'); i >= 0 {
		if name, _, ok := strings.Cut(id[i+1:], "@"); ok {
			return name
		}
		u := id[:i]
		if j := strings.IndexByte(u, '?'); j >= 0 {
			u = u[:j]
		}
		return path.Base(strings.TrimSuffix(u, "/"))
	}
	name, _, _ := strings.Cut(id, " ")
	return name
}

// within returns p relative to dir, with forward slashes, if p is inside dir.
func within(dir, p string) (string, bool) {
	rel, err := filepath.Rel(dir, p)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", false
	}
	return filepath.ToSlash(rel), true
}
