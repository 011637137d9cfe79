// Package agent creates, lists and removes agents: git worktrees with a fork
// of a base's target dir, whose first cargo build reuses the base's work
// wherever the agent's sources are provably the base's.
//
// An agent is <store>/agents/<name>/ (agent.json, lock, busy.lock, and the
// fork: target/, or an overlay's upper/ and work/ with mount.lock and
// ns.json) plus its worktree and branch. agent.json is written in state
// "creating" before anything else exists and names everything spawn is
// about to make, so a spawn killed at any point is rolled back by the next
// spawn of that name or by gc: an agent is either ready or, after rollback,
// absent.
//
// What the fork is, how a process enters the agent's sandbox, whether the
// caller is in it already, who counts as a user of the fork and what rm
// must hold before removing it belong to the fork backend the agent
// recorded at spawn (fork.Lifecycle; the overlay's join-or-create protocol
// lives with it in package fork). This package adds what every agent
// shares (the worktree's bind mount, the sealed store, busy.lock), asks the
// backend for the rest and never compares backend names.
//
// An agent also records at spawn how its builds are isolated
// (sandbox.Decide, from [sandbox] mode and, under auto, a probe), and every
// later call follows the record, never the settings of the moment: in the
// namespace sandbox at the canonical paths, or without it at host paths,
// where its processes run as they are and the shim gives cargo the fork as
// its target dir. A fork built at other paths than its base was (either
// way round) gets the base's relocation plan at spawn (base.Relocation),
// and an overlay fork, which exists only in a namespace, is refused
// without one.
package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/confine"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/relocate"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

// Format versions agent.json.
const Format = 1

// States of an agent.
const (
	Creating = "creating"
	Ready    = "ready"
	// Damaged is not a state any record holds: it is how ferry list
	// shows an agent whose record cannot be read.
	Damaged = "damaged"
)

// Record is agent.json.
type Record struct {
	Format      int    `json:"format"`
	Name        string `json:"name"`
	State       string `json:"state"`
	Branch      string `json:"branch"`
	Worktree    string `json:"worktree"`
	StartCommit string `json:"start_commit"`
	Base        string `json:"base"` // base id
	BaseCommit  string `json:"base_commit"`
	Backend     string `json:"backend"`
	// Isolation is how the agent's builds run, decided at spawn and kept:
	// sandbox.IsolationNamespace (at the canonical paths) or
	// sandbox.IsolationOff (at host paths: cargo in the worktree, the
	// fork as its target dir). Empty in records older than the field:
	// the namespace.
	Isolation string    `json:"isolation,omitempty"`
	Created   time.Time `json:"created"`
	// What spawn made, so a rollback removes only that.
	MadeWorktree bool `json:"made_worktree"`
	MadeBranch   bool `json:"made_branch"`
	// Adopted is set for an agent made of a worktree that existed
	// (Adopt): the worktree and its branch are not Ferry's to remove.
	Adopted bool `json:"adopted,omitempty"`
	// PlacedLockfile is the digest ("sha256:<hex>") of the Cargo.lock spawn
	// copied from the base into a worktree whose commit tracks none; empty
	// when it placed none (or for a record older than this field). rm does
	// not count that file as the agent's work while it is unchanged.
	PlacedLockfile string `json:"placed_lockfile,omitempty"`
	// Placed are the files spawn placed in the worktree for the agent's
	// tool (SpawnOptions.Place), by path relative to the worktree as git
	// status names it, with the digest of what it wrote: not the agent's
	// work while unchanged.
	Placed map[string]string `json:"placed,omitempty"`
	// Tool and Session name the agent tool that had the agent created
	// through a hook ("claude-code", and the tool's session id), empty for
	// `ferry spawn`. gc reaps only such agents, once abandoned.
	Tool    string `json:"tool,omitempty"`
	Session string `json:"session,omitempty"`
	// TargetLink is what the link spawn made at the worktree's root,
	// target, points to (see own.go); empty when it made none, and then
	// TargetLinkSkipped says why.
	TargetLink        string `json:"target_link,omitempty"`
	TargetLinkSkipped string `json:"target_link_skipped,omitempty"`
	// TargetLinks, when set, are the names of the links in the directory
	// spawn made at the worktree's target instead of one link (where the
	// ignore rules ignore target only as a directory): each name links to
	// the same name under TargetLink.
	TargetLinks []string `json:"target_links,omitempty"`
	// Remap is set for an agent in remap mode (see remap.go): spawned
	// without the namespace from a base built in remap mode.
	Remap *Remap `json:"remap,omitempty"`
	// Confinement is what the agent's sandbox makes of the rest of the
	// host, decided at spawn (confine.Decide) and followed by every
	// session: nil in a record older than the field, whose sandbox seals
	// the store alone, and for an agent that builds at host paths.
	Confinement *confine.Record `json:"confinement,omitempty"`
	// FreshnessEnv is the variables of the base's freshness mode
	// (base.Record.FreshnessEnv, copied at spawn): every cargo call of
	// the agent gets them in place of inherited ones. Empty in mtime mode.
	FreshnessEnv []string `json:"freshness_env,omitempty"`

	Stamp   StampStats `json:"stamp"`
	Fork    ForkStats  `json:"fork"`
	Timings Timings    `json:"timings"`
}

