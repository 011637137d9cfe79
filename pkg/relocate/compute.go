package relocate

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/ferrydev/ferry/pkg/units"
)

// unitPlan is what Compute learns about one unit.
type unitPlan struct {
	u      *units.Unit
	ws     string // its nested workspace's target dir, or "" for the target's own
	run    bool   // a build script's run
	doc    bool   // rustdoc's
	outDir string // a run's OUT_DIR, relative to the target

	hashes []string // its fingerprints, as their hash files spell them
	deps   []string // the fingerprints it depends on
	dep    []*unitPlan
	users  []*unitPlan // the units that depend on it

	inputs   []string // its rustc dep-info's input files, as recorded
	local    bool     // an input lies in the checkout: a path package of the checkout
	dylib    string   // a proc macro's (or dylib's) compiled library, relative to the target
	reads    string   // a proc macro: why it counts as reading paths (R7)
	recorded []recorded
	seen     map[place]bool // the target places in recorded

	why   string // why it is removed, or ""
	stale bool   // Cargo rebuilds it in the first build
}

// recorded is a path a unit recorded, and in what.
type recorded struct {
	in    source
	file  string // relative to the target
	place place
}

// source is the kind of file a path was recorded in.
type source int

const (
	inFingerprint source = iota // Cargo's fingerprint files
	inDepInfo                   // rustc's dep-info: what the compilation read
	inDirective                 // a build script's output, after Cargo's rewrite of its OUT_DIR
	inOutDir                    // a file a build script wrote (its OUT_DIR, its run dir)
)

func (s source) String() string {
	return [...]string{"fingerprint", "rustc dep-info", "build script directive", "build script output"}[s]
}

// computation is one Compute.
type computation struct {
	target  string
	roots   Roots
	live    bool
	own     string // the target Compute runs on, relative to the store dir, when live
	needles []needle
	listing *units.Listing
	units   []*unitPlan
	byHash  map[string]*unitPlan

	mu      sync.Mutex
	foreign string // a run's OUT_DIR outside the store's target dirs: Roots.Store is not what the target recorded
}

func (c *computation) abs(rel string) string { return filepath.Join(c.target, filepath.FromSlash(rel)) }

// ownTarget returns target relative to the store dir, if it is below it.
func ownTarget(target, storeDir string) string {
	try := func(t, s string) string {
		rel, err := filepath.Rel(s, t)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || rel == "." {
			return ""
		}
		return filepath.ToSlash(rel)
	}
	if r := try(filepath.Clean(target), filepath.Clean(storeDir)); r != "" {
		return r
	}
	t, err1 := filepath.EvalSymlinks(target)
	s, err2 := filepath.EvalSymlinks(storeDir)
	if err1 != nil || err2 != nil {
		return ""
	}
	return try(t, s)
}

// read examines every unit, in parallel: the reading is most of the cost.
func (c *computation) read() {
	work := make(chan *unitPlan)
	var wg sync.WaitGroup
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newScanner()
			for x := range work {
				c.examine(x, s)
			}
		}()
	}
	for _, x := range c.units {
		work <- x
	}
	close(work)
	wg.Wait()
}

// remove marks x removed (the first reason stays).
func (x *unitPlan) remove(why string) {
	if x.why == "" {
		x.why = why
	}
}

// examine reads what x records.
func (c *computation) examine(x *unitPlan, s *scanner) {
	u := x.u
	for _, f := range u.Fingerprints {
		for _, name := range f.Files {
			if name == "output-"+f.Name {
				continue // cached diagnostics: cosmetic
			}
			rel := path.Join(u.Dir, name)
			data, err := os.ReadFile(c.abs(rel))
			if err != nil {
				x.remove("cannot read " + rel + ": " + err.Error())
				continue
			}
			switch {
			case name == f.Name:
				h := string(bytes.TrimSpace(data))
				if !isHex(h, 16) {
					x.remove("cannot parse the fingerprint " + rel)
					continue
				}
				x.hashes = append(x.hashes, h)
			case name == f.Name+".json":
				deps, err := fingerprintDeps(data)
				if err != nil {
					x.remove("cannot parse " + rel + ": " + err.Error())
					continue
				}
				x.deps = append(x.deps, deps...)
				c.note(x, inFingerprint, rel, string(data))
			case name == "dep-"+f.Name:
				d, err := parseEncodedDepInfo(data)
				if err != nil {
					x.remove("cannot parse " + rel + ": " + err.Error())
					continue
				}
				for _, v := range append(d.paths, d.env...) {
					c.note(x, inFingerprint, rel, v)
				}
			default:
				c.note(x, inFingerprint, rel, string(data))
			}
		}
	}
	if x.why != "" {
		return // removed whatever else it records (and rebuilt, so R7 does not matter)
	}
	if x.run {
		c.examineRun(x, s)
		return
	}
	c.examineCompile(x, s)
}

