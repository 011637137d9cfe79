// Package events defines the facts Ferry's stages announce on the bus.
//
// The store on disk is the truth; an event only says that the truth changed,
// and is published after the change is durable. Each event is one Go type
// with a shared Header (a versioned type such as "ferry.base.ready.v1", a
// unique id, the time, the repository's store key and the host) and a typed
// payload. Events travel as JSON on the subject ferry.<repo-token>.<kind>
// (see Subject).
//
// Compatibility: decoding ignores unknown fields, so a newer producer may add
// fields within a version. A type this package does not know (another kind,
// or another version of a known kind) decodes to an *UnknownTypeError, and
// bytes that are not a valid event decode to a *MalformedError; consumers
// log and terminate such messages (see Undecodable) and keep serving.
//
// This package imports neither NATS nor anything heavy: stages that only
// build events stay light. The bus lives in pkg/bus.
package events

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Kind names what happened, e.g. "base.ready". It is the tail of the subject
// and the middle of the versioned type.
type Kind string

// The kinds of event, one per Go type.
const (
	KindCommitSeen   Kind = "commit.seen"   // *CommitSeen
	KindBaseBuilding Kind = "base.building" // *BaseBuilding
	KindBaseReady    Kind = "base.ready"    // *BaseReady
	KindBaseFailed   Kind = "base.failed"   // *BaseFailed
	KindAgentSpawned Kind = "agent.spawned" // *AgentSpawned
	KindAgentRemoved Kind = "agent.removed" // *AgentRemoved
	KindGCCollected  Kind = "gc.collected"  // *GCCollected
)

// kinds maps each kind to the one version this Ferry reads and writes and to
// a constructor of its Go type. A new version of a kind is a new entry here
// only when its meaning changes incompatibly; adding fields does not need one.
var kinds = map[Kind]struct {
	version int
	make    func() Event
}{
	KindCommitSeen:   {1, func() Event { return new(CommitSeen) }},
	KindBaseBuilding: {1, func() Event { return new(BaseBuilding) }},
	KindBaseReady:    {1, func() Event { return new(BaseReady) }},
	KindBaseFailed:   {1, func() Event { return new(BaseFailed) }},
	KindAgentSpawned: {1, func() Event { return new(AgentSpawned) }},
	KindAgentRemoved: {1, func() Event { return new(AgentRemoved) }},
	KindGCCollected:  {1, func() Event { return new(GCCollected) }},
}

