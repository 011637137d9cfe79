package share

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/failure"
)

// A base as one file, for machines that cannot reach a bus (a cloud agent's
// container, a CI runner, a new laptop): `ferry base export` writes it,
// `ferry base import` installs it. The file is the bucket's object with its
// signed metadata in front:
//
//	ferry base archive 1\n
//	<length of the metadata>\n
//	<the metadata: the object's metadata map as JSON, Meta and signature>
//	<the object: base.json, the checkout and the target as a zstd tar stream>
//
// Import reads and checks the metadata (format, what the base was built
// with, the signature) before it touches the store, then installs the
// object exactly as a pull does: a partial base until base.json is written
// last, checked against the signed digest as the bytes arrive, relocated
// when the exporting store's path differs. A file cut short, changed or of
// another build is refused with nothing installed.

// archiveMagic begins an archive file; its number versions the framing
// (the object inside has its own Format).
const archiveMagic = "ferry base archive 1\n"

// maxMetaLen bounds the metadata an import reads before it knows the file
// is an archive at all.
const maxMetaLen = 1 << 20

// Exported is what Export wrote.
type Exported struct {
	File    string  `json:"file"` // "-" for stdout
	Signer  string  `json:"signer"`
	Meta    Meta    `json:"meta"`
	Bytes   int64   `json:"bytes"` // the file's size
	Seconds float64 `json:"seconds"`
}

// Export writes ready base r as an archive to w, signed by signer: its
// full object, or with against (a ready base, unchanged: its seal is
// checked) a delta object in which each target file with against's
// content at the same path names that content's SHA-256 instead of
// holding it, for a reader that holds against. The object is written to a
// temporary file in tmp first: its digest, which the signed metadata in
// front holds, is known only at its end.
func Export(r *base.Record, signer *Signer, w io.Writer, tmp string, against *base.Record) (*Exported, error) {
	start := time.Now()
	if signer == nil {
		return nil, errors.New("export: no signing key")
	}
	m, err := newMeta(r)
	if err != nil {
		return nil, err
	}
	seed := ""
	if against != nil {
		if err := base.Verify(against); err != nil {
			return nil, err
		}
		seed = against.Dir
	}
	f, err := os.CreateTemp(tmp, "export-*.zst")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	up, err := writeObject(bw, r.Dir, seed)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return nil, fmt.Errorf("export base %s: %w", r.ID, err)
	}
	if against == nil {
		m.Digest, m.Stream, m.Compressed = up.digest, up.stream, up.compressed
	} else {
		// The file holds the delta alone: Digest (of a full object) stays
		// empty, and Delta says what the file's object is.
		m.Delta = &Delta{Seed: against.ID, Digest: up.digest, Stream: up.stream, Compressed: up.compressed,
			Seeded: up.seeded, SeededBytes: up.seededBytes}
	}
	m.Published = time.Now().UTC()
	md, err := json.Marshal(m.metadata(signer))
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	var n counter
	out := io.MultiWriter(w, &n)
	if _, err := fmt.Fprintf(out, "%s%d\n%s", archiveMagic, len(md), md); err != nil {
		return nil, err
	}
	if _, err := io.Copy(out, f); err != nil {
		return nil, fmt.Errorf("export base %s: %w", r.ID, err)
	}
	return &Exported{Signer: signer.Public(), Meta: m, Bytes: n.n, Seconds: time.Since(start).Seconds()}, nil
}

// ImportOptions are the inputs of one import.
type ImportOptions struct {
	// Build names the repository, settings and store; its Rev is the
	// archive's commit.
	Build base.Options
	File  string    // the archive's name, for messages and the record ("-": stdin)
	From  io.Reader // the archive's bytes
	// TrustUnsigned installs an archive whose signature is missing or by
	// a key this host does not trust (a file the caller vouches for).
	TrustUnsigned bool
	Progress      io.Writer
}

