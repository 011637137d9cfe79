package record

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

// AgentFormat versions agent.json.
const AgentFormat = 1

// States of an agent.
const (
	Creating = "creating"
	Ready    = "ready"
	// Damaged is not a state any record holds: it is how ferry list
	// shows an agent whose record cannot be read.
	Damaged = "damaged"
)

// TargetLink is the name, at the worktree root as git status names it, of
// the link spawn makes there to the agent's build output (see package
// agent's own.go).
const TargetLink = "target"

// Agent is agent.json.
type Agent struct {
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
	// (agent.Adopt): the worktree and its branch are not Ferry's to
	// remove.
	Adopted bool `json:"adopted,omitempty"`
	// PlacedLockfile is the digest ("sha256:<hex>") of the Cargo.lock spawn
	// copied from the base into a worktree whose commit tracks none; empty
	// when it placed none (or for a record older than this field). rm does
	// not count that file as the agent's work while it is unchanged.
	PlacedLockfile string `json:"placed_lockfile,omitempty"`
	// Placed are the files spawn placed in the worktree for the agent's
	// tool (agent.SpawnOptions.Place), by path relative to the worktree
	// as git status names it, with the digest of what it wrote: not the
	// agent's work while unchanged.
	Placed map[string]string `json:"placed,omitempty"`
	// Tool and Session name the agent tool that had the agent created
	// through a hook ("claude-code", and the tool's session id), empty for
	// `ferry spawn`. gc reaps only such agents, once abandoned.
	Tool    string `json:"tool,omitempty"`
	Session string `json:"session,omitempty"`
	// TargetLink is what the link spawn made at the worktree's root,
	// target, points to (see package agent's own.go); empty when it made
	// none, and then TargetLinkSkipped says why.
	TargetLink        string `json:"target_link,omitempty"`
	TargetLinkSkipped string `json:"target_link_skipped,omitempty"`
	// TargetLinks, when set, are the names of the links in the directory
	// spawn made at the worktree's target instead of one link (where the
	// ignore rules ignore target only as a directory): each name links to
	// the same name under TargetLink.
	TargetLinks []string `json:"target_links,omitempty"`
	// Remap is set for an agent in remap mode (see package agent's
	// remap.go): spawned without the namespace from a base built in remap
	// mode.
	Remap *Remap `json:"remap,omitempty"`
	// Confinement is what the agent's sandbox makes of the rest of the
	// host, decided at spawn (confine.Decide) and followed by every
	// session: nil in a record older than the field, whose sandbox seals
	// the store alone, and for an agent that builds at host paths.
	Confinement *Confinement `json:"confinement,omitempty"`
	// FreshnessEnv is the variables of the base's freshness mode
	// (base.Record.FreshnessEnv, copied at spawn): every cargo call of
	// the agent gets them in place of inherited ones. Empty in mtime mode.
	FreshnessEnv []string `json:"freshness_env,omitempty"`

	Stamp   StampStats   `json:"stamp"`
	Fork    ForkStats    `json:"fork"`
	Timings SpawnTimings `json:"timings"`
}

// HostPaths reports whether the agent builds without the namespace
// sandbox, at its own host paths.
func (r *Agent) HostPaths() bool { return r.Isolation == sandbox.IsolationOff }

// Remap is what agent.json records of remap mode.
type Remap struct {
	Link    string `json:"link"`    // where <worktree>/.ferry-target leads: the fork
	Channel string `json:"channel"` // the base toolchain's channel, for ferry-rustc (toolchain.Channel)
	// Wrapper is ferry-rustc as the base's build named it (the store's
	// RemapWrapper, spelled as the commands saw the store parent): Cargo
	// keys its rustc-info cache on the wrapper's path.
	Wrapper string `json:"wrapper"`
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
	Applied
	Rebuilds int `json:"rebuilds"`
}

