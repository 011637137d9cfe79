// Package base builds and lists immutable warm bases.
//
// A base is one commit's checkout and the target dir its warm commands built,
// at <store>/bases/<commit>-<fingerprint>/. The fingerprint covers the
// toolchain, the warm commands and the modes, so a base is reused only for
// the exact inputs it was built with. A base directory is either finished or
// absent: base.json is written last, atomically, and is the ready marker; a
// directory without it is a partial build that the next builder discards.
// Nothing writes to a ready base (invariant 2 of the architecture contract).
//
// A warm command that fails does not always discard the base. A base is a
// cache, and what cargo compiled is correct whether or not every target
// did: measured on public workspaces, one bench needing nightly
// (#![feature] on stable) failed the generated build after 21 s, and one
// old test denied by today's rustc (invalid_from_utf8_unchecked) after
// 113 s, each leaving agents cold for a bench or test they would never
// build. So a command that keeps going (the generated ones, built with
// cargo's --keep-going; configured ones with [base] keep-going = true)
// is judged by the targets cargo reports it could not compile ("error:
// could not compile `bar` (bench "foo")", read as the output streams past):
//
//   - A library (proc macros included), a binary or a build script that
//     failed, of a member or a dependency, discards the base (exit 5): the
//     commit does not build, every unit depending on it went unbuilt, and
//     an agent would rebuild it and fail the same way. A base must not
//     pretend to be warm for such a commit.
//   - Failures limited to tests, benches, examples and targets compiled as
//     test harnesses keep the base: nothing depends on them, and cargo
//     built everything else. Each is named in base.json's incomplete (bench
//     "foo" of crate bar did not compile) and warned about with what the
//     command cost.
//   - In a clippy command run after a command that is not clippy passed,
//     every failure keeps the base: the build decided whether the commit
//     compiles, and what clippy rejects there is lints. The generated
//     clippy command only ever warns, as before.
//   - A failure that names no target (a manifest error, a crash, a failed
//     test run) discards the base: nothing says what it left undone.
//
// A command that keeps going but lacks --keep-going stops at its first
// failure, so targets cargo had not started are missing too: the base
// records that as incomplete. Configured commands without keep-going fail
// the base on any failure, as always.
package base

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/confine"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/relocate"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
	"github.com/ferrydev/ferry/pkg/toolchain"
)

// Format versions the base record and the fingerprint inputs. Raising it
// gives every base a new id, so no base built under older rules is reused.
// Format 2 records the target's seal.
const Format = 2

// Modes are the build modes that enter the fingerprint.
type Modes struct {
	// Freshness is [base] freshness: config.FreshnessMtime, or
	// config.FreshnessChecksum, built and used with FreshnessEnv.
	Freshness string `json:"freshness"`
	// Isolation is sandbox.IsolationNamespace (built at the canonical
	// paths) or sandbox.IsolationOff (built at the base's host paths).
	Isolation string `json:"isolation"`
	// Remap is remap mode ([sandbox] remap-paths, package remap): built
	// at host paths, the target reached through <src>/.ferry-target and
	// rustc run through ferry-rustc. Only with IsolationOff.
	Remap bool `json:"remap,omitempty"`
}

// Toolchain is the part of the detected toolchain a base records.
type Toolchain struct {
	Rustc        string `json:"rustc"`         // full rustc -vV
	RustcVersion string `json:"rustc_version"` // 1.95.0
	Host         string `json:"host"`
	Cargo        string `json:"cargo"` // cargo -V
	CargoVersion string `json:"cargo_version"`
}

// WarmCommand is one warm command and how it went.
type WarmCommand struct {
	Command   string `json:"command"`
	Generated bool   `json:"generated,omitempty"` // a generated check or clippy command: failure only warns
	// KeepGoing: a failure that left only tests, benches and examples
	// uncompiled (or, in a clippy command after a build, lints) keeps the
	// base, with what failed in the record's incomplete ([base]
	// keep-going; see the package doc).
	KeepGoing bool    `json:"keep_going,omitempty"`
	Seconds   float64 `json:"seconds"`
	// CPU is the CPU time it used, in seconds (user and system, its
	// processes all counted).
	CPU      float64 `json:"cpu_seconds"`
	ExitCode int     `json:"exit_code"`
	// Failed names the targets cargo reported it could not compile, when
	// the command failed.
	Failed []string `json:"failed,omitempty"`
	// Why says why the base warms the command: "default" (generated),
	// "configured" (ferry.toml), or, for a command agents demanded
	// (package demand), how often and what the evidence was; Demanded
	// is then the calls counted. Demanded commands are not part of the
	// fingerprint: they join the unit inputs instead (see learn).
	Why      string `json:"why"`
	Demanded int    `json:"demanded,omitempty"`
}

