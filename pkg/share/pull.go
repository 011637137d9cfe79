package share

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/relocate"
	"github.com/ferrydev/ferry/pkg/store"
)

// PullOptions are the inputs of one pull.
type PullOptions struct {
	Build base.Options // the repository, settings, store and Rev, as for a build
	Bucket
	Progress io.Writer // progress lines; nil discards
}

// Pulled is what Pull did.
type Pulled struct {
	Record *base.Record `json:"record"`
	Reused bool         `json:"reused"` // the base was already ready here
	Object string       `json:"object,omitempty"`
	Meta   *Meta        `json:"meta,omitempty"`
	// Relocated is what the dead relocation plan removed from the target,
	// when the publisher's store path differs from this store's.
	Relocated *relocate.Applied `json:"relocated,omitempty"`
	// Rebuilds are the units (fingerprint dirs, with the profile) the
	// first build rebuilds because of the relocation.
	Rebuilds []string `json:"rebuilds,omitempty"`
	// Transferred is the bytes read from the bucket: the full object's, or
	// the delta's when Object is the delta, with Seeded target files
	// taken from the local seed base: Linked of them as hard links of the
	// seed's (the same content, mode and mtime), the others copied.
	Transferred int64   `json:"transferred"`
	Seeded      int     `json:"seeded,omitempty"`
	Linked      int     `json:"linked,omitempty"`
	Seconds     float64 `json:"seconds"`
}

// Pull installs the published base of o.Build.Rev into the local store and
// makes it current, or reuses it when it is ready. It is refused when the
// published base was built with another toolchain, warm commands or modes
// than this host resolves, and fails when the stream does not match its
// digest; either way no base is left ready.
func Pull(ctx context.Context, conn *bus.Conn, o PullOptions) (*Pulled, error) {
	start := time.Now()
	if err := Authenticated(conn); err != nil {
		return nil, err
	}
	js := conn.JS
	out := o.Progress
	if out == nil {
		out = io.Discard
	}
	p, err := base.Resolve(o.Build)
	if err != nil {
		return nil, err
	}
	s := o.Build.Store
	if err := s.Init(); err != nil {
		return nil, err
	}
	obs, err := o.Bucket.open(ctx, js, false)
	if err != nil {
		return nil, err
	}
	info, err := obs.GetInfo(ctx, p.ID)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, notPublished(ctx, obs, o.Bucket.name(), p)
	}
	if err != nil {
		return nil, fmt.Errorf("look up base %s in bucket %s: %w", p.ID, o.Bucket.name(), err)
	}
	m, err := decodeMeta(info.Metadata)
	if err != nil {
		return nil, failure.Wrap(failure.Refused, err, "", "object %s in bucket %s", p.ID, o.Bucket.name())
	}
	if diff := differences(m, p); len(diff) > 0 {
		return nil, failure.New(failure.Refused, "build the base here with `ferry base`, or publish one built with this host's toolchain and settings",
			"the published base %s does not match this host: %s", p.ID, strings.Join(diff, "; "))
	}
	if m.Digest == "" {
		return nil, failure.Wrap(failure.Refused, &UnavailableError{ID: p.ID, Bucket: o.Bucket.name(), Why: "it is still being uploaded (it has no digest yet)"},
			"wait for the publisher to finish, then pull again", "nothing to pull")
	}
	if err := m.current(); err != nil {
		return nil, err
	}
	// Signed by a key this host trusts, or nothing is installed. (The
	// signed metadata holds the digests the bytes are checked against;
	// what is refused or waited for above installs nothing either.)
	signer, err := verifySigned(p.ID, info.Metadata, o.Build.Settings.TrustedKeys)
	if err != nil {
		return nil, err
	}

	l, reused, err := begin(o, p, start)
	if err != nil || reused != nil {
		return reused, err
	}
	defer l.Release()
	var res *Pulled
	if seed := readySeed(s, m.Delta); seed != "" {
		// This host has the base it was seeded from: the delta, with the
		// seed's files copied, is the same target for a fraction of the
		// bytes.
		d := m.Delta
		o.say("pulling base %s from bucket %s as a delta against base %s (%.1f MB, the full object %.1f MB)",
			p.ID, o.Bucket.name(), d.Seed, float64(d.Compressed)/1e6, float64(m.Compressed)/1e6)
		res, err = fromBucket(ctx, obs, o, p, m, object{name: d.Object, digest: d.Digest, seed: seed, signer: signer})
		var se *SeedError
		if errors.As(err, &se) || errors.Is(err, jetstream.ErrObjectNotFound) {
			o.say("the delta cannot be used: %v; pulling the full object", err)
			if err = base.Discard(o.Build, p.ID); err != nil {
				return nil, fmt.Errorf("discard the partial base %s: %w", p.ID, err)
			}
			res = nil
		}
	}
	if res == nil && err == nil {
		o.say("pulling base %s from bucket %s (%.1f MB)", p.ID, o.Bucket.name(), float64(m.Compressed)/1e6)
		res, err = fromBucket(ctx, obs, o, p, m, object{name: p.ID, digest: m.Digest, signer: signer})
	}
	if err != nil {
		return nil, failed(o, p, l, err)
	}
	res.Seconds = time.Since(start).Seconds()
	o.say("base %s pulled and ready in %.1fs", p.ID, res.Seconds)
	return res, nil
}

