// Package share carries ready bases between hosts through a JetStream
// object store bucket: a build host publishes a base, a runner pulls it
// into its own store instead of building it.
//
// An object holds one base as a zstd-compressed tar stream: base.json,
// relocation.json when the base has one, the checkout (every file and
// directory with its mtime to the nanosecond, which agents' stamping
// compares against; not the .git link) and the target. Its name is the
// base id (<commit>-<fingerprint>, the same on every host with the same
// toolchain, warm commands and modes), and its metadata (Meta) says what
// the base was built with, where (the store path its target recorded) and
// the SHA-256 of the object (the compressed stream), written once the
// upload is complete: an object without a digest is still being published
// and is never pulled.
//
// Deduplication: a base refreshed from a seed base shares most of its
// target with it (on the large bench workspace 2-4% of a refresh's target
// is new content). Its publisher also stores a delta object, a stream in
// which each target file with the seed's content at the same path holds
// only that content's SHA-256; a runner with the seed ready (and not
// relocated) pulls the delta and copies those files from its seed,
// checking each against its digest, and installs the base exactly as from
// the full object.
//
// A pull installs exactly like a local build finishes: it takes the base
// lock, extracts into the base directory (a directory without base.json is
// a partial base, which the next build or pull and gc discard), checks the
// digest, relocates the target when the publisher's store path differs
// (the dead plan of package relocate: the units that recorded the
// publisher's paths are removed, and the first build rebuilds them), seals
// the target and writes base.json last. A pull is refused, naming the
// difference, when the published base was built with another toolchain,
// other warm commands or other modes than this host would use.
//
// Trust: a pulled base runs code on the runner (build scripts' output, the
// compiled program). Pull reads only the configured bucket, over a
// connection that authenticated (a token, a user or credentials): see
// deploy/nats/sharing.conf and deploy/README.md for TLS and per-role
// permissions. And it installs only a base whose metadata is signed by a
// key the runner trusts (sign.go).
package share

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/failure"
)

// DefaultBucket is the object store bucket bases are published to.
const DefaultBucket = "ferry-bases"

// Format versions the object's layout and Meta. Format 1 had the digest
// of the uncompressed stream; 2 has the object's.
const Format = 2

// metaKey is the object metadata key holding Meta as JSON. The other keys
// (commit, fingerprint, rustc, store, digest) repeat its main fields for
// whoever looks with the nats CLI.
const metaKey = "ferry-meta"

// Meta describes a published base.
type Meta struct {
	Format      int            `json:"format"`
	BaseID      string         `json:"base_id"`
	Commit      string         `json:"commit"`
	Fingerprint string         `json:"fingerprint"`
	Toolchain   base.Toolchain `json:"toolchain"`
	Warm        []string       `json:"warm"`
	Modes       base.Modes     `json:"modes"`
	// Store is the store dir as the base's build recorded it (its
	// canonical mountpoints are below it), and GitDir its checkout's git
	// dir: the roots of the dead relocation plan on a host whose store
	// path differs.
	Store      string `json:"store"`
	GitDir     string `json:"git_dir"`
	Relocation bool   `json:"relocation"` // the object holds relocation.json
	// Entries and Bytes are the target's (as in its seal); Stream the
	// uncompressed tar stream's size and Compressed the object's.
	Entries    int    `json:"entries"`
	Bytes      int64  `json:"bytes"`
	Stream     int64  `json:"stream"`
	Compressed int64  `json:"compressed"`
	Level      string `json:"level"` // the zstd level it was compressed with
	// Digest is the SHA-256 of the object (the compressed stream), empty
	// while the upload runs.
	Digest    string    `json:"digest"`
	Host      string    `json:"host"` // the publishing host's name
	Published time.Time `json:"published"`
	// Delta is the object holding the base as a delta against the base it
	// was seeded from, when it was published with one.
	Delta *Delta `json:"delta,omitempty"`
}

// Delta describes a base's delta object: a stream like the full object's
// in which each target file whose content is the seed's file at the same
// path names that content's SHA-256 instead of holding it. A runner that
// has the seed ready pulls it instead of the full object.
type Delta struct {
	Object     string `json:"object"`
	Seed       string `json:"seed"`   // the seed base's id
	Digest     string `json:"digest"` // the delta object's SHA-256
	Stream     int64  `json:"stream"`
	Compressed int64  `json:"compressed"`
	// Seeded and SeededBytes are the target files taken from the seed.
	Seeded      int   `json:"seeded"`
	SeededBytes int64 `json:"seeded_bytes"`
}

// metadata is m as object metadata, signed by signer.
func (m *Meta) metadata(signer *Signer) map[string]string {
	b, _ := json.Marshal(m)
	md := map[string]string{
		metaKey:       string(b),
		"commit":      m.Commit,
		"fingerprint": m.Fingerprint,
		"rustc":       m.Toolchain.RustcVersion,
		"store":       m.Store,
		"bytes":       strconv.FormatInt(m.Bytes, 10),
		"digest":      m.Digest,
	}
	signer.sign(md)
	return md
}

// decodeMeta reads Meta from an object's metadata.
func decodeMeta(md map[string]string) (*Meta, error) {
	s, ok := md[metaKey]
	if !ok {
		return nil, fmt.Errorf("no %s metadata: not an object Ferry published", metaKey)
	}
	var m Meta
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("read its %s metadata: %w", metaKey, err)
	}
	if m.Format > Format {
		return nil, fmt.Errorf("published by a newer Ferry (object format %d; this one reads %d)", m.Format, Format)
	}
	return &m, nil
}

// OldFormatError is a published base whose object this Ferry no longer
// reads (its digest is of another stream).
type OldFormatError struct {
	ID     string
	Format int
}

func (e *OldFormatError) Error() string {
	return fmt.Sprintf("the published base %s is of object format %d, published by an older Ferry; this one reads format %d", e.ID, e.Format, Format)
}

// current refuses an object of an older format than this Ferry reads.
func (m *Meta) current() error {
	if m.Format < Format {
		return failure.Wrap(failure.Refused, &OldFormatError{ID: m.BaseID, Format: m.Format},
			"publish the base again with this Ferry on its build host (`ferry base --publish --rev "+short(m.Commit)+"`), then pull again",
			"nothing to pull")
	}
	return nil
}

// warmCommands lists the commands of ws.
func warmCommands(ws []base.WarmCommand) []string {
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		if w.Demanded == 0 { // learned on the host that built it, not part of the fingerprint
			out = append(out, w.Command)
		}
	}
	return out
}
