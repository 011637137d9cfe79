package events

import "fmt"

// CommitSeen: ferry-watch saw the watched revision at a new commit on two
// polls in a row. Published on the commits stream, where only the newest per
// repository is kept.
type CommitSeen struct {
	Header
	// Commit is the full object name the revision resolved to.
	Commit string `json:"commit"`
	// Ref is the revision being watched, as given (e.g. "HEAD", "main").
	Ref string `json:"ref,omitempty"`
	// Previous is the commit seen before this one, if any.
	Previous string `json:"previous,omitempty"`
}

// BaseBuilding: a builder took the base lock and started building a base,
// cold or seeded.
type BaseBuilding struct {
	Header
	BaseID      string `json:"base_id"` // <commit>-<fingerprint>
	Commit      string `json:"commit"`
	Fingerprint string `json:"fingerprint"`
	// Seed is the base this build starts from; empty for a cold build.
	Seed string `json:"seed,omitempty"`
}

// BaseReady: base.json of a base was renamed into place (and, when Current,
// the base was made current). Also published when an existing ready base is
// reused (Reused).
type BaseReady struct {
	Header
	BaseID      string   `json:"base_id"`
	Commit      string   `json:"commit"`
	Fingerprint string   `json:"fingerprint"`
	Current     bool     `json:"current"`            // made the repository's current base
	Reused      bool     `json:"reused"`             // an existing ready base, nothing built
	Seconds     float64  `json:"seconds"`            // wall time of the build
	Warnings    []string `json:"warnings,omitempty"` // as in base.json
	// Seed is the base the build started from (empty for a cold build),
	// and SeedSeconds how long that base's own build took: the refresh's
	// saving is SeedSeconds against Seconds.
	Seed        string  `json:"seed,omitempty"`
	SeedSeconds float64 `json:"seed_seconds,omitempty"`
	// SeedBy is how the build started from its seed's target: "reflink",
	// "layer" (an overlay over it, folded into hard links) or "copy".
	SeedBy string `json:"seed_by,omitempty"`
	// Incomplete is base.json's incomplete: what the warm build left
	// unbuilt (targets that did not compile, a clippy command that failed),
	// so a consumer can tell a base that is warm for every target.
	Incomplete []string `json:"incomplete,omitempty"`
	// Object names the base's object in the bases bucket when the
	// builder published it (ferry base --publish, [bus] share-bases).
	Object string `json:"object,omitempty"`
	// Warm is the base's warm set, and why each command is in it.
	Warm []WarmCommand `json:"warm,omitempty"`
}

// WarmCommand is a warm command of a base and why the base runs it:
// "default", "configured", or how often agents demanded it (Demanded
// calls within the window).
type WarmCommand struct {
	Command  string `json:"command"`
	Why      string `json:"why"`
	Demanded int    `json:"demanded,omitempty"`
}

// BaseFailed: a base build failed and was discarded; the current base was
// left alone.
type BaseFailed struct {
	Header
	// BaseID is empty when the build failed before its id was known (e.g. the
	// toolchain could not be detected).
	BaseID      string `json:"base_id,omitempty"`
	Commit      string `json:"commit"`
	Fingerprint string `json:"fingerprint,omitempty"`
	// Error is the failure as the command would print it (error and causes).
	Error string `json:"error"`
	// ExitKind is the failure's category as in --json output
	// (failure.Kind.String(): "build-failed", "blocked", …) and ExitCode the
	// exit code a one-shot ferry-base would have returned.
	ExitKind string `json:"exit_kind"`
	ExitCode int    `json:"exit_code"`
	// Command is the warm command that failed, when one did.
	Command string `json:"command,omitempty"`
}

// AgentSpawned: an agent's agent.json reached the ready state.
type AgentSpawned struct {
	Header
	Name        string `json:"name"`
	Branch      string `json:"branch"`
	Worktree    string `json:"worktree"`
	BaseID      string `json:"base_id"`
	Backend     string `json:"backend,omitempty"`
	StartCommit string `json:"start_commit,omitempty"`
}

// AgentRemoved: an agent's worktree, fork and state were removed.
type AgentRemoved struct {
	Header
	Name     string `json:"name"`
	Branch   string `json:"branch,omitempty"`
	Worktree string `json:"worktree,omitempty"`
	BaseID   string `json:"base_id,omitempty"` // the base it referenced, now maybe collectable
	Forced   bool   `json:"forced"`
	// OrphanRef keeps commits no branch reached (ferry rm --force).
	OrphanRef string `json:"orphan_ref,omitempty"`
	// Reaped is set when gc removed the agent as abandoned (a
	// hook-created agent; see package gc).
	Reaped bool `json:"reaped,omitempty"`
}

// GCCollected: a gc pass finished.
type GCCollected struct {
	Header
	DeletedBases     []string `json:"deleted_bases"`
	KeptBases        []string `json:"kept_bases,omitempty"`
	RolledBackAgents []string `json:"rolled_back_agents,omitempty"`
	// ReapedAgents are the abandoned hook-created agents it removed, each
	// also announced by its agent.removed.
	ReapedAgents []string `json:"reaped_agents,omitempty"`
}

func (*CommitSeen) Kind() Kind   { return KindCommitSeen }
func (*BaseBuilding) Kind() Kind { return KindBaseBuilding }
func (*BaseReady) Kind() Kind    { return KindBaseReady }
func (*BaseFailed) Kind() Kind   { return KindBaseFailed }
func (*AgentSpawned) Kind() Kind { return KindAgentSpawned }
func (*AgentRemoved) Kind() Kind { return KindAgentRemoved }
func (*GCCollected) Kind() Kind  { return KindGCCollected }

// problems collects what is wrong with a payload.
type problems []string

func (p *problems) required(field, v string) {
	if v == "" {
		*p = append(*p, field+" is missing")
	}
}

func (p *problems) commit(field, v string, required bool) {
	switch {
	case v == "" && required:
		*p = append(*p, field+" is missing")
	case v != "" && !validCommit(v):
		*p = append(*p, fmt.Sprintf("%s %q is not a full lower-case commit id", field, v))
	}
}

func (e *CommitSeen) check() []string {
	var p problems
	p.commit("commit", e.Commit, true)
	p.commit("previous", e.Previous, false)
	return p
}

func (e *BaseBuilding) check() []string {
	var p problems
	p.required("base_id", e.BaseID)
	p.commit("commit", e.Commit, true)
	p.required("fingerprint", e.Fingerprint)
	return p
}

func (e *BaseReady) check() []string {
	var p problems
	p.required("base_id", e.BaseID)
	p.commit("commit", e.Commit, true)
	p.required("fingerprint", e.Fingerprint)
	if e.Seconds < 0 {
		p = append(p, "seconds is negative")
	}
	return p
}

func (e *BaseFailed) check() []string {
	var p problems
	p.commit("commit", e.Commit, true)
	p.required("error", e.Error)
	p.required("exit_kind", e.ExitKind)
	return p
}

func (e *AgentSpawned) check() []string {
	var p problems
	p.required("name", e.Name)
	p.required("branch", e.Branch)
	p.required("worktree", e.Worktree)
	p.required("base_id", e.BaseID)
	p.commit("start_commit", e.StartCommit, false)
	return p
}

func (e *AgentRemoved) check() []string {
	var p problems
	p.required("name", e.Name)
	return p
}

func (e *GCCollected) check() []string {
	var p problems
	for _, id := range e.DeletedBases {
		p.required("deleted_bases[]", id)
	}
	for _, name := range e.ReapedAgents {
		p.required("reaped_agents[]", name)
	}
	return p
}