// begin takes the base lock of p for an install (a pull or an import):
// a base ready already is checked against its seal, made current and
// returned as reused (the lock released); otherwise a partial base is
// discarded and the lock returned, held.
func begin(o PullOptions, p *base.Plan, start time.Time) (*lock.Lock, *Pulled, error) {
	s := o.Build.Store
	l, err := lock.TryTake(s.BaseLock(p.ID))
	if err == lock.ErrBusy {
		o.say("waiting for another build, pull or import of %s", p.ID)
		l, err = lock.Take(s.BaseLock(p.ID))
	}
	if err != nil {
		return nil, nil, err
	}
	if r, err := base.Read(s, p.ID); err == nil {
		defer l.Release()
		if err := base.Verify(r); err != nil {
			return nil, nil, err
		}
		if _, err := base.SetCurrent(o.Build.Repo, s, p.ID); err != nil {
			return nil, nil, err
		}
		o.say("base %s is ready; reused", p.ID)
		return nil, &Pulled{Record: r, Reused: true, Seconds: time.Since(start).Seconds()}, nil
	}
	if err := base.Discard(o.Build, p.ID); err != nil {
		l.Release()
		return nil, nil, fmt.Errorf("discard the partial base %s: %w", p.ID, err)
	}
	return l, nil, nil
}

// failed discards the partial base a failed install left and, that done,
// the lock file l holds, joining what fails to err.
func failed(o PullOptions, p *base.Plan, l *lock.Lock, err error) error {
	if derr := base.Discard(o.Build, p.ID); derr != nil {
		return errors.Join(err, fmt.Errorf("discard the failed install: %w", derr))
	}
	if rerr := l.Remove(); rerr != nil {
		return errors.Join(err, fmt.Errorf("remove the failed install's lock file: %w", rerr))
	}
	return err
}

// Authenticated refuses a connection to a server that lets anyone in: a
// pulled base runs code here, and on such a server anyone could have
// published it.
func Authenticated(conn *bus.Conn) error {
	if conn.NC.AuthRequired() {
		return nil
	}
	return failure.New(failure.Refused,
		"configure authentication on the NATS server (a token, users or credentials; see deploy/nats/sharing.conf) and give Ferry its credentials in FERRY_NATS_URL or [bus] url",
		"the bus at %s does not require authentication: Ferry pulls bases only over an authenticated connection", conn.NC.ConnectedUrlRedacted())
}

