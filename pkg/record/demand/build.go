package demand

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/digest"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/units"
)

// key names a command in an agent's directory of seen commands.
func key(command string) string {
	sum := digest.Sum256([]byte(command))
	return hex.EncodeToString(sum[:8])
}

// Unit is a unit a build compiled, as Cargo's compiler-artifact message
// named it.
type Unit struct {
	Package string   `json:"package"` // name and version: manifest 0.1.0
	Name    string   `json:"name"`    // the package name alone
	Kind    string   `json:"kind"`    // lib, bin, test, proc-macro, custom-build, …
	Target  string   `json:"target"`  // the target's name
	Test    bool     `json:"test"`    // compiled as a test harness
	Opt     string   `json:"opt"`     // the profile's opt-level
	Debug   int      `json:"debug"`   // the profile's debuginfo level
	Feature []string `json:"features"`
	// Dir is the unit's fingerprint directory, relative to the target dir
	// (debug/.fingerprint/manifest-0123456789abcdef), "" when the message
	// did not say which it is (the caller may find it: FindDir).
	Dir string `json:"dir,omitempty"`
	// New: the base holds no unit of that directory.
	New bool `json:"new"`
}

// String is how `ferry why` names the unit: manifest (lib), app (bin,
// test harness).
func (u Unit) String() string {
	what := u.Kind
	if u.Kind != "lib" && u.Kind != "proc-macro" && u.Kind != "custom-build" && u.Target != u.Name {
		what += " " + u.Target
	}
	if u.Kind == "custom-build" {
		what = "build script"
	}
	if u.Test {
		what += ", test harness"
	}
	return u.Name + " (" + what + ")"
}

// Artifact is the part of Cargo's compiler-artifact message demand reads.
type Artifact struct {
	Reason    string `json:"reason"`
	PackageID string `json:"package_id"`
	Target    struct {
		Kind []string `json:"kind"`
		Name string   `json:"name"`
	} `json:"target"`
	Profile struct {
		OptLevel  string          `json:"opt_level"`
		DebugInfo json.RawMessage `json:"debuginfo"`
		Test      bool            `json:"test"`
	} `json:"profile"`
	Features  []string `json:"features"`
	Filenames []string `json:"filenames"`
	Fresh     bool     `json:"fresh"`
}

// ParseArtifact reads a compiler-artifact message (one line of Cargo's
// JSON output, without its newline); ok is false for any other line.
func ParseArtifact(line []byte) (a Artifact, ok bool) {
	if !strings.HasPrefix(string(line[:min(len(line), 40)]), `{"reason":"compiler-artifact"`) {
		return a, false
	}
	if json.Unmarshal(line, &a) != nil || a.Reason != "compiler-artifact" {
		return a, false
	}
	return a, true
}

// Unit returns the unit a names. target is the target dir the build
// wrote to, as Cargo saw it (its filenames are below it).
func (a Artifact) Unit(target string) Unit {
	name, version := packageOf(a.PackageID)
	u := Unit{Name: name, Package: strings.TrimSpace(name + " " + version), Target: a.Target.Name,
		Test: a.Profile.Test, Opt: a.Profile.OptLevel, Feature: a.Features}
	if len(a.Target.Kind) > 0 {
		u.Kind = a.Target.Kind[0]
	}
	var d int
	if json.Unmarshal(a.Profile.DebugInfo, &d) == nil {
		u.Debug = d
	}
	u.Dir = unitDir(name, a.Filenames, target)
	return u
}

// packageOf reads the name and version from a package id (the spec form,
// or the older "name version (source)").
func packageOf(id string) (name, version string) {
	name = units.PackageName(id)
	if i := strings.LastIndexByte(id, '#'); i >= 0 {
		frag := id[i+1:]
		if _, v, ok := strings.Cut(frag, "@"); ok {
			return name, v
		}
		return name, frag
	}
	if f := strings.Fields(id); len(f) >= 2 {
		return name, f[1]
	}
	return name, ""
}

// hashed matches a file name Cargo gives a unit's outputs: a stem ending
// in -<16 hex digits> (libfoo-0123456789abcdef.rlib, foo-0123….d), or a
// build script's directory (build/foo-0123456789abcdef/…).
// Compiled on first use, as are this package's other patterns: the shim
// links the package, and a call that records nothing compiles none.
var hashed = lazyRegexp(`-([0-9a-f]{16})(?:\.[^/]*)?$`)

// unitDir finds the fingerprint directory of the unit whose outputs are
// files (absolute, below target): <profile dir>/.fingerprint/<package
// name>-<hash>, where the hash is the one in a hashed output's name.
// Uplifted files (target/debug/app) carry none: "" then.
func unitDir(pkg string, files []string, target string) string {
	for _, f := range files {
		rel, err := filepath.Rel(target, f)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		parts := strings.Split(filepath.ToSlash(rel), "/")
		for i, p := range parts {
			if i == 0 {
				continue
			}
			switch p {
			case "deps", "examples":
				if i == len(parts)-2 {
					if m := hashed().FindStringSubmatch(parts[i+1]); m != nil {
						return strings.Join(parts[:i], "/") + "/.fingerprint/" + pkg + "-" + m[1]
					}
				}
			case "build":
				// build/<pkg>-<hash>/build-script-build: the script's compile unit.
				if i+1 < len(parts) {
					if m := hashed().FindStringSubmatch(parts[i+1]); m != nil {
						return strings.Join(parts[:i], "/") + "/.fingerprint/" + pkg + "-" + m[1]
					}
				}
			}
		}
	}
	return ""
}

