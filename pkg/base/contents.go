package base

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/store"
)

// Contents. SealBase writes, beside base.json, the SHA-256 of every regular
// file of the target in sha256sum's format (`<hex>  target/<path>`, a name
// holding a backslash, newline or carriage return escaped and its line
// started with a backslash, as GNU sha256sum writes it), and records the
// file's own digest in the seal. VerifyFull reads every file again and
// names those whose bytes differ.
//
// Hashing reads the whole target, on as many goroutines as there are
// cores. A refresh takes its seed's digest for a file it can prove is the
// seed's, unchanged since the refresh took it: the seed's file at the same
// path has the same size and mtime, and the refresh's file is the seed's
// inode (a layered refresh links it) or a clone whose change time is
// before the clone ended (every write or chmod after it moves the change
// time past that). So a refresh hashes what its warm build wrote, not its
// whole target.

// Reuse is what a refresh may take digests from: its seed's base.
type Reuse struct {
	Seed *Record
	// Cloned is when the clone of the seed's target (reflink or copy)
	// ended; zero for a layered refresh, whose files are the seed's
	// inodes or its own.
	Cloned time.Time
}

// cloneMargin keeps a file cloned in the clone's last moments from being
// taken for untouched: a change right after the clone ended can carry a
// change time up to one coarse clock tick earlier.
const cloneMargin = 50 * time.Millisecond

// SealBase seals the target of the base directory dir: its listing, and its
// contents written to SHA256SUMS in dir (durably), whose digest the seal
// records. reuse, when not nil, is the seed a refresh may take digests
// from.
func SealBase(dir string, reuse *Reuse) (TargetSeal, error) {
	seal, _, err := sealBase(dir, reuse)
	return seal, err
}

// sealBase is SealBase; for a refresh it also returns the files its target
// shares with its seed (the seed's inodes) that were written after the
// seed's seal, as the seed's check would name them (see SeedChangedError).
// The target's listing runs after the seal's time is taken, so a write
// before that shows.
func sealBase(dir string, reuse *Reuse) (TargetSeal, []string, error) {
	files := store.BaseFiles(dir)
	sealed := time.Now()
	seal, w, err := listing(files.Target, SealVersion, time.Time{}, time.Time{}, true)
	if err != nil {
		return TargetSeal{}, nil, err
	}
	seal.Sealed = sealed.UTC()
	sums := hashAll(files.Target, w.files, reuse.digests())
	var buf bytes.Buffer
	var written []string
	for i, f := range w.files {
		if sums[i].err != nil {
			return TargetSeal{}, nil, fmt.Errorf("hash %s: %w", f.rel, sums[i].err)
		}
		if sums[i].written {
			written = append(written, f.rel)
		}
		writeSum(&buf, sums[i].sum, "target/"+f.rel)
	}
	if err := atomicfile.WriteFile(files.Contents, buf.Bytes(), 0o644); err != nil {
		return TargetSeal{}, nil, err
	}
	d := sha256.Sum256(buf.Bytes())
	seal.Contents = hex.EncodeToString(d[:])
	return seal, written, nil
}

// digests returns, for a refresh, what gives the seed's digest of a file
// the refresh can prove is the seed's (see Contents); nil without a seed
// or digests of its.
func (u *Reuse) digests() *seedDigests {
	if u == nil || u.Seed == nil || u.Seed.TargetSeal.Contents == "" {
		return nil
	}
	seedFiles := store.BaseFiles(u.Seed.Dir)
	recorded, err := readSums(seedFiles.Contents, u.Seed.TargetSeal.Contents)
	if err != nil {
		return nil // hashed: a refresh seals what it holds, whatever its seed's record
	}
	d := &seedDigests{target: seedFiles.Target, recorded: recorded, cloned: u.Cloned}
	if u.Seed.TargetSeal.Version >= SealVersion {
		d.sealed = u.Seed.TargetSeal.Sealed
		d.windows, d.windowsErr = readWindows(u.Seed.Store)
	}
	return d
}

// seedDigests gives a refresh its seed's digests: recorded, by name in
// SHA256SUMS, for the seed's target; cloned is Reuse's. sealed is the
// seed's seal's time (zero for a seal without change times), and windows
// the store's link windows, for sum to tell a write into a shared file.
type seedDigests struct {
	target     string
	recorded   map[string]string
	cloned     time.Time
	sealed     time.Time
	windows    windows
	windowsErr error
}