// differences names what differs between published base m and what this
// host would build (plan p), or nothing.
func differences(m *Meta, p *base.Plan) []string {
	var d []string
	if m.Toolchain.Rustc != p.Toolchain.Rustc || m.Toolchain.Cargo != p.Toolchain.Cargo {
		d = append(d, fmt.Sprintf("toolchain: published with %s (%s, %s), this host has %s (%s, %s)",
			m.Toolchain.RustcVersion, m.Toolchain.CargoVersion, m.Toolchain.Host,
			p.Toolchain.RustcVersion, p.Toolchain.CargoVersion, p.Toolchain.Host))
		if m.Toolchain.RustcVersion == p.Toolchain.RustcVersion {
			d[len(d)-1] += " (same version, another build of it)"
		}
	}
	if here := warmCommands(p.Warm); strings.Join(m.Warm, "\n") != strings.Join(here, "\n") {
		d = append(d, fmt.Sprintf("warm commands: published %q, this host %q", m.Warm, here))
	}
	if m.Modes != p.Modes {
		d = append(d, fmt.Sprintf("modes: published isolation %s, freshness %s; this host isolation %s, freshness %s",
			m.Modes.Isolation, m.Modes.Freshness, p.Modes.Isolation, p.Modes.Freshness))
	}
	if len(d) == 0 && m.Fingerprint != p.Fingerprint() {
		d = append(d, fmt.Sprintf("fingerprint: published %s, this host %s (another Ferry version?)", m.Fingerprint, p.Fingerprint()))
	}
	return d
}

// notPublished is the error of a pull whose base id has no object: a
// refusal naming the difference when the commit was published under
// another fingerprint, else "not published".
func notPublished(ctx context.Context, obs jetstream.ObjectStore, bucket string, p *base.Plan) error {
	infos, err := obs.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return fmt.Errorf("list bucket %s: %w", bucket, err)
	}
	for _, info := range infos {
		m, err := decodeMeta(info.Metadata)
		if err != nil || m.Commit != p.Commit {
			continue
		}
		if diff := differences(m, p); len(diff) > 0 {
			return failure.New(failure.Refused, "build the base here with `ferry base`, or publish one built with this host's toolchain and settings",
				"commit %s was published as base %s, which does not match this host: %s", short(p.Commit), m.BaseID, strings.Join(diff, "; "))
		}
	}
	return failure.Wrap(failure.Prereq, &NotPublishedError{Commit: p.Commit, ID: p.ID, Bucket: bucket},
		"publish it from a build host (`ferry base --publish --rev "+short(p.Commit)+"`), or build it here with `ferry base`",
		"nothing to pull")
}

// NotPublishedError is a pull of a base that was never published (under
// this host's fingerprint or another).
type NotPublishedError struct {
	Commit, ID, Bucket string
}

func (e *NotPublishedError) Error() string {
	return fmt.Sprintf("no base of commit %s (%s) is published in bucket %s", short(e.Commit), e.ID, e.Bucket)
}

// UnavailableError is a pull of a base that is not there yet: the bucket
// does not exist, or the object's upload has not finished.
type UnavailableError struct {
	ID, Bucket, Why string
}

func (e *UnavailableError) Error() string {
	if e.ID == "" {
		return fmt.Sprintf("bucket %s: %s", e.Bucket, e.Why)
	}
	return fmt.Sprintf("base %s in bucket %s: %s", e.ID, e.Bucket, e.Why)
}

// NotYet reports a pull that failed only because the base is not published
// (completely) yet: no bucket, no object, or an upload still running. A
// runner waits and pulls again; nothing is wrong with the base or the host.
func NotYet(err error) bool {
	var np *NotPublishedError
	var u *UnavailableError
	return errors.As(err, &np) || errors.As(err, &u)
}

// AncestorLimit is how many first-parent ancestors Nearest looks at.
const AncestorLimit = 100