// Timings are wall-clock seconds of the build's phases.
type Timings struct {
	Worktree float64 `json:"worktree"`
	Stamp    float64 `json:"stamp"`
	Warm     float64 `json:"warm"`
	Finish   float64 `json:"finish"`
	Total    float64 `json:"total"`
}

// Record is base.json.
type Record struct {
	Format      int           `json:"format"`
	ID          string        `json:"id"`
	Commit      string        `json:"commit"`
	Fingerprint string        `json:"fingerprint"`
	Store       string        `json:"store"`
	Dir         string        `json:"dir"`
	Src         string        `json:"src"`
	Target      string        `json:"target"`
	MntSrc      string        `json:"mnt_src"`
	MntTarget   string        `json:"mnt_target"`
	Toolchain   Toolchain     `json:"toolchain"`
	Warm        []WarmCommand `json:"warm"`
	Modes       Modes         `json:"modes"`
	Seed        string        `json:"seed,omitempty"` // the base this one was seeded from; empty for a cold build
	// SeedBy is how a seeded base started from its seed's target:
	// SeedByReflink, SeedByLayer or SeedByCopy (see SeedMethod).
	SeedBy string `json:"seed_by,omitempty"`
	// Layer is what folding the layer of a layered refresh found.
	Layer      *LayerCount `json:"layer,omitempty"`
	UnitInputs string      `json:"unit_inputs"` // see UnitInputs: what a seed must share
	// Observed is whether the warm build's cargo calls were all seen
	// (package units): only an observed base seeds across unit inputs.
	// Unobserved says why not.
	Observed   bool       `json:"observed"`
	Unobserved []string   `json:"unobserved,omitempty"`
	Pruned     PruneCount `json:"pruned"` // what a seed across unit inputs left that this commit does not use
	// Relocated is what the relocation plan removed from the seed's
	// target before the warm build of a base built at host paths.
	Relocated *relocate.Applied `json:"relocated,omitempty"`
	// layer is, while a layered refresh's warm build writes into an
	// overlay, its layers (layer.go); nil otherwise.
	layer *fork.Layers
	// reuse is, while a refresh builds, the seed whose content digests
	// its seal may take (contents.go); nil otherwise.
	reuse *Reuse
	// Pulled is set for a base pulled from a bus bucket (package share)
	// instead of built here.
	Pulled *PullRecord `json:"pulled,omitempty"`
	// LinkRebuilds are the Cargo dep-info files (relative to the target)
	// a seeded refresh emptied under the link_rebuilds
	// rule, before its warm build.
	LinkRebuilds []string   `json:"link_rebuilds,omitempty"`
	Stamped      StampCount `json:"stamped"`
	// Confinement is what the warm commands' sandbox made of the rest of
	// the host (package confine); nil for a base built at host paths.
	Confinement *confine.Record `json:"confinement,omitempty"`
	TargetSeal  TargetSeal      `json:"target_seal"` // what the target held when base.json was written
	Timings     Timings         `json:"timings"`
	Warnings    []string        `json:"warnings"`
	Incomplete  []string        `json:"incomplete"`
	Created     time.Time       `json:"created"`
	// Demand is what the base learned from the agents' calls ([base]
	// warm = "auto" with demand on), nil when it did not learn.
	Demand *Learned `json:"demand,omitempty"`
	// WarmReference is what the base's own (generated or configured)
	// warm commands cost cold, in CPU seconds: the sum of theirs for a
	// cold build, carried from the seed by a refresh. A demanded
	// command's estimated cost is weighed against it ([base]
	// demand-budget).
	WarmReference float64 `json:"warm_reference_cpu,omitempty"`
}

// HostPaths reports whether the base was built without the namespace
// sandbox, at its own host paths.
func (r *Record) HostPaths() bool { return r.Modes.Isolation == sandbox.IsolationOff }

// BuildPaths are the checkout and target dir as the base's build saw them,
// the paths its target records: the canonical mountpoints in the sandbox,
// its own directories without it (the target through the checkout's
// RemapLink in remap mode).
func (r *Record) BuildPaths() (src, target string) {
	if r.Modes.Remap {
		return r.Src, filepath.Join(r.Src, store.RemapLink)
	}
	if r.HostPaths() {
		return r.Src, r.Target
	}
	return r.MntSrc, r.MntTarget
}

// PullRecord is where a pulled base came from.
type PullRecord struct {
	Bucket string `json:"bucket"`
	Object string `json:"object"`
	Host   string `json:"host"`   // the publishing host
	From   string `json:"from"`   // the store dir its target recorded there
	Digest string `json:"digest"` // SHA-256 of the object it was installed from
	Signer string `json:"signer"` // the trusted key its metadata was signed with
	// Relocated is what the dead relocation plan removed from the target,
	// when From is not this store's dir.
	Relocated *relocate.Applied `json:"relocated,omitempty"`
}

