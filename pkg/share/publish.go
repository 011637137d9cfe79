package share

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/store"
)

// Bucket says which object store bucket holds bases and its limits.
type Bucket struct {
	Name string // DefaultBucket when empty
	// MaxBytes bounds the bucket (JetStream refuses an object past it);
	// 0 means no bound.
	MaxBytes int64
	// Replicas is the bucket stream's replica count (3 on a three-node
	// cluster); 0 means 1.
	Replicas int
}

func (b Bucket) name() string {
	if b.Name != "" {
		return b.Name
	}
	return DefaultBucket
}

// open returns the bucket; create makes it (or updates its limits) first.
func (b Bucket) open(ctx context.Context, js jetstream.JetStream, create bool) (jetstream.ObjectStore, error) {
	if !create {
		obs, err := js.ObjectStore(ctx, b.name())
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, failure.Wrap(failure.Prereq, &UnavailableError{Bucket: b.name(), Why: "the bus has no such bucket: nothing was published there"},
				"publish a base from a build host first (`ferry base --publish`), or check [bus] bases-bucket", "nothing to pull")
		}
		if err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", b.name(), err)
		}
		return obs, nil
	}
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      b.name(),
		Description: "Ferry's ready bases, one object per base id",
		MaxBytes:    b.MaxBytes,
		Replicas:    max(b.Replicas, 1),
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("create bucket %s: %w", b.name(), err)
	}
	return obs, nil
}

// Level is the zstd level Publish compresses with. BenchmarkCompress on
// ripgrep 13's base (1,287 MB of target, a 1,048 MB stream once hard links
// are stored once; shared 2-core machine): fastest 10.3 s to 315 MB,
// default 10.6 s to 276 MB, better 47.6 s to 248 MB. Default costs nothing
// over fastest (reading and archiving the target dominate) and makes the
// object 12% smaller; better is 4.5 times slower for 10% more. On the
// large bench workspace's base (1,124 MB stream), with what a pull spends
// decompressing: fastest 285 MB, decoded in 2.2 s; default 5.9 s to
// 136 MB, 1.45 s; better 16.3 s to 88 MB, 1.3 s. Better would save a
// runner about 0.5 s of bus and decoder time per pull there, but every
// base would reach the fleet 10 s later: default it stays.
var Level = zstd.SpeedDefault

// TransferTimeout bounds one upload or download when the caller's
// context has no deadline. Without one the client bounds each chunk's
// acknowledgement by its default API timeout (5 s), which a bus fsyncing
// every message (the embedded one) on a busy disk overran, and a whole
// download by the same 5 s, which a 276 MB object (ripgrep's base) overran.
const TransferTimeout = time.Hour

func transferContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, TransferTimeout)
}

// Published is what Publish did.
type Published struct {
	Bucket  string  `json:"bucket"`
	Object  string  `json:"object"`
	Signer  string  `json:"signer"` // the public key it is signed with
	Meta    Meta    `json:"meta"`
	Seconds float64 `json:"seconds"`
}

// Publish uploads ready base r (checked against its seal first: a changed
// base is never shared) to the bucket, replacing an object of the same id,
// its metadata signed by signer (sign.go).
// A base seeded from a base still ready here gets a delta object as well
// (Meta.Delta), for the runners that hold the seed.
// The object's digest is written once the whole stream is stored, so a
// publisher that dies midway leaves an object no pull accepts.
func Publish(ctx context.Context, conn *bus.Conn, b Bucket, r *base.Record, signer *Signer) (*Published, error) {
	start := time.Now()
	if signer == nil {
		return nil, errors.New("publish: no signing key")
	}
	js := conn.JS
	m, err := newMeta(r)
	if err != nil {
		return nil, err
	}
	obs, err := b.open(ctx, js, true)
	if err != nil {
		return nil, err
	}

	ctx, cancel := transferContext(ctx)
	defer cancel()
	desc := fmt.Sprintf("Ferry base %s (commit %s, %s)", r.ID, r.Commit, r.Toolchain.CargoVersion)
	up, err := upload(ctx, obs, jetstream.ObjectMeta{Name: r.ID, Description: desc, Metadata: m.metadata(signer)}, r.Dir, "")
	if err != nil {
		return nil, failure.Wrap(failure.Internal, err, "check the bucket's limits ([bus] bases-max-bytes) and the bus's disk",
			"publish base %s to bucket %s", r.ID, b.name())
	}
	m.Digest, m.Stream, m.Compressed = up.digest, up.stream, up.compressed
	m.Published = time.Now().UTC()
	if err := updateMeta(ctx, obs, jetstream.ObjectMeta{Name: r.ID, Description: desc, Metadata: m.metadata(signer)}); err != nil {
		return nil, fmt.Errorf("publish base %s: record its digest: %w", r.ID, err)
	}
	if seed := seedOf(r); seed != "" {
		// The delta against the seed, for a runner that holds it; the
		// full object's metadata names it once it is stored.
		name := r.ID + DeltaSuffix
		dm := jetstream.ObjectMeta{Name: name, Description: fmt.Sprintf("Ferry base %s as a delta against base %s", r.ID, r.Seed),
			Metadata: map[string]string{"delta-of": r.ID, "seed": r.Seed}}
		up, err := upload(ctx, obs, dm, r.Dir, seed)
		if err != nil {
			return nil, failure.Wrap(failure.Internal, err, "check the bucket's limits ([bus] bases-max-bytes) and the bus's disk",
				"publish base %s's delta to bucket %s", r.ID, b.name())
		}
		m.Delta = &Delta{Object: name, Seed: r.Seed, Digest: up.digest, Stream: up.stream, Compressed: up.compressed,
			Seeded: up.seeded, SeededBytes: up.seededBytes}
		if err := updateMeta(ctx, obs, jetstream.ObjectMeta{Name: r.ID, Description: desc, Metadata: m.metadata(signer)}); err != nil {
			return nil, fmt.Errorf("publish base %s: record its delta: %w", r.ID, err)
		}
	}
	return &Published{Bucket: b.name(), Object: r.ID, Signer: signer.Public(), Meta: m, Seconds: time.Since(start).Seconds()}, nil
}

