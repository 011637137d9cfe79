package warmset

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ferrydev/ferry/pkg/record/demand"
)

// Why Cargo compiled a unit of an agent's build, told from what its
// target and the base's hold, and the two checkouts. Cargo itself says
// little: a unit whose hash is new (another feature set, profile, target
// or flags) has no earlier build to compare with, so Cargo's only reason
// is that it never built it. The fingerprints say more: Explain compares
// the unit's with the base's units of the same package and target, the
// fields Cargo hashes (features, profile, target, flags, configuration,
// compiler, dependencies), and for a unit the base holds that Cargo
// rebuilt, the inputs rustc read (its dep-info) in the agent's checkout
// against the base's, and the environment variables rustc recorded.

// The kinds of reason Explain gives.
const (
	ReasonEdit       = "edit"       // a source file differs from the base's
	ReasonEnv        = "env"        // an environment variable rustc read differs
	ReasonDependency = "dependency" // a dependency was rebuilt or differs
	ReasonFeatures   = "features"   // another feature set
	ReasonProfile    = "profile"    // other profile settings (or a profile the base never built)
	ReasonFlags      = "flags"      // RUSTFLAGS or Cargo configuration that enters the unit
	ReasonTarget     = "target"     // another target triple
	ReasonCompiler   = "compiler"   // another rustc
	ReasonAbsent     = "absent"     // the base never built this target of the package
	ReasonUnknown    = "unknown"
)

// Reason is why one unit was compiled.
type Reason struct {
	Unit   demand.Unit `json:"unit"`
	Kind   string      `json:"kind"`
	Detail string      `json:"detail"`
	// Files are the source files that differ from the base's (ReasonEdit),
	// relative to the checkout.
	Files []string `json:"files,omitempty"`
}

// Trees are the directories Explain reads.
type Trees struct {
	// Fork is the agent's target for the build's workspace as the host
	// reads what it wrote (an overlay's upper layer); Base the base's
	// target for the same workspace.
	Fork, Base string
	// Worktree and BaseSrc are the agent's and the base's checkouts;
	// BuildSrc is the path the agent's builds gave rustc for its
	// checkout (the canonical mnt/src in the sandbox, the worktree itself
	// at host paths), which dep-info records.
	Worktree, BaseSrc string
	BuildSrc          string
	// Workspace is the build's Cargo workspace, relative to the checkout:
	// rustc's dep-info names members' files relative to it.
	Workspace string
}

// Explain says why each of b's units was compiled, in b's order.
func Explain(b *demand.LastBuild, t Trees) []Reason {
	out := make([]Reason, 0, len(b.Units))
	for _, u := range b.Units {
		r := Reason{Unit: u}
		switch {
		case u.Dir == "":
			r.Kind, r.Detail = ReasonUnknown, "Cargo named it by an uplifted file only, so which unit it was is not known"
		case u.New:
			r.Kind, r.Detail = t.newUnit(u)
		default:
			r.Kind, r.Detail, r.Files = t.rebuilt(u, b.Units)
		}
		out = append(out, r)
	}
	return out
}

// fingerprint is the part of Cargo's fingerprint file (<kind>-<target>.json
// in the unit's fingerprint directory) Explain compares.
type fingerprint struct {
	Rustc       uint64              `json:"rustc"`
	Features    string              `json:"features"`
	Target      uint64              `json:"target"`
	Profile     uint64              `json:"profile"`
	Path        uint64              `json:"path"`
	Deps        [][]json.RawMessage `json:"deps"`
	Rustflags   []string            `json:"rustflags"`
	Config      uint64              `json:"config"`
	CompileKind uint64              `json:"compile_kind"`
}

// deps returns the dependencies' crate names and fingerprint hashes.
func (f *fingerprint) deps() map[string]string {
	m := map[string]string{}
	for _, d := range f.Deps {
		if len(d) < 4 {
			continue
		}
		var name string
		if json.Unmarshal(d[1], &name) == nil {
			m[name] = string(d[3])
		}
	}
	return m
}

// readFingerprint reads the fingerprint of the unit in dir (a fingerprint
// directory) and its file's name (lib-foo, bin-app, test-bin-app, …).
func readFingerprint(dir string) (*fingerprint, string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, "", err
	}
	for _, e := range ents {
		n := e.Name()
		if !strings.HasSuffix(n, ".json") || strings.HasPrefix(n, "dep-") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, "", err
		}
		var f fingerprint
		if err := json.Unmarshal(data, &f); err != nil {
			return nil, "", fmt.Errorf("%s: %w", n, err)
		}
		return &f, strings.TrimSuffix(n, ".json"), nil
	}
	return nil, "", fmt.Errorf("%s: no fingerprint", dir)
}

