package share

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ferrydev/ferry/internal/failpoint"
	"github.com/ferrydev/ferry/pkg/store"
	"golang.org/x/sys/unix"
)

// The stream: one tar (PAX headers, so mtimes keep their nanoseconds)
// holding base.json, relocation.json when present, then src/ and target/
// in lexical order. Files with several links inside the base (Cargo links
// uplifted outputs to deps/) are stored once and linked again on extract.
const (
	recordName     = "base.json"
	relocationName = "relocation.json"
	srcPrefix      = "src"
	targetPrefix   = "target"
)

// seedKey is the PAX record of a delta stream's file whose content is the
// seed base's file at the same path: its value is the content's SHA-256,
// and the entry holds no bytes.
const seedKey = "FERRY.seed.sha256"

// writeArchive writes base directory dir's stream to w. With seed (a base
// directory), it writes a delta stream: a target file whose content is the
// seed's file at the same path is an entry naming its digest (seedKey).
func writeArchive(w io.Writer, dir, seed string) (*archiver, error) {
	files := store.BaseFiles(dir)
	tw := tar.NewWriter(w)
	a := &archiver{tw: tw, links: map[[2]uint64]string{}, buf: make([]byte, 1<<20), seed: seed}
	if err := a.add(files.Record, recordName); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(files.Relocation); err == nil {
		if err := a.add(files.Relocation, relocationName); err != nil {
			return nil, err
		}
	}
	for _, t := range []struct{ dir, name string }{{files.Src, srcPrefix}, {files.Target, targetPrefix}} {
		err := filepath.WalkDir(t.dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(t.dir, p)
			if err != nil {
				return err
			}
			if t.name == srcPrefix && rel == ".git" {
				// The checkout's link to its repository: the puller's
				// git makes its own.
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			return a.add(p, path.Join(t.name, filepath.ToSlash(rel)))
		})
		if err != nil {
			return nil, err
		}
	}
	return a, tw.Close()
}

type archiver struct {
	tw    *tar.Writer
	links map[[2]uint64]string // (dev, inode) of a file with several links -> its first name
	buf   []byte
	seed  string // the seed's base directory, for a delta stream
	// seeded and seededBytes count the files a delta stream takes from
	// the seed.
	seeded      int
	seededBytes int64
}

func (a *archiver) add(p, name string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	link := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	}
	h, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	h.Name, h.Format = name, tar.FormatPAX
	// Owners are the puller's; access and change times mean nothing there.
	h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
	h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
		key := [2]uint64{uint64(st.Dev), uint64(st.Ino)}
		if first, ok := a.links[key]; ok {
			h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
			return a.tw.WriteHeader(h)
		}
		a.links[key] = name
	}
	if a.seed != "" && fi.Mode().IsRegular() && strings.HasPrefix(name, targetPrefix+"/") {
		sum, err := sameContent(p, filepath.Join(a.seed, filepath.FromSlash(name)), fi.Size())
		if err != nil {
			return err
		}
		if sum != "" {
			h.PAXRecords = map[string]string{seedKey: sum}
			a.seeded++
			a.seededBytes += h.Size
			h.Size = 0
			return a.tw.WriteHeader(h)
		}
	}
	if err := a.tw.WriteHeader(h); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.CopyBuffer(a.tw, f, a.buf)
	if err == nil && n != h.Size {
		err = fmt.Errorf("%s changed size while it was read", p)
	}
	return err
}

// sameContent returns the SHA-256 of file p when the regular file seed
// holds the same size bytes, else "".
func sameContent(p, seed string, size int64) (string, error) {
	fi, err := os.Lstat(seed)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != size {
		return "", nil
	}
	a, err := fileSum(p)
	if err != nil {
		return "", err
	}
	b, err := fileSum(seed)
	if err != nil || a != b {
		return "", nil
	}
	return a, nil
}

