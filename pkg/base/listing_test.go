package base

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// serialListing is the walk listing made before it read directories on
// several goroutines: one directory at a time, each entry hashed as it is
// statted. A listing must be the same, byte for byte, or every base sealed
// before would fail its check.
func serialListing(target string, version int, since, sealed time.Time, collect bool) (TargetSeal, walk, error) {
	w := &lister{h: sha256.New(), version: version, since: since, sealed: sealed, collect: collect}
	w.seal.Version = version
	var st unix.Stat_t
	if err := unix.Lstat(target, &st); err != nil {
		return TargetSeal{}, walk{}, &os.PathError{Op: "lstat", Path: target, Err: err}
	}
	w.add(".", &st, "")
	var dir func(parent int, name, rel string) error
	dir = func(parent int, name, rel string) error {
		fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: name, Err: err}
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		names, err := f.Readdirnames(-1)
		if err != nil {
			return err
		}
		sort.Strings(names)
		for _, n := range names {
			p := n
			if rel != "" {
				p = rel + "/" + n
			}
			if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return &os.PathError{Op: "lstat", Path: p, Err: err}
			}
			link := ""
			if st.Mode&unix.S_IFMT == unix.S_IFLNK {
				buf := make([]byte, 4096)
				k, err := unix.Readlinkat(fd, n, buf)
				if err != nil {
					return &os.PathError{Op: "readlink", Path: p, Err: err}
				}
				link = string(buf[:k])
			}
			w.add(p, &st, link)
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				if err := dir(fd, n, p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := dir(unix.AT_FDCWD, target, ""); err != nil {
			return TargetSeal{}, walk{}, err
		}
	}
	w.seal.Digest = hex.EncodeToString(w.h.Sum(nil))
	return w.seal, w.found, nil
}

// The listing read on several goroutines is the serial walk's, digest,
// counts and findings alike, over a tree of many directories, deep and
// wide, with links, empty directories and late files; and it fails where
// the serial walk fails, with the same error.
func TestListingIsTheSerialWalks(t *testing.T) {
	target := t.TempDir()
	for i := range 3000 {
		d := filepath.Join(target, "debug", fmt.Sprintf("g%d", i%7), fmt.Sprintf("d%03d", i/40), fmt.Sprintf("e%d", i%3))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%04d", i)), []byte(fmt.Sprint(i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		if err := os.MkdirAll(filepath.Join(target, "debug", "empty", fmt.Sprint(i)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(fmt.Sprintf("../g1/d%03d", i), filepath.Join(target, "debug", "g0", fmt.Sprintf("link%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	since := time.Now().Add(-time.Hour)
	sealed := time.Now()
	time.Sleep(10 * time.Millisecond)
	for i := range 20 { // written after the seal: late files and newer entries
		if err := os.WriteFile(filepath.Join(target, "debug", "g3", fmt.Sprintf("late%d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, version := range []int{0, SealVersion} {
		for _, collect := range []bool{false, true} {
			want, wantW, err := serialListing(target, version, since, sealed, collect)
			if err != nil {
				t.Fatal(err)
			}
			for range 5 {
				got, gotW, err := listing(target, version, since, sealed, collect)
				if err != nil {
					t.Fatal(err)
				}
				if got != want || !reflect.DeepEqual(gotW, wantW) {
					t.Fatalf("version %d, collect %v: listing %+v (%d newer, %d late, %d files), the serial walk's %+v (%d, %d, %d)",
						version, collect, got, len(gotW.newer), len(gotW.late), len(gotW.files), want, len(wantW.newer), len(wantW.late), len(wantW.files))
				}
			}
			if want.Entries < 3000+50 || (version == SealVersion && collect && len(wantW.files) < 3000) {
				t.Fatalf("the serial walk saw %d entries, %d files", want.Entries, len(wantW.files))
			}
		}
	}

	if os.Geteuid() == 0 {
		return // root reads a directory without permissions
	}
	locked := filepath.Join(target, "debug", "g4", "d010")
	if err := os.Chmod(locked, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(locked, 0o755)
	_, _, want := serialListing(target, SealVersion, since, sealed, true)
	_, _, got := listing(target, SealVersion, since, sealed, true)
	if want == nil || !errors.Is(got, fs.ErrPermission) || got.Error() != want.Error() {
		t.Fatalf("an unreadable directory: listing says %v, the serial walk %v", got, want)
	}
}