// StampStats summarizes the stamping pass.
type StampStats struct {
	Files     int `json:"files"`
	Dirs      int `json:"dirs"`
	Skipped   int `json:"skipped"`
	Freshened int `json:"freshened"`
}

// ForkStats summarizes the fork of the base target.
type ForkStats struct {
	Files int   `json:"files"`
	Dirs  int   `json:"dirs"`
	Bytes int64 `json:"bytes"`
	// Relocated is what the relocation plan removed from the fork, when
	// the agent builds at other paths than its base did.
	Relocated *Relocated `json:"relocated,omitempty"`
	// LinkRebuilds are the Cargo dep-info files (relative to the target)
	// spawn emptied under the link_rebuilds rule.
	LinkRebuilds []string `json:"link_rebuilds,omitempty"`
}

// Relocated is what the relocation plan removed from a fork (paths, files,
// bytes), and Rebuilds how many units (fingerprint dirs) the agent's first
// build compiles again because of it: those removed and what depends on
// them.
type Relocated struct {
	relocate.Applied
	Rebuilds int `json:"rebuilds"`
}

// HostPaths reports whether the agent builds without the namespace
// sandbox, at its own host paths.
func (r *Record) HostPaths() bool { return r.Isolation == sandbox.IsolationOff }

// Timings are seconds per spawn phase.
type Timings struct {
	Worktree float64 `json:"worktree"`
	Stamp    float64 `json:"stamp"`
	Fork     float64 `json:"fork"`
	Sync     float64 `json:"sync"` // making the fork durable before the record says ready
	Total    float64 `json:"total"`
}

// Read returns agent name's record; an error wrapping fs.ErrNotExist when
// there is no such agent, and a *failure.DamagedError, with the fix, when
// its agent.json cannot be read.
func Read(s *store.Store, name string) (*Record, error) {
	var r Record
	if err := atomicfile.ReadJSON(s.Agent(name).Record, &r); err != nil {
		if d := failure.AsDamaged(err); d != nil {
			d.Fix = damagedFix(name)
		}
		return nil, err
	}
	return &r, nil
}

// damagedFix is the hint for agent name whose record is damaged.
func damagedFix(name string) string {
	return fmt.Sprintf("`ferry rm --force %s` removes what Ferry keeps of it (its fork, and the worktree's ./%s link when it still leads there); its worktree and branch stay, for you to keep or remove", name, TargetLink)
}

func write(s *store.Store, r *Record) error {
	return atomicfile.WriteJSON(s.Agent(r.Name).Record, r, 0o644)
}

// All returns every readable agent record in the store, by name: a
// damaged one is left out (Scan names them).
func All(s *store.Store) ([]*Record, error) {
	all, _, err := Scan(s)
	return all, err
}

