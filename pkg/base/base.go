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
	"sort"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/base/fold"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/store"
	"github.com/ferrydev/ferry/pkg/toolchain"
)

// Format versions the base record and the fingerprint inputs. Raising it
// gives every base a new id, so no base built under older rules is reused.
// Format 2 records the target's seal.
const Format = 2

// The types of base.json's fields are package record's, so that the shim
// reads base.json without linking this package; the aliases keep their
// names here for the code that builds and lists bases.
type (
	Modes       = record.Modes
	Toolchain   = record.Toolchain
	WarmCommand = record.WarmCommand
	Timings     = record.BuildTimings
	PullRecord  = record.Pull
	PruneCount  = record.PruneCount
	StampCount  = record.StampCount
)

// Record is base.json (record.Base) and what a build keeps of the base
// while it builds.
type Record struct {
	record.Base
	// layer is, while a layered refresh's warm build writes into an
	// overlay, its layers (layer.go); nil otherwise.
	layer *fold.Layers
	// reuse is, while a refresh builds, the seed whose content digests
	// its seal may take (contents.go); nil otherwise.
	reuse *Reuse
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
// fs.ErrNotExist when the base is not ready (record.ReadBase, which gives a
// damaged record its fix).
func Read(s *store.Store, id string) (*Record, error) {
	b, err := record.ReadBase(s, id)
	if err != nil {
		return nil, err
	}
	return &Record{Base: *b}, nil
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