func fileSum(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// extracted is what extract kept aside: the files written last.
type extracted struct {
	record     []byte
	relocation []byte
	files      int
	seeded     int // files taken from the seed
	linked     int // of them, hard links of the seed's file
}

// SeedError is a delta stream's file that the local seed base does not
// hold (a relocation removed it, or it differs): the full object is
// pulled instead.
type SeedError struct {
	Name string
	Why  string
}

func (e *SeedError) Error() string {
	return fmt.Sprintf("the seed base's %s %s", e.Name, e.Why)
}

// extract reads a stream into the base directory root (its src/ already
// holds the puller's checkout of the commit, whose files the stream's
// replace), keeping base.json and relocation.json aside. Every name is
// resolved inside root: a name or link that would lead out of it fails.
//
// Small files are written by one writer goroutine while this one reads
// on: creating a file took the kernel 100-300 µs on this machine's ext4,
// as long as decompressing 200 kB, and the large bench workspace's target
// has 7,300 files. (With two or four writers the creates contended in the
// kernel.) Directories are made here, before the files a later
// entry puts in them; hard links are made once every file is written.
//
// With seed (a local base directory), entries naming a content digest
// (seedKey) are copied from the seed's file at the same path, and their
// content checked against it; a *SeedError when the seed lacks it.
func extract(r io.Reader, root *os.Root, seed string) (*extracted, error) {
	tr := tar.NewReader(r)
	out := &extracted{}
	type dirTime struct {
		name  string
		mtime time.Time
	}
	var dirs []dirTime
	var links []*tar.Header
	w := newFileWriter(root)
	defer w.wait() // on an early return: the workers end, their error is moot
	big := &dirRoot{root: root}
	defer big.close()
	buf := make([]byte, 1<<20)
	for {
		if err := w.failed(); err != nil {
			return nil, err
		}
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read the base's stream: %w", err)
		}
		name := h.Name
		if !filepath.IsLocal(name) || name != path.Clean(name) {
			return nil, fmt.Errorf("the stream names %q, outside the base", name)
		}
		switch {
		case name == recordName || name == relocationName:
			b, err := io.ReadAll(io.LimitReader(tr, 64<<20))
			if err != nil {
				return nil, err
			}
			if name == recordName {
				out.record = b
			} else {
				out.relocation = b
			}
			continue
		case name == srcPrefix || name == targetPrefix || strings.HasPrefix(name, srcPrefix+"/") || strings.HasPrefix(name, targetPrefix+"/"):
		default:
			return nil, fmt.Errorf("the stream names %q, which is not part of a base", name)
		}
		if name == path.Join(srcPrefix, ".git") {
			return nil, fmt.Errorf("the stream holds the checkout's .git")
		}
		perm := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return nil, err
			}
			if err := root.Chmod(name, perm); err != nil {
				return nil, err
			}
			dirs = append(dirs, dirTime{name, h.ModTime})
		case tar.TypeReg:
			// The target is new; the checkout's files are replaced.
			f := &file{name: name, perm: perm, mtime: h.ModTime, replace: strings.HasPrefix(name, srcPrefix+"/")}
			if sum, ok := h.PAXRecords[seedKey]; ok {
				if seed == "" || !strings.HasPrefix(name, targetPrefix+"/") || h.Size != 0 {
					return nil, fmt.Errorf("the stream takes %s from a seed base, which this pull has none of", name)
				}
				linked, err := f.fromSeed(big, filepath.Join(seed, filepath.FromSlash(name)), sum, buf)
				if err != nil {
					return nil, err
				}
				out.seeded++
				if linked {
					out.linked++
				}
			} else if h.Size <= pooledFileMax {
				// Read here, written by the writer.
				f.data = make([]byte, h.Size)
				if _, err := io.ReadFull(tr, f.data); err != nil {
					return nil, fmt.Errorf("read %s from the stream: %w", name, err)
				}
				w.add(f)
			} else if err := f.write(big, tr, buf); err != nil {
				return nil, err
			}
			out.files++
			if out.files == 100 {
				failpoint.Hit("share/pull-extracting")
			}
		case tar.TypeLink:
			if !filepath.IsLocal(h.Linkname) {
				return nil, fmt.Errorf("the stream links %q to %q, outside the base", name, h.Linkname)
			}
			links = append(links, h)
		case tar.TypeSymlink:
			if err := replace(root, name); err != nil {
				return nil, err
			}
			// A link's target is only text here; root refuses to follow
			// one out of the base when a later name passes through it.
			if err := root.Symlink(h.Linkname, name); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("the stream holds %q of tar type %q, which a base does not hold", name, h.Typeflag)
		}
	}
	if err := w.wait(); err != nil {
		return nil, err
	}
	if out.record == nil {
		return nil, errors.New("the stream holds no base.json")
	}
	for _, h := range links {
		if err := replace(root, h.Name); err != nil {
			return nil, err
		}
		if err := root.Link(h.Linkname, h.Name); err != nil {
			return nil, err
		}
	}
	// A directory's mtime moves with every entry written into it: set them
	// last, deepest first.
	sort.SliceStable(dirs, func(i, j int) bool { return strings.Count(dirs[i].name, "/") > strings.Count(dirs[j].name, "/") })
	for _, d := range dirs {
		if err := root.Chtimes(d.name, d.mtime, d.mtime); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// pooledFileMax is the largest file the writer writes (bigger ones are
// written by extract as they are read); with pooledQueue files waiting,
// it holds at most about 34 MB.
const (
	pooledFileMax = 1 << 20
	pooledQueue   = 32
)

// writebackMin is the smallest file whose writeback starts as soon as it
// is written.
const writebackMin = 64 << 10

// file is a regular file of the stream.
type file struct {
	name    string
	perm    fs.FileMode
	mtime   time.Time
	replace bool   // the checkout may hold it
	data    []byte // its content, when the writer writes it
}

// write creates the file with content from r (f.data when r is nil), its
// mode whatever the umask, and its mtime.
func (f *file) write(d *dirRoot, r io.Reader, buf []byte) error {
	root, name, err := d.of(f.name)
	if err != nil {
		return err
	}
	if f.replace {
		if err := replace(root, name); err != nil {
			return err
		}
	}
	out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.perm)
	if err != nil {
		return err
	}
	var n int64
	if r != nil {
		n, err = io.CopyBuffer(out, r, buf)
	} else {
		var m int
		m, err = out.Write(f.data)
		n = int64(m)
	}
	if err == nil {
		err = out.Chmod(f.perm) // whatever the umask
	}
	if err == nil && n >= writebackMin {
		startWriteback(out)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", f.name, err)
	}
	return root.Chtimes(name, f.mtime, f.mtime)
}