// FreshnessEnv is what Cargo needs in the base's warm commands and every
// agent call for the base's freshness mode: checksum freshness's
// variables for its toolchain, none for mtime.
func (r *Record) FreshnessEnv() []string {
	if r.Modes.Freshness != config.FreshnessChecksum {
		return nil
	}
	return toolchain.ChecksumEnv(r.Toolchain.Rustc)
}

// PruneCount is what pruning a seeded target removed.
type PruneCount struct {
	Units        int   `json:"units"`        // units removed whole (and outputs without a fingerprint)
	Fingerprints int   `json:"fingerprints"` // unused targets' fingerprints in used units' dirs
	Files        int   `json:"files"`
	Bytes        int64 `json:"bytes"`
}

// StampCount is how many tracked files and directories were stamped.
type StampCount struct {
	Files int `json:"files"`
	Dirs  int `json:"dirs"`
}

// Fingerprint hashes everything besides the commit that decides what a warm
// build produces.
func Fingerprint(tc Toolchain, warm []WarmCommand, m Modes) string {
	h := sha256.New()
	fmt.Fprintf(h, "ferry-base-format %d\n", Format)
	fmt.Fprintf(h, "rustc\n%s\ncargo\n%s\n", strings.TrimSpace(tc.Rustc), strings.TrimSpace(tc.Cargo))
	for _, w := range warm {
		fmt.Fprintf(h, "warm %q generated=%t", w.Command, w.Generated)
		if w.KeepGoing {
			// Only when set, so that the ids of bases warmed by configured
			// commands without keep-going stay what they were.
			fmt.Fprint(h, " keep-going")
		}
		fmt.Fprintln(h)
	}
	fmt.Fprintf(h, "freshness %s\nisolation %s\n", m.Freshness, m.Isolation)
	if m.Remap {
		// Only when set, so the ids of other bases stay what they were.
		fmt.Fprintln(h, "remap")
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// ID is the base id of commit under fingerprint fp.
func ID(commit, fp string) string { return commit + "-" + fp }

// Read returns the record of ready base id, or an error wrapping
// fs.ErrNotExist when the base is not ready.
//
// A damaged record (failure.DamagedError) carries the fix: the base built
// again over it, with --rebuild.
func Read(s *store.Store, id string) (*Record, error) {
	var r Record
	if err := atomicfile.ReadJSON(s.Base(id).Record, &r); err != nil {
		if d := failure.AsDamaged(err); d != nil {
			d.Fix = rebuildFix(id)
		}
		return nil, err
	}
	return &r, nil
}

// rebuildFix is the hint for a damaged base id: build it again over what
// is there.
func rebuildFix(id string) string {
	commit, _, _ := strings.Cut(id, "-")
	return fmt.Sprintf("build it again over it with `ferry base --rebuild --rev %s`", short(commit))
}

// Entry is one base as listed: a ready record, or a partial directory.
type Entry struct {
	ID      string  `json:"id"`
	State   string  `json:"state"` // ready | building | partial | damaged
	Current bool    `json:"current"`
	Record  *Record `json:"record,omitempty"`
	// Damaged is why a damaged base's base.json cannot be read, with the
	// fix.
	Damaged *failure.DamagedError `json:"-"`
}

// List returns every base of the store, ready or not, newest first.
//
// A damaged current (store.Current) leaves every base not current: the
// listing is what tells which bases there are to make current again.
func List(s *store.Store) ([]Entry, error) {
	cur, err := s.Current()
	if err != nil && failure.AsDamaged(err) == nil {
		return nil, err
	}
	ents, err := os.ReadDir(s.BasesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		en := Entry{ID: e.Name(), Current: e.Name() == cur}
		r, err := Read(s, e.Name())
		switch d := failure.AsDamaged(err); {
		case err == nil:
			en.State, en.Record = "ready", r
		case errors.Is(err, fs.ErrNotExist):
			en.State = "partial"
			if held, _ := lock.Held(s.BaseLock(e.Name())); held {
				en.State = "building"
			}
		case d != nil:
			en.State, en.Damaged = "damaged", d
		default:
			return nil, err
		}
		out = append(out, en)
	}
	sort.SliceStable(out, func(i, j int) bool {
		ti, tj := time.Time{}, time.Time{}
		if out[i].Record != nil {
			ti = out[i].Record.Created
		}
		if out[j].Record != nil {
			tj = out[j].Record.Created
		}
		return ti.After(tj)
	})
	return out, nil
}