// record notes a path x recorded, and reports whether another one can
// still change the verdict. A checkout path removes x whatever else it
// records; a target path is judged once the dependencies are known
// (judge), each place once, however often a file repeats it.
func (x *unitPlan) record(in source, file string, pl place) bool {
	if !pl.target {
		x.remove(in.String() + " " + file + " records a path into the base's checkout or git dir")
		return false
	}
	if x.seen[pl] {
		return true
	}
	if x.seen == nil {
		x.seen = map[place]bool{}
	}
	x.seen[pl] = true
	x.recorded = append(x.recorded, recorded{in: in, file: file, place: pl})
	return true
}

// note records the paths under a root that text holds.
func (c *computation) note(x *unitPlan, in source, file, text string) {
	for _, h := range hitsIn(text, c.needles) {
		x.record(in, file, where(h))
	}
}

// examineCompile reads a compilation's rustc dep-info and, for a proc
// macro, its library.
func (c *computation) examineCompile(x *unitPlan, s *scanner) {
	u := x.u
	var dfiles []string
	if u.Layout == units.BuildUnits {
		// build/<pkg>/<hash>/out/ holds rustc's outputs.
		out := path.Join(u.Paths[0], "out")
		dfiles = listD(c.abs(out), out)
		x.dylib = findDylib(c.abs(out), out)
	}
	for _, p := range u.Paths[1:] {
		switch {
		case strings.HasSuffix(p, ".d"):
			dfiles = append(dfiles, p)
		case isDylib(p) && strings.HasPrefix(path.Base(p), "lib"):
			x.dylib = p
		case u.Layout == units.Legacy && path.Dir(p) == path.Join(u.Profile, "build"):
			dfiles = append(dfiles, listD(c.abs(p), p)...) // a build script's dep-info
		}
	}
	if len(dfiles) == 0 && !x.doc {
		x.remove("no rustc dep-info to read")
		return
	}
	for _, rel := range dfiles {
		data, err := os.ReadFile(c.abs(rel))
		if err != nil {
			x.remove("cannot read " + rel + ": " + err.Error())
			continue
		}
		d, err := parseRustcDepInfo(data)
		if err != nil {
			x.remove("cannot parse " + rel + ": " + err.Error())
			continue
		}
		for _, f := range d.files {
			x.inputs = append(x.inputs, f)
			if !filepath.IsAbs(f) {
				x.local = true
			}
			for _, h := range hitsIn(f, c.needles) {
				pl := where(h)
				x.local = x.local || !pl.target
				x.record(inDepInfo, rel, pl)
			}
		}
		for _, v := range d.env {
			c.note(x, inDepInfo, rel, v)
		}
	}
	if x.dylib != "" {
		x.reads = c.readsPaths(x, s)
	}
}

func isDylib(p string) bool {
	return strings.HasSuffix(p, ".so") || strings.HasSuffix(p, ".dylib") || strings.HasSuffix(p, ".dll")
}

// findDylib returns the library in dir (rel: dir relative to the
// target), or "".
func findDylib(dir, rel string) string {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Type().IsRegular() && isDylib(e.Name()) && strings.HasPrefix(e.Name(), "lib") {
			return path.Join(rel, e.Name())
		}
	}
	return ""
}

// listD lists the rustc dep-info files directly in dir (rel: dir relative
// to the target).
func listD(dir, rel string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".d") {
			out = append(out, path.Join(rel, e.Name()))
		}
	}
	return out
}