// fromSeed makes the file from the seed's file from, whose content must
// have SHA-256 sum. When that file is this one already (content, mode and
// mtime), the file is a hard link of it, as a layered refresh's unchanged
// files are of its seed's: a ready base's files are never written (the
// store is read-only in every sandbox, and forks get new inodes), and a
// write on the host shows in the seal of each base holding the inode.
// Otherwise the content is copied. linked says which.
func (f *file) fromSeed(d *dirRoot, from, sum string, buf []byte) (linked bool, err error) {
	in, err := os.Open(from)
	if errors.Is(err, fs.ErrNotExist) {
		return false, &SeedError{Name: f.name, Why: "is missing"}
	}
	if err != nil {
		return false, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return false, err
	}
	h := sha256.New()
	same := fi.Mode().IsRegular() && fi.Mode().Perm() == f.perm && fi.ModTime().Equal(f.mtime)
	if same {
		_, err = io.CopyBuffer(h, in, buf)
	} else {
		err = f.write(d, io.TeeReader(in, h), buf)
	}
	if err != nil {
		return false, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return false, &SeedError{Name: f.name, Why: "has other content than the published base's"}
	}
	if !same {
		return false, nil
	}
	switch err := f.link(d, from); {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, &SeedError{Name: f.name, Why: "is missing"} // gone since it was read
	default:
		// A link the filesystem refuses (too many links to the inode, say):
		// the content, checked above, is copied instead.
		if _, err := in.Seek(0, io.SeekStart); err != nil {
			return false, err
		}
		return false, f.write(d, in, buf)
	}
}

// link makes the file a hard link of from, a file outside the base
// directory (the seed's), created in its directory as resolved in the
// base directory.
func (f *file) link(d *dirRoot, from string) error {
	dir, name, err := d.dirFile(f.name)
	if err != nil {
		return err
	}
	if err := unix.Linkat(unix.AT_FDCWD, from, int(dir.Fd()), name, 0); err != nil {
		return fmt.Errorf("link %s to the seed's file: %w", f.name, err)
	}
	return nil
}

// dirRoot is the root of one directory below the base directory at a
// time: a file's three operations (create, chmod, chtimes) then resolve its
// name in it, not its whole path (target/debug/deps/x: three directories)
// from the base directory each time. The stream holds a directory's files
// one after the other.
type dirRoot struct {
	root *os.Root // the base directory
	name string
	dir  *os.Root
	file *os.File // dir opened, for the calls os.Root does not make (linkat)
}

// of returns the root of name's directory and name's last element.
func (d *dirRoot) of(name string) (*os.Root, string, error) {
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if d.dir == nil || d.name != dir {
		d.close()
		r, err := d.root.OpenRoot(dir)
		if err != nil {
			return nil, "", err
		}
		d.dir, d.name = r, dir
	}
	return d.dir, base, nil
}

// dirFile is of with name's directory as an open file.
func (d *dirRoot) dirFile(name string) (*os.File, string, error) {
	dir, base, err := d.of(name)
	if err != nil {
		return nil, "", err
	}
	if d.file == nil {
		if d.file, err = dir.Open("."); err != nil {
			return nil, "", err
		}
	}
	return d.file, base, nil
}

func (d *dirRoot) close() {
	if d.file != nil {
		d.file.Close()
		d.file = nil
	}
	if d.dir != nil {
		d.dir.Close()
		d.dir = nil
	}
}

// fileWriter is extract's goroutine writing files.
type fileWriter struct {
	root  *os.Root
	queue chan *file
	wg    sync.WaitGroup
	once  sync.Once
	mu    sync.Mutex
	err   error
}

func newFileWriter(root *os.Root) *fileWriter {
	w := &fileWriter{root: root, queue: make(chan *file, pooledQueue)}
	w.wg.Go(func() {
		d := &dirRoot{root: w.root}
		defer d.close()
		for f := range w.queue {
			if w.failed() != nil {
				continue // drain: extract stops at its next entry
			}
			if err := f.write(d, nil, nil); err != nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
			}
		}
	})
	return w
}

func (w *fileWriter) add(f *file) { w.queue <- f }

// failed returns the first write that failed, if any.
func (w *fileWriter) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// wait lets the writer write what it has, ends it and returns the first
// error; calls after the first only return the error.
func (w *fileWriter) wait() error {
	w.once.Do(func() {
		close(w.queue)
		w.wg.Wait()
	})
	return w.failed()
}

// replace removes what the checkout holds at name, so the stream's entry
// (content, mode and mtime) takes its place.
func replace(root *os.Root, name string) error {
	if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
