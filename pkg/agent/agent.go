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
// must hold before removing it belong to the lifecycle of the fork backend
// the agent recorded at spawn (package lifecycle, which also holds the
// overlay's join-or-create protocol). This package, and package session for
// the commands run for an agent, add what every agent shares (the
// worktree's bind mount, the sealed store, busy.lock), ask the backend for
// the rest and never compare backend names. agent.json's format and its
// readers are package record's: the shim, on every cargo call, links those
// two packages and not this one.
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
	"regexp"
	"strings"
	"sync"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/session"
	"github.com/ferrydev/ferry/pkg/store"
)

// Format versions agent.json.
const Format = record.AgentFormat

// States of an agent (record.Ready and its neighbours).
const (
	Creating = record.Creating
	Ready    = record.Ready
	Damaged  = record.Damaged
)

// agent.json's format is package record's, so that the shim reads it
// without linking this package; the aliases keep its names here for spawn,
// rm and their callers.
type (
	// Record is agent.json.
	Record     = record.Agent
	StampStats = record.StampStats
	ForkStats  = record.ForkStats
	Relocated  = record.Relocated
	Timings    = record.SpawnTimings
)

// Read returns agent name's record (record.ReadAgent).
func Read(s *store.Store, name string) (*Record, error) { return record.ReadAgent(s, name) }

func write(s *store.Store, r *Record) error {
	return atomicfile.WriteJSON(s.Agent(r.Name).Record, r, 0o644)
}

// All returns every readable agent record in the store, by name
// (record.Agents).
func All(s *store.Store) ([]*Record, error) { return record.Agents(s) }

// Scan returns every readable agent record in the store and the errors of
// those that cannot be read (record.ScanAgents).
func Scan(s *store.Store) ([]*Record, []*failure.DamagedError, error) { return record.ScanAgents(s) }

// validName is compiled on first use, not at start: compiling it took
// 0.28 ms of each start (GODEBUG=inittrace=1), which every binary linking
// this package would pay whether or not it checks a name.
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
	b, err := session.Lifecycle(r)
	if err != nil {
		return false, nil
	}
	return len(b.Users(session.Fork(s, r, nil))) > 0, nil
}

// HoldBusy takes busy.lock shared for a process run for the agent
// (session.HoldBusy).
func HoldBusy(s *store.Store, name string) (*lock.Lock, error) { return session.HoldBusy(s, name) }

// FindByWorktree returns the agent whose worktree is exactly dir, or nil
// (record.FindByWorktree).
func FindByWorktree(s *store.Store, dir string) (*Record, error) {
	return record.FindByWorktree(s, dir)
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
		return nil, record.NotReady(r)
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