// Import installs the base in the archive o.From into the local store and
// makes it current (unless current is at a newer commit of its history),
// or reuses it when it is ready. It is refused, with nothing installed,
// when the file is no archive, was built with another toolchain, warm
// commands or modes than this host resolves for its commit, names a commit
// this repository does not have, is not signed by a trusted key (unless
// TrustUnsigned), or its bytes do not match their signed digest.
func Import(ctx context.Context, o ImportOptions) (*Pulled, error) {
	start := time.Now()
	po := PullOptions{Build: o.Build, Progress: o.Progress}
	in := bufio.NewReaderSize(o.From, 1<<20)
	md, err := readHeader(in)
	if err != nil {
		return nil, failure.Wrap(failure.Refused, err, "give a file `ferry base export` wrote", "%s is not a base archive; nothing was installed", o.File)
	}
	m, err := decodeMeta(md)
	if err != nil {
		return nil, failure.Wrap(failure.Refused, err, "", "%s; nothing was installed", o.File)
	}
	if err := m.current(); err != nil {
		return nil, err
	}
	if c, err := o.Build.Repo.ResolveCommit(m.Commit); err != nil || c != m.Commit {
		return nil, failure.New(failure.Refused, "fetch the commit into this repository first (`git fetch`), or export the base of a commit it has",
			"%s holds the base of commit %s, which this repository does not have; nothing was installed", o.File, short(m.Commit))
	}
	po.Build.Rev = m.Commit
	p, err := base.Resolve(po.Build)
	if err != nil {
		return nil, err
	}
	if diff := differences(m, p); len(diff) > 0 || m.BaseID != p.ID {
		return nil, failure.New(failure.Refused, "build the base here with `ferry base`, or export one built with this host's toolchain and settings",
			"the base in %s does not match this host: %s", o.File, strings.Join(append(diff, "base "+m.BaseID+", here "+p.ID), "; "))
	}
	signer, err := verifySigned(p.ID, md, o.Build.Settings.TrustedKeys)
	if err != nil {
		var se *SignatureError
		errors.As(err, &se)
		if !o.TrustUnsigned {
			return nil, failure.Wrap(failure.Refused, se,
				failure.HintOf(err)+"; or, for a file you vouch for, pass --trust-unsigned", "%s refused", o.File)
		}
		po.say("installing %s, though this host does not trust its signature (--trust-unsigned): %v", o.File, se)
		signer = ""
	}
	s := o.Build.Store
	if err := s.Init(); err != nil {
		return nil, err
	}
	if _, err := base.Read(s, p.ID); err != nil {
		// A new base's whole target is written: the free-space floor
		// applies, as to a build.
		if err := o.Build.Settings.MinFree.Check(s.Dir, fmt.Sprintf("importing the base of %s", short(m.Commit))); err != nil {
			return nil, err
		}
	}
	ob := object{name: p.ID, digest: m.Digest, signer: signer, archive: o.File}
	if m.Digest == "" && m.Delta != nil {
		// A delta: the files it names by digest come from its seed.
		if ob.seed = readySeed(s, m.Delta); ob.seed == "" {
			return nil, failure.New(failure.Refused,
				"import the full file of base "+m.Delta.Seed+" first, or export this base without --against",
				"%s is a delta against base %s, which is not ready here (or was relocated when it was installed); nothing was installed", o.File, m.Delta.Seed)
		}
		ob.digest = m.Delta.Digest
	}
	if ob.digest == "" {
		return nil, failure.New(failure.Refused, "export the base again with `ferry base export`",
			"%s names no digest for its object; nothing was installed", o.File)
	}
	l, reused, err := begin(po, p, start)
	if err != nil || reused != nil {
		return reused, err
	}
	defer l.Release()
	if ob.seed != "" {
		po.say("importing base %s from %s, a delta against base %s (%.1f MB)", p.ID, o.File, m.Delta.Seed, float64(m.Delta.Compressed)/1e6)
	} else {
		po.say("importing base %s from %s (%.1f MB)", p.ID, o.File, float64(m.Compressed)/1e6)
	}
	res, err := install(ctx, &objReader{r: in}, po, p, m, ob)
	if se := (*SeedError)(nil); errors.As(err, &se) {
		err = failure.Wrap(failure.Refused, se, "import the full file of base "+p.ID+", or export it without --against",
			"%s is a delta against base %s, which does not hold what it names here; nothing was installed", o.File, m.Delta.Seed)
	}
	if err != nil {
		return nil, failed(po, p, l, err)
	}
	if n, _ := in.Read(make([]byte, 1)); n > 0 {
		// Bytes after the object: not a file Export wrote. The base is
		// ready and checked (its bytes matched the signed digest), so
		// this is said, not refused.
		po.say("warning: %s holds bytes after the base's object; they were ignored", o.File)
	}
	res.Seconds = time.Since(start).Seconds()
	po.say("base %s imported and ready in %.1fs", p.ID, res.Seconds)
	return res, nil
}

// readHeader reads an archive's framing and returns its metadata map.
func readHeader(r *bufio.Reader) (map[string]string, error) {
	magic := make([]byte, len(archiveMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != archiveMagic {
		if err == nil && strings.HasPrefix(string(magic), "ferry base archive ") {
			return nil, fmt.Errorf("an archive of another version (%q), written by another Ferry", strings.TrimSpace(string(magic)))
		}
		return nil, errors.New("it does not begin as one")
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("its header is cut short: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSuffix(line, "\n"))
	if err != nil || n <= 0 || n > maxMetaLen {
		return nil, fmt.Errorf("its header gives no metadata length (%q)", strings.TrimSpace(line))
	}
	raw := make([]byte, n)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, fmt.Errorf("its metadata is cut short: %w", err)
	}
	var md map[string]string
	if err := json.Unmarshal(raw, &md); err != nil {
		return nil, fmt.Errorf("its metadata is not JSON: %w", err)
	}
	return md, nil
}