// Nearest returns the nearest first-parent ancestor of commit (within
// AncestorLimit) whose base under fingerprint fp is published completely,
// or "" when there is none.
func Nearest(ctx context.Context, conn *bus.Conn, b Bucket, repo *git.Repo, commit, fp string) (string, error) {
	obs, err := b.open(ctx, conn.JS, false)
	if err != nil {
		return "", err
	}
	infos, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("list bucket %s: %w", b.name(), err)
	}
	published := map[string]bool{}
	for _, info := range infos {
		if m, err := decodeMeta(info.Metadata); err == nil && m.Digest != "" && m.Fingerprint == fp && m.current() == nil {
			published[m.Commit] = true
		}
	}
	out, err := repo.Run(repo.Top, "rev-list", "--first-parent", fmt.Sprintf("--max-count=%d", AncestorLimit), commit+"^")
	if err != nil {
		return "", nil // a root commit has no ancestor
	}
	for _, c := range strings.Fields(out) {
		if published[c] {
			return c, nil
		}
	}
	return "", nil
}

// readySeed returns the directory of delta d's seed base when it is ready
// and unchanged in store s, else "". A seed pulled from another store path
// is not used: the relocation removed the units that recorded the
// publisher's paths, files the delta would take from it.
func readySeed(s *store.Store, d *Delta) string {
	if d == nil {
		return ""
	}
	r, err := base.Read(s, d.Seed)
	if err != nil || base.Verify(r) != nil {
		return ""
	}
	if r.Pulled != nil && r.Pulled.Relocated != nil && r.Pulled.Relocated.Paths > 0 {
		return ""
	}
	return r.Dir
}

// object is what install pulls: the base's full object, or its delta
// against a seed base (its directory) this host holds.
type object struct {
	name, digest, seed string
	signer             string // the key its metadata is signed with; "" when trusted unsigned
	archive            string // the archive file it is read from (Import); "" for the bucket's
}

// fromBucket installs object ob of the bucket: it reads it in a goroutine
// that fails the read when the bus stalls (guard).
func fromBucket(ctx context.Context, obs jetstream.ObjectStore, o PullOptions, p *base.Plan, m *Meta, ob object) (*Pulled, error) {
	tctx, cancel := transferContext(ctx)
	defer cancel()
	// Opening the object asks the bus for its info with the transfer's
	// deadline too: the guard bounds that as well.
	chunks := guard(func() (io.ReadCloser, error) {
		obj, err := obs.Get(tctx, ob.name)
		if err != nil {
			return nil, fmt.Errorf("read object %s: %w", ob.name, err)
		}
		return obj, nil
	}, StallTimeout)
	defer chunks.Close()
	return install(ctx, &objReader{r: chunks}, o, p, m, ob)
}