// openDir opens the seed's directory d (slash-separated, relative to its
// target) for sum to stat its files relative to; -1 when it does not
// open. The open follows links as lstat by the full path would.
func (u *seedDigests) openDir(d string) int {
	fd, err := unix.Open(filepath.Join(u.target, filepath.FromSlash(d)), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// sum returns the seed's digest of f, "" unless f is the seed's file at
// its path as that is now: the seed's inode (a layered refresh links it),
// or a clone of a file of the same size and mtime whose change time is
// before the clone ended. dfd is f's directory in the seed (openDir), or
// -1 to stat the seed's file by its full path. A file that is the seed's
// inode keeps the seed's digest whatever was written into it since, so
// that verify --full names such a write in every base that shares it; and
// written reports such a write as the seed's check would see it (a change
// time after the seed's seal that no link window explains), for the
// seed's inode and for a clone that takes the seed's digest.
func (u *seedDigests) sum(dfd int, f file) (sum string, written bool) {
	var st unix.Stat_t
	var err error
	if dfd >= 0 {
		err = unix.Fstatat(dfd, path.Base(f.rel), &st, unix.AT_SYMLINK_NOFOLLOW)
	} else {
		err = unix.Lstat(filepath.Join(u.target, filepath.FromSlash(f.rel)), &st)
	}
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", false
	}
	late := false
	if !u.sealed.IsZero() {
		ctime := time.Unix(st.Ctim.Unix())
		late = ctime.After(u.sealed) && (u.windowsErr != nil || !u.windows.explain(ctime))
	}
	shared := st.Ino == f.ino
	if shared {
		written = late
	}
	sum, ok := u.recorded["target/"+f.rel]
	if !ok || st.Size != f.size || !time.Unix(st.Mtim.Unix()).Equal(f.mtime) {
		return "", written
	}
	if shared {
		return sum, written
	}
	if !u.cloned.IsZero() && f.ctime.Before(u.cloned.Add(-cloneMargin)) {
		// A clone of a file written after the seed's seal may hold the
		// write (it may have come before the clone): counted as one.
		return sum, late
	}
	return "", written
}

type hashed struct {
	sum     string
	written bool // a file shared with the seed, written after the seed's seal (seedDigests.sum)
	err     error
}

// hashAll returns the SHA-256 of each of files in target, taking reused's
// answer where it has one (the seed's files stat'ed relative to their
// directory, opened once a batch: an lstat of each by its full path took
// 35-68 ms of CPU in a refresh on the bench's large workspace), on as many
// goroutines as there are cores. Each
// goroutine takes a batch of one directory's files at a time (hashBatches)
// and opens them relative to it: opening every file by its full path took
// a third longer on BenchmarkSealBase.
func hashAll(target string, files []file, reused *seedDigests) []hashed {
	out := make([]hashed, len(files))
	batches := hashBatches(files)
	next := make(chan []int, len(batches))
	for _, b := range batches {
		next <- b
	}
	close(next)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1<<20)
			for idx := range next {
				d := path.Dir(files[idx[0]].rel)
				dfd, err := unix.Open(filepath.Join(target, filepath.FromSlash(d)), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				seedDir := -1
				if reused != nil {
					seedDir = reused.openDir(d)
				}
				for _, i := range idx {
					f := files[i]
					if reused != nil {
						sum, written := reused.sum(seedDir, f)
						out[i].written = written
						if sum != "" {
							out[i].sum = sum
							continue
						}
					}
					if err != nil {
						out[i].err = &os.PathError{Op: "open", Path: d, Err: err}
						continue
					}
					out[i].sum, out[i].err = hashFile(dfd, path.Base(f.rel), buf)
				}
				if err == nil {
					unix.Close(dfd)
				}
				if seedDir >= 0 {
					unix.Close(seedDir)
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// Batch limits of hashAll: a directory's files go to the goroutines in
// batches of at most hashBatchFiles files or hashBatchBytes bytes, so that
// a target's deps/, which holds most of its files and most of its bytes,
// is hashed on every core and not on one.
const (
	hashBatchFiles = 64
	hashBatchBytes = 8 << 20
)

// hashBatches splits files into batches of indices, each of files in one
// directory, within the batch limits (a file larger than hashBatchBytes is
// a batch of its own). Batches of the same directory follow each other.
func hashBatches(files []file) [][]int {
	var dirs []string
	byDir := map[string][]int{}
	for i, f := range files {
		d := path.Dir(f.rel)
		if _, ok := byDir[d]; !ok {
			dirs = append(dirs, d)
		}
		byDir[d] = append(byDir[d], i)
	}
	var batches [][]int
	for _, d := range dirs {
		var cur []int
		var bytes int64
		for _, i := range byDir[d] {
			if len(cur) > 0 && (len(cur) == hashBatchFiles || bytes+files[i].size > hashBatchBytes) {
				batches = append(batches, cur)
				cur, bytes = nil, 0
			}
			cur = append(cur, i)
			bytes += files[i].size
		}
		batches = append(batches, cur)
	}
	return batches
}

// hashFile returns the SHA-256 of the file name in the directory dfd,
// never following a link. It reads through a plain descriptor into buf:
// an *os.File registers each file with the runtime's poller (a failing
// epoll_ctl per file) and copies through a buffer of its own, which took
// a third of a seal's time on BenchmarkSealBase's small files.
func hashFile(dfd int, name string, buf []byte) (string, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	h := sha256.New()
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", &os.PathError{Op: "read", Path: name, Err: err}
		}
		if n == 0 {
			break
		}
		h.Write(buf[:n])
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeSum writes one line of sha256sum's format.
func writeSum(b *bytes.Buffer, sum, name string) {
	if strings.ContainsAny(name, "\\\n\r") {
		b.WriteByte('\\')
		name = strings.NewReplacer("\\", "\\\\", "\n", "\\n", "\r", "\\r").Replace(name)
	}
	b.WriteString(sum)
	b.WriteString("  ")
	b.WriteString(name)
	b.WriteByte('\n')
}

// readSums reads a SHA256SUMS file whose SHA-256 must be digest, as a map
// from name to digest.
func readSums(p, digest string) (map[string]string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	if d := sha256.Sum256(b); hex.EncodeToString(d[:]) != digest {
		return nil, fmt.Errorf("%s is not the file base.json records (its SHA-256 is %x, base.json records %s)", p, d, digest)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		escaped := strings.HasPrefix(line, "\\")
		line = strings.TrimPrefix(line, "\\")
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 {
			return nil, fmt.Errorf("%s: a line that is not `<sha256>  <name>`: %q", p, sc.Text())
		}
		if escaped {
			name = unescapeSum(name)
		}
		out[name] = sum
	}
	return out, sc.Err()
}

func unescapeSum(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			default:
				b.WriteByte(s[i])
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ErrNoContents is a base whose seal records no content digests (an older
// Ferry built it, or a test sealed only its listing).
var ErrNoContents = errors.New("its seal records no content digests")

// VerifyFull checks r's listing as Verify does and then reads every regular
// file of its target, comparing its bytes with the digests recorded at
// seal time. A base whose seal has no digests is checked by its listing
// and VerifyFull returns an error wrapping ErrNoContents, of kind Refused
// only when the listing differs.
func VerifyFull(r *Record) error {
	if r.TargetSeal.Digest == "" {
		return Verify(r)
	}
	ce := check(r)
	if ce != nil && ce.Err != nil {
		return changed(r, ce)
	}
	if r.TargetSeal.Contents == "" {
		if ce != nil {
			return changed(r, ce)
		}
		return fmt.Errorf("base %s: %w", r.ID, ErrNoContents)
	}
	if ce == nil {
		ce = &ChangedError{ID: r.ID, Target: r.Target, Recorded: r.TargetSeal, Found: r.TargetSeal}
	}
	files := store.BaseFiles(r.Dir)
	recorded, err := readSums(files.Contents, r.TargetSeal.Contents)
	if err != nil {
		ce.Contents = "its content digests cannot be compared: " + err.Error()
		return changed(r, ce)
	}
	_, w, err := listing(r.Target, SealVersion, time.Time{}, time.Time{}, true)
	if err != nil {
		ce.Err = err
		return changed(r, ce)
	}
	sums := hashAll(r.Target, w.files, nil)
	seen := make(map[string]bool, len(w.files))
	for i, f := range w.files {
		name := "target/" + f.rel
		seen[name] = true
		want, ok := recorded[name]
		switch {
		case sums[i].err != nil && errors.Is(sums[i].err, fs.ErrNotExist):
			ce.Differ = append(ce.Differ, f.rel) // gone since it was listed
		case sums[i].err != nil:
			ce.Err = sums[i].err
			return changed(r, ce)
		case !ok || sums[i].sum != want:
			ce.Differ = append(ce.Differ, f.rel)
		}
	}
	for name := range recorded {
		if !seen[name] {
			ce.Differ = append(ce.Differ, strings.TrimPrefix(name, "target/"))
		}
	}
	if len(ce.Differ) == 0 && sameListing(ce.Found, ce.Recorded) && len(ce.Newer) == 0 {
		return nil
	}
	return changed(r, ce)
}