// FindDir finds, in fork (a target dir as the host reads the agent's
// fork), the fingerprint directory of u, which the message named by
// uplifted files only (files, relative to the target dir, like
// debug/app): the one of u's package in their profile dir holding a
// fingerprint file for u's target written at or after since. Where
// several are (a proc macro built both as a root and for the host), the
// one whose hashed output is the uplifted file (a hard link of it). ""
// when there is none, or no telling.
func FindDir(fork string, files []string, u Unit, since time.Time) string {
	if len(files) == 0 {
		return ""
	}
	profile := path.Dir(files[0])
	if path.Base(profile) == "examples" {
		profile = path.Dir(profile)
	}
	fp := filepath.Join(fork, filepath.FromSlash(profile), ".fingerprint")
	ents, err := os.ReadDir(fp)
	if err != nil {
		return ""
	}
	var found []string
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, u.Name+"-") || !hashed().MatchString(n) || len(n) != len(u.Name)+17 {
			continue
		}
		fps, err := os.ReadDir(filepath.Join(fp, n))
		if err != nil {
			continue
		}
		for _, f := range fps {
			fn := f.Name()
			if strings.HasPrefix(fn, "dep-") || strings.HasSuffix(fn, ".json") || !strings.HasSuffix(fn, "-"+u.Target) {
				continue
			}
			if fi, err := f.Info(); err == nil && !fi.ModTime().Before(since) {
				found = append(found, n)
				break
			}
		}
	}
	if len(found) == 1 {
		return profile + "/.fingerprint/" + found[0]
	}
	// Cargo hard-links an uplifted file to the hashed output it comes
	// from: deps/libfoo-<hash>.so for libfoo.so, deps/app-<hash> for app.
	var match []string
	for _, n := range found {
		hash := n[len(n)-16:]
		for _, f := range files {
			up, err := os.Stat(filepath.Join(fork, filepath.FromSlash(f)))
			if err != nil {
				continue
			}
			base := path.Base(f)
			ext := path.Ext(base)
			if ext != ".so" && ext != ".dylib" && ext != ".dll" && ext != ".a" && ext != ".rlib" && ext != ".exe" && ext != ".wasm" {
				ext = ""
			}
			stem := strings.TrimSuffix(base, ext)
			for _, dir := range []string{"deps", path.Base(path.Dir(f))} {
				h, err := os.Stat(filepath.Join(fork, filepath.FromSlash(profile), dir, stem+"-"+hash+ext))
				if err == nil && os.SameFile(up, h) {
					match = append(match, n)
				}
			}
		}
	}
	if match = slices.Compact(match); len(match) == 1 {
		return profile + "/.fingerprint/" + match[0]
	}
	return ""
}

// Relative returns files (absolute) relative to target, with forward
// slashes, leaving out any outside it.
func Relative(files []string, target string) []string {
	var out []string
	for _, f := range files {
		rel, err := filepath.Rel(target, f)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		out = append(out, filepath.ToSlash(rel))
	}
	return out
}

// LastBuild is an agent's last build that compiled units, for `ferry
// why`: written by the shim to the agent's last-build.json.
type LastBuild struct {
	Time    time.Time `json:"time"`
	Command string    `json:"command"`
	Base    string    `json:"base"`
	// Workspace is the Cargo workspace the call built, relative to the
	// worktree's top; Target the target dir Cargo wrote to as it saw it
	// (in the sandbox, below the store's mnt/target).
	Workspace string  `json:"workspace"`
	Target    string  `json:"target"`
	Fresh     int     `json:"fresh"`
	Compiled  int     `json:"compiled"`
	New       int     `json:"new"`
	Seconds   float64 `json:"seconds"`
	Exit      int     `json:"exit"`
	// Units are the compiled units in the order Cargo reported them (a
	// unit after those it depends on), at most MaxUnits.
	Units []Unit `json:"units"`
}

// MaxUnits bounds the units a LastBuild keeps: `ferry why` names the
// first ones.
const MaxUnits = 500

// WriteLastBuild writes b to path atomically.
func WriteLastBuild(path string, b *LastBuild) error {
	return atomicfile.WriteJSON(path, b, 0o600)
}

// ReadLastBuild reads an agent's last-build.json; nil, nil when the agent
// has compiled nothing since it was spawned.
func ReadLastBuild(path string) (*LastBuild, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var b LastBuild
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, failure.Damaged(path, err, "the agent's next build that compiles something writes it again; until then move it aside (`mv "+path+" "+path+".damaged`)")
	}
	return &b, nil
}