// install streams the object from src into the base directory (the partial
// base), checks its digest, relocates the target when the publisher's
// store path differs, and writes base.json last. The caller holds the base
// lock.
func install(ctx context.Context, src *objReader, o PullOptions, p *base.Plan, m *Meta, ob object) (*Pulled, error) {
	s, repo := o.Build.Store, o.Build.Repo
	files := s.Base(p.ID)
	if err := os.MkdirAll(files.Dir, 0o755); err != nil {
		return nil, err
	}
	if err := repo.WorktreeAddDetached(files.Src, p.Commit); err != nil {
		return nil, err
	}
	if err := repo.WorktreeLock(files.Src, store.BaseCheckoutReason(p.ID)); err != nil {
		return nil, err
	}
	// The digest is of the object as it arrives: the decoder's goroutine
	// hashes 136 MB where the plain stream was 1 GB (the large bench
	// workspace), while this one writes files.
	sum := sha256.New()
	object := io.TeeReader(src, sum)
	zr, err := zstd.NewReader(object)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(files.Dir)
	if err != nil {
		zr.Close()
		return nil, err
	}
	defer root.Close()
	var x *extracted
	if ob.seed == "" {
		x, err = extract(zr, root, "")
	} else {
		// Unchanged files become links of the seed's: in a link window
		// (package base's seal).
		err = base.Linking(s, p.ID, func() (err error) { x, err = extract(zr, root, ob.seed); return err })
	}
	if err == nil {
		// The tar's end-of-archive blocks are read; the rest of the
		// stream, then of the object (and the object store's own digest
		// check at its end), must be read too.
		_, err = io.Copy(io.Discard, zr)
	}
	zr.Close()
	if err == nil {
		_, err = io.Copy(io.Discard, object)
	}
	if se := (*SeedError)(nil); errors.As(err, &se) {
		return nil, se
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, failure.Wrap(failure.Interrupted, ctx.Err(), "", "pull of base %s interrupted; the partial base was discarded", p.ID)
		}
		if src.err != nil && !errors.Is(src.err, jetstream.ErrDigestMismatch) {
			// The bus or the disk, not the object: nothing says the
			// object is bad.
			if ob.archive != "" {
				return nil, failure.Wrap(failure.Internal, src.err, "check the file and import it again",
					"read base %s from %s; nothing was installed", p.ID, ob.archive)
			}
			return nil, failure.Wrap(failure.Internal, src.err, "check the bus and pull again",
				"read base %s from bucket %s; nothing was installed", p.ID, o.Bucket.name())
		}
		return nil, ob.corrupt(p.ID, err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != ob.digest {
		return nil, ob.corrupt(p.ID, fmt.Errorf("digest mismatch: object %s's SHA-256 is %s, its metadata says %s", ob.name, got, ob.digest))
	}

	var r base.Record
	if err := json.Unmarshal(x.record, &r); err != nil {
		return nil, ob.corrupt(p.ID, fmt.Errorf("read its base.json: %w", err))
	}
	if r.ID != p.ID {
		return nil, ob.corrupt(p.ID, fmt.Errorf("its base.json is of base %s", r.ID))
	}
	// The record, as this store has the base.
	r.Store, r.Dir, r.Src, r.Target = s.Dir, files.Dir, files.Src, files.Target
	r.MntSrc, r.MntTarget = s.MntSrc(), s.MntTarget()
	res := &Pulled{Object: ob.name, Meta: m, Transferred: src.n, Seeded: x.seeded, Linked: x.linked}

	here, err := base.RelocationRoots(&r)
	if err != nil {
		return nil, err
	}
	if m.Store != here.Store || m.GitDir != here.GitDir {
		// The target recorded the publisher's paths: the units that did
		// are removed (dead: nothing of the publisher's exists here), and
		// the first build rebuilds them at this store's paths.
		plan, err := relocate.Compute(r.Target, relocate.Roots{Store: m.Store, GitDir: m.GitDir, Src: r.Src}, false)
		if err != nil {
			return nil, fmt.Errorf("plan the relocation of the pulled target: %w", err)
		}
		a, err := plan.Apply(r.Target)
		if err != nil {
			return nil, fmt.Errorf("relocate the pulled target: %w", err)
		}
		res.Relocated, res.Rebuilds = &a, plan.Rebuilds
		if a.Paths > 0 {
			o.say("relocated the target from %s: removed %d unit path(s) that recorded the publisher's paths", m.Store, a.Paths)
		}
	}
	if r.HostPaths() {
		// Forks of a base built at host paths plan against this base's
		// own paths now.
		plan, err := relocate.Compute(r.Target, here, true)
		if err != nil {
			return nil, fmt.Errorf("plan the relocation of the base's target: %w", err)
		}
		if err := relocate.Save(files.Relocation, plan); err != nil {
			return nil, err
		}
	}
	if err := atomicfile.SyncTree(r.Target); err != nil {
		return nil, err
	}
	var reuse *base.Reuse
	if ob.seed != "" && m.Delta != nil {
		if seed, err := base.Read(s, m.Delta.Seed); err == nil {
			reuse = &base.Reuse{Seed: seed} // its linked files are its inodes
		}
	}
	seal, exposed, err := base.SealSharing(s, files.Dir, reuse)
	for _, e := range exposed {
		o.say("made base %s partial: it holds a file written outside Ferry's sandboxes during this pull (the next build of its commit builds it again)", e)
	}
	var sc *base.SeedChangedError
	if errors.As(err, &sc) {
		return nil, failure.Wrap(failure.Refused, err,
			"find what writes into the store from outside Ferry's sandboxes, then pull again: it pulls the whole base, or a delta against another",
			"the pulled base %s was not made ready", p.ID)
	}
	if err != nil {
		return nil, fmt.Errorf("seal the pulled target: %w", err)
	}
	r.TargetSeal = seal
	r.Pulled = &base.PullRecord{Object: ob.name, Bucket: o.Bucket.name(), From: m.Store, Host: m.Host, Digest: ob.digest, Signer: ob.signer, Relocated: res.Relocated}
	if ob.archive != "" {
		r.Pulled.Bucket, r.Pulled.Archive = "", ob.archive
	}
	r.Created = time.Now().UTC()
	if err := ctx.Err(); err != nil {
		return nil, failure.Wrap(failure.Interrupted, err, "", "pull of base %s interrupted; the partial base was discarded", p.ID)
	}
	// base.json is the ready marker: written last, atomically.
	if err := atomicfile.WriteJSON(files.Record, &r, 0o644); err != nil {
		return nil, err
	}
	if _, err := base.SetCurrent(o.Build.Repo, s, p.ID); err != nil {
		return nil, err
	}
	res.Record = &r
	return res, nil
}

// StallTimeout fails a download that received nothing from the bus for
// this long. On the three-node loopback cluster, with the bucket stream's
// leader shut down mid-pull, the client's consumer of the chunks sometimes
// never resumed and the pull would have waited for TransferTimeout (an
// hour); failed instead, the pull is retried (a runner does so itself).
const StallTimeout = 30 * time.Second

// guard opens the object and reads it in a goroutine of its own, handing
// the bytes on; when nothing was handed on for stall (opening included),
// the reader fails. The goroutine closes the object when its reads end; a
// call blocked on a stalled stream ends at the transfer's deadline, so a
// stall costs a goroutine until then. Closing the returned reader stops
// the goroutine at its next read.
func guard(open func() (io.ReadCloser, error), stall time.Duration) *io.PipeReader {
	pr, pw := io.Pipe()
	moved := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		obj, err := open()
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		defer obj.Close()
		buf := make([]byte, 256<<10)
		for {
			n, err := obj.Read(buf)
			if n > 0 {
				if _, werr := pw.Write(buf[:n]); werr != nil {
					return
				}
				select {
				case moved <- struct{}{}:
				default:
				}
			}
			if err != nil {
				pw.CloseWithError(err) // io.EOF: the reader sees EOF
				return
			}
		}
	}()
	go func() {
		t := time.NewTimer(stall)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-moved:
				t.Reset(stall)
			case <-t.C:
				pw.CloseWithError(fmt.Errorf("nothing came from the bus for %v", stall))
				return
			}
		}
	}()
	return pr
}