// newUnit explains a unit the base does not hold: the difference to the
// closest unit of the same package and target the base does hold.
func (t Trees) newUnit(u demand.Unit) (kind, detail string) {
	mine, file, err := readFingerprint(filepath.Join(t.Fork, filepath.FromSlash(u.Dir)))
	if err != nil {
		return ReasonUnknown, "its fingerprint cannot be read: " + err.Error()
	}
	profile := path.Dir(path.Dir(u.Dir))
	fpDir := filepath.Join(t.Base, filepath.FromSlash(profile), ".fingerprint")
	ents, err := os.ReadDir(fpDir)
	if err != nil {
		return ReasonProfile, fmt.Sprintf("the base holds no build in %s: its warm commands never built this profile or target (%s)", profile, profileWords(u))
	}
	type cand struct {
		diffs []string
		kinds []string
	}
	// A unit whose recorded fields all agree is another unit all the same
	// (Cargo hashes what it does not record: clippy's driver as the
	// compiler of a clippy build, the source's path): the closest unit is
	// the one that differs least by what the fingerprint does record.
	var best *cand
	same := false
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, u.Name+"-") || len(n) != len(u.Name)+17 {
			continue
		}
		theirs, tfile, err := readFingerprint(filepath.Join(fpDir, n))
		if err != nil || tfile != file {
			continue
		}
		c := compare(theirs, mine)
		if len(c.kinds) == 0 {
			same = true
			continue
		}
		if best == nil || len(c.kinds) < len(best.kinds) {
			best = &cand{diffs: c.details, kinds: c.kinds}
		}
	}
	switch {
	case best != nil:
		return best.kinds[0], strings.Join(best.diffs, "; ")
	case same:
		return ReasonUnknown, "the base holds units of the same package and target whose recorded settings all agree with it, built another way: by clippy's driver (a clippy build), or from sources at another path"
	}
	return ReasonAbsent, fmt.Sprintf("the base never built %s of %s in %s", strings.TrimPrefix(file, "lib-"), u.Package, profile)
}

// comparison is what differs between two fingerprints, most telling first.
type comparison struct {
	kinds, details []string
}

func compare(base, mine *fingerprint) comparison {
	var c comparison
	add := func(kind, detail string) {
		c.kinds = append(c.kinds, kind)
		c.details = append(c.details, detail)
	}
	if base.Features != mine.Features {
		add(ReasonFeatures, fmt.Sprintf("features differ: the base built it with %s, this build with %s", featureList(base.Features), featureList(mine.Features)))
	}
	if base.Profile != mine.Profile {
		add(ReasonProfile, "its profile settings differ (opt-level, debug info, assertions, or a profile override)")
	}
	if base.CompileKind != mine.CompileKind {
		add(ReasonTarget, "it is built for another target triple")
	}
	if !slices.Equal(base.Rustflags, mine.Rustflags) {
		add(ReasonFlags, fmt.Sprintf("RUSTFLAGS differ: the base built it with %q, this build with %q", base.Rustflags, mine.Rustflags))
	}
	if base.Config != mine.Config {
		add(ReasonFlags, "Cargo configuration that enters the unit differs (a --config, CARGO_* variable or .cargo/config.toml setting)")
	}
	if base.Rustc != mine.Rustc {
		add(ReasonCompiler, "it is built by another rustc")
	}
	bd, md := base.deps(), mine.deps()
	var changed []string
	for name, h := range md {
		if bh, ok := bd[name]; !ok || bh != h {
			changed = append(changed, name)
		}
	}
	for name := range bd {
		if _, ok := md[name]; !ok {
			changed = append(changed, name)
		}
	}
	if len(changed) > 0 {
		slices.Sort(changed)
		add(ReasonDependency, "its dependencies differ from the base's: "+strings.Join(changed, ", "))
	}
	return c
}

func featureList(s string) string {
	var f []string
	if json.Unmarshal([]byte(s), &f) != nil {
		return s
	}
	if len(f) == 0 {
		return "none"
	}
	return "[" + strings.Join(f, ", ") + "]"
}

func profileWords(u demand.Unit) string {
	return fmt.Sprintf("opt-level %s, debuginfo %d", cmp.Or(u.Opt, "?"), u.Debug)
}

