package share

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/ferrydev/ferry/internal/failpoint"
	"github.com/ferrydev/ferry/pkg/store"
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

// writeArchive writes base directory dir's stream to w.
func writeArchive(w io.Writer, dir string) error {
	files := store.BaseFiles(dir)
	tw := tar.NewWriter(w)
	a := &archiver{tw: tw, links: map[[2]uint64]string{}, buf: make([]byte, 1<<20)}
	if err := a.add(files.Record, recordName); err != nil {
		return err
	}
	if _, err := os.Lstat(files.Relocation); err == nil {
		if err := a.add(files.Relocation, relocationName); err != nil {
			return err
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
			return err
		}
	}
	return tw.Close()
}

type archiver struct {
	tw    *tar.Writer
	links map[[2]uint64]string // (dev, inode) of a file with several links -> its first name
	buf   []byte
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

// extracted is what extract kept aside: the files written last.
type extracted struct {
	record     []byte
	relocation []byte
	files      int
}

// extract reads a stream into the base directory root (its src/ already
// holds the puller's checkout of the commit, whose files the stream's
// replace), keeping base.json and relocation.json aside. Every name is
// resolved inside root: a name or link that would lead out of it fails.
func extract(r io.Reader, root *os.Root) (*extracted, error) {
	tr := tar.NewReader(r)
	out := &extracted{}
	type dirTime struct {
		name  string
		mtime time.Time
	}
	var dirs []dirTime
	buf := make([]byte, 1<<20)
	for {
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
			if err := replace(root, name); err != nil {
				return nil, err
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
			if err != nil {
				return nil, err
			}
			_, err = io.CopyBuffer(f, tr, buf)
			if err == nil {
				err = f.Chmod(perm) // whatever the umask
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, fmt.Errorf("write %s: %w", name, err)
			}
			if err := root.Chtimes(name, h.ModTime, h.ModTime); err != nil {
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
			if err := replace(root, name); err != nil {
				return nil, err
			}
			if err := root.Link(h.Linkname, name); err != nil {
				return nil, err
			}
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
	if out.record == nil {
		return nil, errors.New("the stream holds no base.json")
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

// replace removes what the checkout holds at name, so the stream's entry
// (content, mode and mtime) takes its place.
func replace(root *os.Root, name string) error {
	if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