// Kinds returns every known kind, sorted.
func Kinds() []Kind {
	out := make([]Kind, 0, len(kinds))
	for k := range kinds {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Known reports whether k is a kind this Ferry knows.
func (k Kind) Known() bool { _, ok := kinds[k]; return ok }

// Version is the version of k this Ferry reads and writes (0 if unknown).
func (k Kind) Version() int { return kinds[k].version }

// Type is the versioned type of k, e.g. "ferry.base.ready.v1".
func (k Kind) Type() string { return TypeOf(k, k.Version()) }

// TypeOf spells the versioned type of kind k at version v.
func TypeOf(k Kind, v int) string { return "ferry." + string(k) + ".v" + strconv.Itoa(v) }

// ParseType splits a type "ferry.<kind>.v<N>" into its kind and version
// without requiring the kind to be known (outbox forwarding needs the subject
// of events a newer Ferry wrote). ok is false when t does not have that shape.
func ParseType(t string) (k Kind, version int, ok bool) {
	rest, found := strings.CutPrefix(t, "ferry.")
	if !found {
		return "", 0, false
	}
	i := strings.LastIndex(rest, ".v")
	if i <= 0 {
		return "", 0, false
	}
	v, err := strconv.Atoi(rest[i+2:])
	if err != nil || v <= 0 || strconv.Itoa(v) != rest[i+2:] {
		return "", 0, false
	}
	k = Kind(rest[:i])
	if !validKind(string(k)) {
		return "", 0, false
	}
	return k, v, true
}

// Header is what every event carries. Its JSON fields sit beside the
// payload's in one flat object.
type Header struct {
	// Type is the versioned type, e.g. "ferry.base.ready.v1".
	Type string `json:"type"`
	// ID is unique per event and doubles as the Nats-Msg-Id, so a repeated
	// publish of the same event (an outbox forwarded twice) is dropped by
	// JetStream. It is also the event's outbox file name.
	ID string `json:"id"`
	// Time is when the state change became durable.
	Time time.Time `json:"time"`
	// RepoKey is the repository's store key (store.Key), e.g. "repo-1a2b3c4d5e6f".
	RepoKey string `json:"repo_key"`
	// Host is the name of the machine whose store changed.
	Host string `json:"host"`
}

// EventHeader returns h; through embedding it gives every event its header.
func (h *Header) EventHeader() *Header { return h }

// Event is one of this package's event types (always a pointer, such as
// *BaseReady). The interface is sealed: only this package defines events.
type Event interface {
	// Kind says which event this is.
	Kind() Kind
	// EventHeader returns the event's header, for reading or filling.
	EventHeader() *Header
	// check validates the payload.
	check() []string
}

// Stamp fills e's header for an event about the repository with store key
// repoKey happening now: the type of e's kind, a fresh ID, the current time
// and this host's name. It returns e, so a producer writes
//
//	ev := events.Stamp(&events.BaseReady{BaseID: id, Commit: c, Fingerprint: fp}, s.Key)
func Stamp[E Event](e E, repoKey string) E {
	h := e.EventHeader()
	h.Type = e.Kind().Type()
	h.ID = NewID()
	h.Time = time.Now().UTC()
	h.RepoKey = repoKey
	h.Host = hostname()
	return e
}

// NewID returns a fresh event id: 16 hex digits of the current Unix time in
// nanoseconds, then 16 random hex digits. Ids sort by creation time on one
// host, which orders outbox forwarding.
func NewID() string {
	var b [16]byte
	now := uint64(time.Now().UnixNano())
	for i := 0; i < 8; i++ {
		b[i] = byte(now >> (56 - 8*i))
	}
	if _, err := rand.Read(b[8:]); err != nil {
		// crypto/rand does not fail on Linux; if it ever does, the pid keeps
		// two processes apart and the time keeps one process's ids apart.
		pid := uint64(os.Getpid())
		for i := 0; i < 8; i++ {
			b[8+i] = byte(pid >> (56 - 8*i))
		}
	}
	return hex.EncodeToString(b[:])
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown"
	}
	return h
}

// The shapes below are checked by hand, not with regexp: bounded
// repetitions compile to large programs, and a package-level regexp would
// cost every one-shot command about a millisecond at start-up.

func isAlnum(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
}

// ValidID reports whether id can be an event id, usable as a Nats-Msg-Id and
// as a file name: 1 to 128 of [A-Za-z0-9_-], starting with a letter or digit.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 128 || !isAlnum(id[0]) {
		return false
	}
	for i := 1; i < len(id); i++ {
		if c := id[i]; !isAlnum(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// ValidRepoKey reports whether key can be a store key: 1 to 255 of the
// characters of store.Key ([A-Za-z0-9._-]), not starting with '.' or '-', so
// never "." or ".." (outbox files live under <parent>/<key>).
func ValidRepoKey(key string) bool {
	if len(key) == 0 || len(key) > 255 || key[0] == '.' || key[0] == '-' {
		return false
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; !isAlnum(c) && c != '_' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

// validCommit reports whether s is a full lower-case SHA-1 or SHA-256 object name.
func validCommit(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// validKind reports whether k has the shape of any kind: dot-separated
// tokens of [a-z0-9-], each starting with a letter.
func validKind(k string) bool {
	if k == "" {
		return false
	}
	for _, tok := range strings.Split(k, ".") {
		if tok == "" || tok[0] < 'a' || tok[0] > 'z' {
			return false
		}
		for i := 1; i < len(tok); i++ {
			if c := tok[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

func (h *Header) check(k Kind) []string {
	var p []string
	switch {
	case h.Type == "":
		p = append(p, "type is missing")
	case h.Type != k.Type():
		p = append(p, fmt.Sprintf("type %q does not match kind %s (want %q)", h.Type, k, k.Type()))
	}
	if !ValidID(h.ID) {
		p = append(p, fmt.Sprintf("id %q is not 1-128 of [A-Za-z0-9_-]", h.ID))
	}
	if h.Time.IsZero() {
		p = append(p, "time is missing")
	}
	if !ValidRepoKey(h.RepoKey) {
		p = append(p, fmt.Sprintf("repo_key %q is not a store key", h.RepoKey))
	}
	if h.Host == "" {
		p = append(p, "host is missing")
	}
	return p
}