// rebuilt explains a unit the base holds that Cargo compiled again: a
// source file that differs, an environment variable, or a dependency the
// same build compiled again (built: the build's compiled units; Cargo
// reports a unit when it is done, and with pipelining a dependent can be
// done before what it depends on).
func (t Trees) rebuilt(u demand.Unit, built []demand.Unit) (kind, detail string, files []string) {
	mine, depInfo := t.depInfo(t.Fork, u)
	var changed []string
	for _, p := range mine.inputs {
		rel, ok := t.inCheckout(p, t.BuildSrc)
		if !ok {
			continue
		}
		a, aerr := os.ReadFile(filepath.Join(t.Worktree, filepath.FromSlash(rel)))
		b, berr := os.ReadFile(filepath.Join(t.BaseSrc, filepath.FromSlash(rel)))
		if (aerr == nil) != (berr == nil) || aerr == nil && !bytes.Equal(a, b) {
			changed = append(changed, rel)
		}
	}
	if len(changed) > 0 {
		slices.Sort(changed)
		changed = slices.Compact(changed)
		more := ""
		if len(changed) > 3 {
			more = fmt.Sprintf(" and %d more", len(changed)-3)
		}
		return ReasonEdit, fmt.Sprintf("a source file it reads differs from the base's: %s%s (an edit in this worktree)",
			strings.Join(changed[:min(3, len(changed))], ", "), more), changed
	}
	theirs, _ := t.depInfo(t.Base, u)
	for _, name := range slices.Sorted(maps.Keys(mine.env)) {
		if bv, ok := theirs.env[name]; depInfo && (!ok || bv != mine.env[name]) {
			return ReasonEnv, fmt.Sprintf("the environment variable %s it reads differs: the base built it with %s, this build with %s",
				name, quoteEnv(bv, ok), quoteEnv(mine.env[name], true)), nil
		}
	}
	if fp, _, err := readFingerprint(filepath.Join(t.Fork, filepath.FromSlash(u.Dir))); err == nil {
		deps := fp.deps()
		var rebuilt []string
		for _, b := range built {
			if b.Dir == u.Dir || b.Kind == "custom-build" {
				continue
			}
			if _, ok := deps[strings.ReplaceAll(b.Target, "-", "_")]; ok {
				rebuilt = append(rebuilt, b.Name)
			}
		}
		if len(rebuilt) > 0 {
			slices.Sort(rebuilt)
			rebuilt = slices.Compact(rebuilt)
			return ReasonDependency, "its dependency " + strings.Join(rebuilt, ", ") + " was compiled again in this build", nil
		}
	}
	return ReasonUnknown, "Cargo found it stale (an input newer than its last build, or a build script that ran again), though no input it read differs from the base's now", nil
}

func quoteEnv(v string, set bool) string {
	if !set {
		return "it unset"
	}
	return fmt.Sprintf("%q", v)
}

// depInfo is what rustc's dep-info file of a unit lists.
type depInfo struct {
	inputs []string
	env    map[string]string
}

// depInfo reads the rustc dep-info (Makefile form) of unit u in target:
// <profile>/deps/<crate>-<hash>.d, or for a build script
// <profile>/build/<package>-<hash>/build_script_build-<hash>.d. ok is
// false when there is none.
func (t Trees) depInfo(target string, u demand.Unit) (depInfo, bool) {
	d := depInfo{env: map[string]string{}}
	profile := path.Dir(path.Dir(u.Dir))
	hash := u.Dir[len(u.Dir)-16:]
	crate := strings.ReplaceAll(u.Target, "-", "_")
	p := filepath.Join(target, filepath.FromSlash(profile), "deps", crate+"-"+hash+".d")
	if u.Kind == "custom-build" {
		p = filepath.Join(target, filepath.FromSlash(profile), "build", u.Name+"-"+hash, "build_script_build-"+hash+".d")
	}
	f, err := os.Open(p)
	if err != nil {
		return d, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	first := true
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "# env-dep:"); ok {
			name, val, _ := strings.Cut(v, "=")
			d.env[name] = val
			continue
		}
		if !first || line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// The first rule names every input: "<output>: <input> <input> …",
		// spaces in a name escaped with a backslash.
		first = false
		_, rest, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		d.inputs = splitEscaped(rest)
	}
	return d, true
}

// splitEscaped splits a dep-info rule's inputs at unescaped spaces.
func splitEscaped(s string) []string {
	var out []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == ' ':
			cur.WriteByte(' ')
			i++
		case s[i] == ' ':
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteByte(s[i])
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// inCheckout maps p, an input as rustc recorded it (absolute below
// buildSrc, or relative to the workspace), to a path relative to the
// checkout; ok is false for an input outside it (a registry crate).
func (t Trees) inCheckout(p, buildSrc string) (string, bool) {
	if !filepath.IsAbs(p) {
		p = filepath.Join(buildSrc, filepath.FromSlash(t.Workspace), p)
	}
	rel, err := filepath.Rel(buildSrc, filepath.Clean(p))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return filepath.ToSlash(rel), true
}