// examineRun reads a build script's run: its directives (after Cargo's
// rewrite of the OUT_DIR it ran with) and everything it wrote.
func (c *computation) examineRun(x *unitPlan, s *scanner) {
	dir := x.u.RunDir()
	rootOutput, err := os.ReadFile(c.abs(path.Join(dir, "root-output")))
	if err != nil {
		x.remove("cannot read the run's root-output: " + err.Error())
		return
	}
	// Every run's OUT_DIR was recorded in a target dir under the store:
	// otherwise the target was built under another root than Roots.Store,
	// whose paths no needle finds.
	if !c.underStore(string(rootOutput)) {
		c.mu.Lock()
		c.foreign = string(rootOutput)
		c.mu.Unlock()
	}
	// The directives: run/stdout in the build-units layout.
	outputName := "output"
	if x.u.Layout == units.BuildUnits {
		outputName = "stdout"
	}
	output, err := os.ReadFile(c.abs(path.Join(dir, outputName)))
	if err != nil {
		x.remove("cannot read the run's output: " + err.Error())
		return
	}
	for _, d := range parseDirectives(output) {
		v := d.value
		if !linkArg(d.key) && len(rootOutput) > 0 {
			// Cargo replaces the exact root-output string when it
			// reads the directives back.
			v = strings.ReplaceAll(v, string(rootOutput), "")
		}
		c.note(x, inDirective, path.Join(dir, outputName), v)
	}
	skip := map[string]bool{outputName: true, "root-output": true, "stderr": true, "invoked.timestamp": true}
	c.walkWritten(x, s, dir, skip)
	if x.outDir != dir && !within(x.outDir, dir) {
		c.walkWritten(x, s, x.outDir, nil)
	}
}

// walkWritten scans every file below rel (not following symlinks, whose
// targets are scanned as text), except the top-level names in skip.
func (c *computation) walkWritten(x *unitPlan, s *scanner, rel string, skip map[string]bool) {
	root := c.abs(rel)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == root {
				return nil // a run without an OUT_DIR
			}
			return err
		}
		r, _ := filepath.Rel(c.target, p)
		r = filepath.ToSlash(r)
		if filepath.Dir(p) == root && skip[d.Name()] {
			return nil
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			c.note(x, inOutDir, r, t)
		case d.Type().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return s.hits(f, c.needles, func(h hit) bool {
				return x.record(inOutDir, r, where(h))
			})
		}
		return nil
	})
	if err != nil {
		x.remove("cannot read what the build script wrote: " + err.Error())
	}
}

// pathVariables are the environment variables holding paths that R7
// looks for in proc macros, by name: a macro reading one can bake the
// base's path into the code it expands to.
var pathVariables = []string{
	"CARGO_MANIFEST_DIR", "CARGO_MANIFEST_PATH", "OUT_DIR", "PWD", "CARGO_TARGET_DIR",
	"CARGO_TARGET_TMPDIR", "CARGO_BIN_EXE_", "CARGO_RUSTC_CURRENT_DIR", "CARGO_WORKSPACE_DIR",
	"CARGO_BUILD_TARGET_DIR", "CARGO_BUILD_BUILD_DIR", "CARGO_LLVM_COV_TARGET_DIR",
}

// checkedMacros are registry proc macros whose hits on pathVariables a
// human checked (they read no path into their expansion), by exact
// version: another version is checked again.
var checkedMacros = map[string]string{
	"document-features": "0.2.12",
	"xflags-macros":     "0.3.2",
}

// readsPaths applies R7 to a proc macro's library: it counts as reading
// a path when the library names a path variable (registry crates: unless
// checked by version). localMacros looks at the sources of the checkout's.
func (c *computation) readsPaths(x *unitPlan, s *scanner) string {
	if !x.local {
		if v, ok := checkedMacros[x.u.Package]; ok && v == registryVersion(x) {
			return ""
		}
	}
	f, err := os.Open(c.abs(x.dylib))
	if err != nil {
		return "its library cannot be read: " + err.Error()
	}
	defer f.Close()
	name, err := s.names(f, pathVariables)
	if err != nil {
		return "its library cannot be read: " + err.Error()
	}
	if name != "" {
		return "its library names " + name
	}
	return ""
}