// newMeta describes ready base r, checked against its seal first: a
// changed base is never shared. The digests are the caller's to fill in.
func newMeta(r *base.Record) (Meta, error) {
	if err := base.Verify(r); err != nil {
		return Meta{}, err
	}
	roots, err := base.RelocationRoots(r)
	if err != nil {
		return Meta{}, err
	}
	host, _ := os.Hostname()
	m := Meta{
		Format: Format, BaseID: r.ID, Commit: r.Commit, Fingerprint: r.Fingerprint,
		Toolchain: r.Toolchain, Warm: warmCommands(r.Warm), Modes: r.Modes,
		Store: roots.Store, GitDir: roots.GitDir,
		Entries: r.TargetSeal.Entries, Bytes: r.TargetSeal.Bytes,
		Level: Level.String(), Host: host,
	}
	if _, err := os.Lstat(store.BaseFiles(r.Dir).Relocation); err == nil {
		m.Relocation = true
	}
	return m, nil
}

// DeltaSuffix names a base's delta object: <base id><DeltaSuffix>.
const DeltaSuffix = ".delta"

// seedOf returns the directory of r's seed base when it is still ready and
// unchanged on this host, else "" (no delta is published).
func seedOf(r *base.Record) string {
	if r.Seed == "" {
		return ""
	}
	dir := filepath.Join(filepath.Dir(r.Dir), r.Seed)
	var seed base.Record
	if err := atomicfile.ReadJSON(store.BaseFiles(dir).Record, &seed); err != nil {
		return ""
	}
	if err := base.Verify(&seed); err != nil {
		return ""
	}
	return dir
}

// uploaded is what upload stored.
type uploaded struct {
	digest             string // the object's SHA-256
	stream, compressed int64
	seeded             int // files a delta stream takes from the seed
	seededBytes        int64
}

// upload stores base directory dir's stream (a delta against seed, when
// given) as object meta.Name.
func upload(ctx context.Context, obs jetstream.ObjectStore, meta jetstream.ObjectMeta, dir, seed string) (*uploaded, error) {
	pr, pw := io.Pipe()
	var up *uploaded
	go func() {
		var err error
		up, err = writeObject(pw, dir, seed)
		pw.CloseWithError(err) // nil: EOF
	}()
	_, err := obs.Put(ctx, meta, pr)
	pr.CloseWithError(err) // stops the writer when the upload failed
	if err != nil {
		return nil, err
	}
	// Put returned after reading the pipe to its end: the writer is done.
	return up, nil
}

// writeObject writes base directory dir's object (a delta against seed,
// when given) to w: its tar stream, zstd-compressed. The digest is of the
// object as written: an install checks it while the bytes arrive, not over
// the (eight times larger) plain stream.
func writeObject(w io.Writer, dir, seed string) (*uploaded, error) {
	sum := sha256.New()
	var stream, compressed counter
	zw, err := zstd.NewWriter(io.MultiWriter(w, sum, &compressed), zstd.WithEncoderLevel(Level))
	if err != nil {
		return nil, err
	}
	a, err := writeArchive(io.MultiWriter(zw, &stream), dir, seed)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return &uploaded{digest: hex.EncodeToString(sum.Sum(nil)), stream: stream.n, compressed: compressed.n,
		seeded: a.seeded, seededBytes: a.seededBytes}, nil
}

// updateMeta replaces the metadata of the object just stored. On a
// cluster the client reads the object's current metadata first with a
// direct get, which any replica may answer, and a replica that has not
// caught up yet answers "no such object" (ErrUpdateMetaDeleted, seen on
// the three-node loopback cluster right after Put): that answer is retried
// for a while.
func updateMeta(ctx context.Context, obs jetstream.ObjectStore, meta jetstream.ObjectMeta) error {
	deadline := time.Now().Add(30 * time.Second)
	for wait := 50 * time.Millisecond; ; wait = min(wait*2, time.Second) {
		err := obs.UpdateMeta(ctx, meta.Name, meta)
		if !errors.Is(err, jetstream.ErrUpdateMetaDeleted) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// Unpublish deletes the objects (and their deltas) of base ids that this
// host published from store dir storeDir (their metadata says so: a runner
// that pulled a base never deletes the fleet's object) and returns the ids
// it deleted; an id with no object is no error. gc calls it for the bases
// it deleted.
func Unpublish(ctx context.Context, conn *bus.Conn, b Bucket, storeDir string, ids []string) ([]string, error) {
	obs, err := conn.JS.ObjectStore(ctx, b.name())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	var deleted []string
	var errs []error
	for _, id := range ids {
		info, err := obs.GetInfo(ctx, id)
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("look up object %s: %w", id, err))
			continue
		}
		if m, err := decodeMeta(info.Metadata); err != nil || m.Store != storeDir || m.Host != host {
			continue
		}
		if err := obs.Delete(ctx, id); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			errs = append(errs, fmt.Errorf("delete object %s: %w", id, err))
			continue
		}
		if err := obs.Delete(ctx, id+DeltaSuffix); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			errs = append(errs, fmt.Errorf("delete object %s: %w", id+DeltaSuffix, err))
		}
		deleted = append(deleted, id)
	}
	return deleted, errors.Join(errs...)
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