// objReader keeps the error of the object's reader: a failure of the bus
// (a timeout, a permission) is not a corrupt object.
type objReader struct {
	r   io.Reader
	n   int64 // bytes read
	err error
}

func (o *objReader) Read(p []byte) (int, error) {
	n, err := o.r.Read(p)
	o.n += int64(n)
	if err != nil && err != io.EOF {
		o.err = err
	}
	return n, err
}

// corrupt refuses an object whose bytes are not what its signed metadata
// says.
func (ob object) corrupt(id string, err error) error {
	if ob.archive != "" {
		return failure.Wrap(failure.Refused, err, "export the base again on its build host (`ferry base export`), then import that file",
			"the base archive %s is corrupt or cut short; nothing was installed", ob.archive)
	}
	return failure.Wrap(failure.Refused, err, "publish the base again from its build host (`ferry base --publish`), then pull again",
		"the published base %s is corrupt; nothing was installed", id)
}

// say writes one progress line, started with the program's name
// (o.Build.Prog).
func (o PullOptions) say(format string, args ...any) {
	fmt.Fprintf(progress(o), "%s: "+format+"\n", append([]any{o.Build.ProgName()}, args...)...)
}

func progress(o PullOptions) io.Writer {
	if o.Progress == nil {
		return io.Discard
	}
	return o.Progress
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