// localMacros applies R7's source rule to the proc macros of the
// checkout: their own sources and those of the checkout's libraries they
// depend on (a helper crate doing the reading) must not name a path
// variable, use the working directory, run a subprocess, or read a
// variable by a name built at run time. Sources that cannot be read count.
func (c *computation) localMacros() {
	for _, x := range c.units {
		if x.dylib == "" || !x.local || x.reads != "" || x.why != "" {
			continue
		}
		libs := []*unitPlan{x}
		for y := range x.closure() {
			if y.local && !y.run && y.isLib() {
				libs = append(libs, y)
			}
		}
		for _, y := range libs {
			if why := c.sourcesRead(y); why != "" {
				x.reads = why
				break
			}
		}
	}
}

// isLib reports whether x compiles a library (not a build script).
func (x *unitPlan) isLib() bool {
	for _, f := range x.u.Fingerprints {
		if strings.HasPrefix(f.Name, "lib-") {
			return true
		}
	}
	return false
}

// sourcesRead says how the checkout's sources of x may read a path, or "".
func (c *computation) sourcesRead(x *unitPlan) string {
	for _, in := range x.inputs {
		p := in
		if !filepath.IsAbs(p) {
			if c.roots.Src == "" {
				return "its sources cannot be read: no base checkout given"
			}
			p = filepath.Join(c.roots.Src, filepath.FromSlash(strings.TrimPrefix(x.ws, "ferry-ws/")), p)
		} else if !x.inCheckout(in, c.needles) {
			continue
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return "its source " + in + " cannot be read: " + err.Error()
		}
		if why := sourceReadsPaths(src); why != "" {
			return in + " " + why
		}
	}
	return ""
}

// underStore reports whether p, a path as recorded, lies in a target dir
// under the store.
func (c *computation) underStore(p string) bool {
	for _, h := range hitsIn(p, c.needles) {
		if h.n.store && where(h).target {
			return true
		}
	}
	return false
}

// inCheckout reports whether an input lies in the checkout.
func (x *unitPlan) inCheckout(in string, ns []needle) bool {
	for _, h := range hitsIn(in, ns) {
		if !where(h).target {
			return true
		}
	}
	return false
}