// Scan returns every readable agent record in the store, by name, and the
// records that cannot be read (failure.DamagedError), by name too.
func Scan(s *store.Store) ([]*Record, []*failure.DamagedError, error) {
	ents, err := os.ReadDir(s.AgentsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var out []*Record
	var damaged []*failure.DamagedError
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		r, err := Read(s, e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue // a directory without a record: gc's to remove
		}
		if d := failure.AsDamaged(err); d != nil {
			damaged = append(damaged, d)
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, damaged, nil
}

// validName is compiled on first use, not at start: the shim links this
// package and starts twice on every cargo call (itself and its sandbox
// child), and compiling it took 0.28 ms of each start (GODEBUG=inittrace=1).
var validName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`) })

// CheckName refuses names that cannot be a directory and a branch.
func CheckName(name string) error {
	if !validName().MatchString(name) || strings.Contains(name, "..") || strings.HasSuffix(name, ".lock") || strings.HasSuffix(name, ".") {
		return failure.New(failure.Usage,
			"use letters, digits, '.', '_' and '-' (at most 64, starting with a letter or digit), e.g. fix-parser-2",
			"bad agent name %q", name)
	}
	return nil
}

// Busy reports whether processes run for the agent: every process run for an
// agent holds busy.lock shared, and its backend may count more (an overlay
// agent's are also those holding mount.lock or, in a nested namespace,
// still seeing the overlay).
func Busy(s *store.Store, name string) (bool, error) {
	if _, err := os.Stat(s.Agent(name).Busy); err == nil {
		held, err := lock.Held(s.Agent(name).Busy)
		if held || err != nil {
			return held, err
		}
	}
	r, err := Read(s, name)
	if err != nil {
		return false, nil
	}
	b, err := backendOf(r)
	if err != nil {
		return false, nil
	}
	return len(b.Users(forkOf(s, r, nil))) > 0, nil
}

// HoldBusy takes busy.lock shared for a process run for the agent. The
// caller passes the returned lock's file to the child so the lock lives as
// long as the child and its descendants.
func HoldBusy(s *store.Store, name string) (*lock.Lock, error) {
	return lock.Shared(s.Agent(name).Busy)
}

// FindByWorktree returns the agent whose worktree is exactly dir (compared
// by device and inode, so a bind mount of it counts), or nil.
func FindByWorktree(s *store.Store, dir string) (*Record, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	// Spawn names an agent's worktree after the agent: read that record
	// first, so the shim (which asks on every cargo call) reads one record
	// instead of every agent's. Its worktree must be exactly dir; anything
	// else (a worktree named otherwise, a bind mount) takes the scan.
	if name := filepath.Base(dir); name != "." && name != ".." && name != string(filepath.Separator) {
		r, err := Read(s, name)
		if err == nil && r.Name == name && r.Worktree == dir {
			return r, nil
		}
		if d := failure.AsDamaged(err); d != nil && linksInto(filepath.Join(dir, TargetLink), s.Agent(name).Dir) {
			// Its record cannot say, but its target link leads into
			// the agent's directory: it is that agent's worktree.
			return nil, err
		}
	}
	all, err := All(s)
	if err != nil {
		return nil, err
	}
	for _, r := range all {
		if r.Worktree == dir {
			return r, nil
		}
		if wi, err := os.Stat(r.Worktree); err == nil && os.SameFile(fi, wi) {
			return r, nil
		}
	}
	return nil, nil
}

// ErrNotReady is an agent that exists but was not fully created.
func notReady(r *Record) error {
	return failure.New(failure.Refused,
		fmt.Sprintf("its spawn did not finish; remove it with `ferry rm --force %s` (or run `ferry gc`) and spawn it again", r.Name),
		"agent %q is not fully created (state %q)", r.Name, r.State)
}

// Get returns a ready agent, refusing one that is not fully created.
func Get(s *store.Store, name string) (*Record, error) {
	r, err := Read(s, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, failure.New(failure.Usage, "list agents with `ferry list`", "no agent named %q", name)
	}
	if err != nil {
		return nil, err
	}
	if r.State != Ready {
		return nil, notReady(r)
	}
	return r, nil
}

// maxCleanBase leaves room for the suffix CleanName adds to make a name
// unique.
const maxCleanBase = 60

var notNameChars = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^A-Za-z0-9._-]+`) })

// CleanName makes name fit CheckName: every run of characters outside
// letters, digits, '.', '_' and '-' becomes one '-', and what cannot start
// or end a name is trimmed; a name that leaves nothing is fallback
// (returned as it is when it is "" too). n > 1 appends "-n".
func CleanName(name, fallback string, n int) string {
	base := notNameChars().ReplaceAllString(name, "-")
	for strings.Contains(base, "..") {
		base = strings.ReplaceAll(base, "..", ".")
	}
	base = trimEnd(strings.TrimLeft(base, "._-"))
	if base == "" {
		base = fallback
	}
	if base == "" {
		return ""
	}
	if len(base) > maxCleanBase {
		base = trimEnd(base[:maxCleanBase])
	}
	if n > 1 {
		base = fmt.Sprintf("%s-%d", base, n)
	}
	return base
}

// trimEnd removes what a name cannot end with: '.', and ".lock" (git's
// lock files), and also '-' and '_', which only look like leftovers.
func trimEnd(s string) string {
	for {
		t := strings.TrimRight(s, "._-")
		t = strings.TrimSuffix(t, ".lock")
		if t == s {
			return s
		}
		s = t
	}
}
