package record

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

// Base is base.json. Package base's Record embeds it, with what a build
// keeps of the base in memory besides (JSON promotes the embedded fields,
// so both encode the same file).
type Base struct {
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
	// base.SeedByReflink, SeedByLayer or SeedByCopy (see base.SeedMethod).
	SeedBy string `json:"seed_by,omitempty"`
	// Layer is what folding the layer of a layered refresh found.
	Layer      *LayerCount `json:"layer,omitempty"`
	UnitInputs string      `json:"unit_inputs"` // see base.UnitInputs: what a seed must share
	// Observed is whether the warm build's cargo calls were all seen
	// (package units): only an observed base seeds across unit inputs.
	// Unobserved says why not.
	Observed   bool       `json:"observed"`
	Unobserved []string   `json:"unobserved,omitempty"`
	Pruned     PruneCount `json:"pruned"` // what a seed across unit inputs left that this commit does not use
	// Relocated is what the relocation plan removed from the seed's
	// target before the warm build of a base built at host paths.
	Relocated *Applied `json:"relocated,omitempty"`
	// Pulled is set for a base pulled from a bus bucket (package share)
	// instead of built here.
	Pulled *Pull `json:"pulled,omitempty"`
	// LinkRebuilds are the Cargo dep-info files (relative to the target)
	// a seeded refresh emptied under the link_rebuilds
	// rule, before its warm build.
	LinkRebuilds []string   `json:"link_rebuilds,omitempty"`
	Stamped      StampCount `json:"stamped"`
	// Confinement is what the warm commands' sandbox made of the rest of
	// the host (package confine); nil for a base built at host paths.
	Confinement *Confinement `json:"confinement,omitempty"`
	TargetSeal  TargetSeal   `json:"target_seal"` // what the target held when base.json was written
	Timings     BuildTimings `json:"timings"`
	Warnings    []string     `json:"warnings"`
	Incomplete  []string     `json:"incomplete"`
	Created     time.Time    `json:"created"`
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
func (r *Base) HostPaths() bool { return r.Modes.Isolation == sandbox.IsolationOff }

// BuildPaths are the checkout and target dir as the base's build saw them,
// the paths its target records: the canonical mountpoints in the sandbox,
// its own directories without it (the target through the checkout's
// RemapLink in remap mode).
func (r *Base) BuildPaths() (src, target string) {
	if r.Modes.Remap {
		return r.Src, filepath.Join(r.Src, store.RemapLink)
	}
	if r.HostPaths() {
		return r.Src, r.Target
	}
	return r.MntSrc, r.MntTarget
}

// Modes are the build modes that enter the fingerprint.
type Modes struct {
	// Freshness is [base] freshness: config.FreshnessMtime, or
	// config.FreshnessChecksum, built and used with
	// base.Record.FreshnessEnv.
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
	// keep-going; see package base's doc).
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
	// fingerprint: they join the unit inputs instead (see package base's
	// demand.go).
	Why      string `json:"why"`
	Demanded int    `json:"demanded,omitempty"`
}

// BuildTimings are wall-clock seconds of a base build's phases.
type BuildTimings struct {
	Worktree float64 `json:"worktree"`
	Stamp    float64 `json:"stamp"`
	Warm     float64 `json:"warm"`
	Finish   float64 `json:"finish"`
	Total    float64 `json:"total"`
}

// Pull is where a pulled base came from.
type Pull struct {
	Bucket  string `json:"bucket"`
	Object  string `json:"object"`
	Archive string `json:"archive,omitempty"` // the file it was imported from (`ferry base import`), when not from a bucket
	Host    string `json:"host"`              // the publishing host
	From    string `json:"from"`              // the store dir its target recorded there
	Digest  string `json:"digest"`            // SHA-256 of the object it was installed from
	Signer  string `json:"signer"`            // the trusted key its metadata was signed with
	// Relocated is what the dead relocation plan removed from the target,
	// when From is not this store's dir.
	Relocated *Applied `json:"relocated,omitempty"`
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

// LayerCount is what folding a layered refresh's layer found.
type LayerCount struct {
	Own       int     `json:"own"`       // entries the warm build wrote
	OwnBytes  int64   `json:"own_bytes"` // the sizes of the files among them
	Linked    int     `json:"linked"`    // entries taken from the seed (files hard-linked)
	Whiteouts int     `json:"whiteouts"` // seed entries the build removed
	Seconds   float64 `json:"seconds"`
}

// SealVersion is the version of the listing this Ferry seals with: 2 adds
// inode numbers, change times and link counts to the listing of a Ferry
// without one (0). Package base's seal.go says what a listing holds.
const SealVersion = 2

// TargetSeal is what base.json records of the target.
type TargetSeal struct {
	Digest  string `json:"digest"` // SHA-256 of the listing
	Entries int    `json:"entries"`
	Bytes   int64  `json:"bytes"`
	// Version is the listing's (SealVersion); 0 for a record of an older
	// Ferry, whose listing has no inodes or change times.
	Version int `json:"version,omitempty"`
	// Sealed is when the listing was taken: no entry's change time is
	// later, outside Ferry's link windows.
	Sealed time.Time `json:"sealed,omitzero"`
	// Contents is the SHA-256 of SHA256SUMS, the digests of the target's
	// regular files; empty when none were recorded.
	Contents string `json:"contents,omitempty"`
}

// Covers reports whether the seal catches a write whose mtime was put
// back: whether a Ferry that knew change times sealed it.
func (s TargetSeal) Covers() bool { return s.Version >= SealVersion }

// Learned is what a base learned from demand, as base.json records it.
type Learned struct {
	Window    string  `json:"window"`
	Min       int     `json:"min"`
	Budget    float64 `json:"budget"`
	Reference float64 `json:"reference_cpu"` // the base's own warm CPU time the budget is a fraction of
	Calls     int     `json:"calls"`         // the agents' calls within the window
	Picked    []Pick  `json:"picked"`
	Skipped   []Pick  `json:"skipped,omitempty"`
	// Damaged is how many lines of the demand log could not be read (the
	// log was rewritten without them); Error says why the log could not
	// be read at all (nothing was learned).
	Damaged int    `json:"damaged,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Pick is a command warmset.Select considered.
type Pick struct {
	Command string  `json:"command"`
	Warm    string  `json:"warm"`
	Calls   int     `json:"calls"`
	Agents  int     `json:"agents"`
	Missed  int     `json:"missed"`       // first builds on a base without it that compiled new units
	Seconds float64 `json:"estimate_cpu"` // what warming it is estimated to cost, in CPU seconds
	Why     string  `json:"why"`
}

// ReadBase returns the record of ready base id, or an error wrapping
// fs.ErrNotExist when the base is not ready.
//
// A damaged record (failure.DamagedError) carries the fix: the base built
// again over it, with --rebuild.
func ReadBase(s *store.Store, id string) (*Base, error) {
	return read[Base](s.Base(id).Record, func() string { return rebuildFix(id) })
}

// rebuildFix is the hint for a damaged base id: build it again over what
// is there.
func rebuildFix(id string) string {
	commit, _, _ := strings.Cut(id, "-")
	return fmt.Sprintf("build it again over it with `ferry base --rebuild --rev %s`", commit[:min(len(commit), 12)])
}