// The patterns compile when first used: the shim links this package (through
// package base) and must not pay for them on every cargo call.
var (
	dynamicVar = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`env::var(_os)?\s*\(\s*[^"\s)]`) })
	rawVar     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`env::var(_os)?\s*\(\s*r#*"`) })
	versionDir = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+[-+.A-Za-z0-9]*$`) })
)

// sourceReadsPaths says how a local proc macro's source may read a path,
// or "".
func sourceReadsPaths(src []byte) string {
	s := string(src)
	for _, v := range pathVariables {
		if strings.Contains(s, v) {
			return "names " + v
		}
	}
	switch {
	case strings.Contains(s, "current_dir"):
		return "uses the working directory"
	case strings.Contains(s, "Command::new") || strings.Contains(s, "process::Command"):
		return "runs a subprocess"
	case strings.Contains(s, "env::vars"):
		return "lists environment variables"
	}
	for _, m := range dynamicVar().FindAllStringIndex(s, -1) {
		if !rawVar().MatchString(s[m[0]:]) {
			return "reads a variable by a name built at run time"
		}
	}
	return ""
}

// registryVersion returns the version of a registry unit from the
// directory its sources are in (<package>-<version>/), or "".
func registryVersion(x *unitPlan) string {
	prefix := x.u.Package + "-"
	for _, in := range x.inputs {
		for _, part := range strings.Split(filepath.ToSlash(in), "/") {
			if v, ok := strings.CutPrefix(part, prefix); ok && versionDir().MatchString(v) {
				return v
			}
		}
	}
	return ""
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// link resolves every unit's dependencies by their fingerprints.
func (c *computation) link() {
	c.byHash = map[string]*unitPlan{}
	for _, x := range c.units {
		for _, h := range x.hashes {
			c.byHash[h] = x
		}
	}
	for _, x := range c.units {
		seen := map[*unitPlan]bool{}
		for _, h := range x.deps {
			if y := c.byHash[h]; y != nil && y != x && !seen[y] {
				seen[y] = true
				x.dep = append(x.dep, y)
				y.users = append(y.users, x)
			}
		}
	}
}

// closure returns x's dependencies, transitively.
func (x *unitPlan) closure() map[*unitPlan]bool {
	seen := map[*unitPlan]bool{}
	stack := append([]*unitPlan(nil), x.dep...)
	for len(stack) > 0 {
		y := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[y] {
			continue
		}
		seen[y] = true
		stack = append(stack, y.dep...)
	}
	return seen
}

// judge decides which recorded paths may stay.
func (c *computation) judge() {
	for _, x := range c.units {
		var deps map[*unitPlan]bool
		for _, r := range x.recorded {
			if x.why != "" {
				break
			}
			if !r.place.target {
				x.remove(r.in.String() + " " + r.file + " records a path into the base's checkout or git dir")
				continue
			}
			if deps == nil {
				deps = x.closure()
				deps[x] = true
			}
			if c.live && r.place.root == c.own && c.intoOutDir(r.place.inner, deps, "") {
				continue // a live OUT_DIR of a run it depends on
			}
			if r.in == inDepInfo && !x.local && c.intoOutDir(r.place.inner, direct(x), x.u.Package) {
				continue // a registry crate including from its own OUT_DIR
			}
			what := "a dead target path"
			if c.live && r.place.root == c.own {
				what = "a path into the base's target outside the OUT_DIRs it depends on"
			}
			x.remove(r.in.String() + " " + r.file + " records " + what)
		}
	}
	// R7: what a path-reading proc macro expands to may hold the base's paths.
	for _, x := range c.units {
		if x.reads == "" {
			continue
		}
		for _, y := range x.users {
			y.remove("uses the proc macro " + x.u.Package + ", which " + x.reads)
		}
	}
}

func direct(x *unitPlan) map[*unitPlan]bool {
	m := map[*unitPlan]bool{}
	for _, y := range x.dep {
		m[y] = true
	}
	return m
}

// intoOutDir reports whether inner lies in the OUT_DIR of a run among
// runs (of package pkg, unless "").
func (c *computation) intoOutDir(inner string, runs map[*unitPlan]bool, pkg string) bool {
	for y := range runs {
		if y.run && (pkg == "" || y.u.Package == pkg) && within(inner, y.outDir) {
			return true
		}
	}
	return false
}

// spread marks stale every unit depending on a removed one, and removes
// whole every build-script run among them, so that it reruns from an
// empty OUT_DIR rather than over the base's.
func (c *computation) spread() {
	var stack []*unitPlan
	for _, x := range c.units {
		if x.why != "" {
			x.stale = true
			stack = append(stack, x)
		}
	}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, y := range x.users {
			if y.stale {
				continue
			}
			y.stale = true
			if y.run {
				y.remove("depends on " + x.u.Dir + ", which is removed or rebuilt")
			}
			stack = append(stack, y)
		}
	}
}

// plan lists what to remove: a removed compilation's fingerprint dir (so
// its dependents go stale in the same build); a removed run whole.
func (c *computation) plan(p *Plan) {
	for _, x := range c.units {
		if x.stale {
			p.Rebuilds = append(p.Rebuilds, x.u.Dir)
		}
		if x.why == "" {
			p.Kept++
			continue
		}
		if !x.run {
			p.Remove = append(p.Remove, Removal{Path: x.u.Dir, Why: x.why})
			continue
		}
		for _, q := range x.u.Paths {
			p.Remove = append(p.Remove, Removal{Path: q, Why: x.why})
		}
	}
	for _, r := range c.listing.Problems {
		if r.Path != "" {
			p.Remove = append(p.Remove, Removal{Path: r.Path, Why: r.String()})
		}
	}
	sort.Slice(p.Remove, func(i, j int) bool { return p.Remove[i].Path < p.Remove[j].Path })
	sort.Strings(p.Rebuilds)
	p.Units = len(c.units)
	p.Nested = c.listing.Nested
}