// SpawnTimings are seconds per spawn phase.
type SpawnTimings struct {
	Worktree float64 `json:"worktree"`
	Stamp    float64 `json:"stamp"`
	Fork     float64 `json:"fork"`
	Sync     float64 `json:"sync"` // making the fork durable before the record says ready
	Total    float64 `json:"total"`
}

// ReadAgent returns agent name's record; an error wrapping fs.ErrNotExist
// when there is no such agent, and a *failure.DamagedError, with the fix,
// when its agent.json cannot be read.
func ReadAgent(s *store.Store, name string) (*Agent, error) {
	return read[Agent](s.Agent(name).Record, func() string { return agentFix(name) })
}

// agentFix is the hint for agent name whose record is damaged.
func agentFix(name string) string {
	return fmt.Sprintf("`ferry rm --force %s` removes what Ferry keeps of it (its fork, and the worktree's ./%s link when it still leads there); its worktree and branch stay, for you to keep or remove", name, TargetLink)
}

// Agents returns every readable agent record in the store, by name: a
// damaged one is left out (ScanAgents names them).
func Agents(s *store.Store) ([]*Agent, error) {
	all, _, err := ScanAgents(s)
	return all, err
}

// ScanAgents returns every readable agent record in the store, by name,
// and the records that cannot be read (failure.DamagedError), by name too.
func ScanAgents(s *store.Store) ([]*Agent, []*failure.DamagedError, error) {
	ents, err := os.ReadDir(s.AgentsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var out []*Agent
	var damaged []*failure.DamagedError
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		r, err := ReadAgent(s, e.Name())
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

// FindByWorktree returns the agent whose worktree is exactly dir (compared
// by device and inode, so a bind mount of it counts), or nil.
func FindByWorktree(s *store.Store, dir string) (*Agent, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	// Spawn names an agent's worktree after the agent: read that record
	// first, so the shim (which asks on every cargo call) reads one record
	// instead of every agent's. Its worktree must be exactly dir; anything
	// else (a worktree named otherwise, a bind mount) takes the scan.
	if name := filepath.Base(dir); name != "." && name != ".." && name != string(filepath.Separator) {
		r, err := ReadAgent(s, name)
		if err == nil && r.Name == name && r.Worktree == dir {
			return r, nil
		}
		if d := failure.AsDamaged(err); d != nil && LinksInto(filepath.Join(dir, TargetLink), s.Agent(name).Dir) {
			// Its record cannot say, but its target link leads into
			// the agent's directory: it is that agent's worktree.
			return nil, err
		}
	}
	all, err := Agents(s)
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

// NotReady is the error for agent r, which exists but was not fully
// created.
func NotReady(r *Agent) error {
	return failure.New(failure.Refused,
		fmt.Sprintf("its spawn did not finish; remove it with `ferry rm --force %s` (or run `ferry gc`) and spawn it again", r.Name),
		"agent %q is not fully created (state %q)", r.Name, r.State)
}

// LinksTo reports whether path is a symbolic link to dest: whether a link
// a record names is still as Ferry made it.
func LinksTo(path, dest string) bool {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return false
	}
	d, err := os.Readlink(path)
	return err == nil && d == dest
}

// LinksInto reports whether path is a target link Ferry made into dir (an
// agent's directory): a symbolic link to dir or below it, or a directory
// whose entries are all such links. It tells an agent's worktree whose
// record cannot be read.
func LinksInto(path, dir string) bool {
	// The link's own text, not where it resolves: an overlay agent's
	// leads on into its live namespace, or nowhere.
	into := func(p string) bool {
		d, err := os.Readlink(p)
		return err == nil && strings.HasPrefix(filepath.Clean(d)+"/", filepath.Clean(dir)+"/")
	}
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return false
	case fi.Mode()&fs.ModeSymlink != 0:
		return into(path)
	case !fi.IsDir():
		return false
	}
	ents, err := os.ReadDir(path)
	if err != nil || len(ents) == 0 {
		return false
	}
	for _, e := range ents {
		if !into(filepath.Join(path, e.Name())) {
			return false
		}
	}
	return true
}
