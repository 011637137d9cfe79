// Package treetest lays out directory trees as a finished Cargo build
// leaves them and compares them entry by entry, for the tests of forks and
// of folded overlay layers, which promise the same tree to the nanosecond.
// It also runs a test again in a user and mount namespace of its own,
// where an overlay can be mounted without privilege.
package treetest

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/internal/unpriv"
	"github.com/ferrydev/ferry/pkg/platform"
)

// Entry is one entry of a tree to make: Kind 'd' (a directory), 'f' (a
// file holding Data), 'l' (a symlink to Data) or 'h' (a hard link of the
// entry at Data, relative to the root). Mode is a 'd' or 'f' entry's
// permission bits.
type Entry struct {
	Path string
	Kind byte
	Mode uint32
	Data string
}

// TimeOf gives entry i its own mtime, with nanoseconds; i = -1 is the root.
func TimeOf(i int) unix.Timespec {
	return unix.Timespec{Sec: 1709294400 + int64(i+1)*37, Nsec: int64(123457 + (i+1)*7919*1013)}
}

// MakeTarget writes entries, parents before children, under root
// (created), then sets modes and distinct times (TimeOf) children-first,
// as a finished build leaves them.
func MakeTarget(t testing.TB, root string, entries []Entry) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(root, 0o755))
	for _, e := range entries {
		p := filepath.Join(root, e.Path)
		switch e.Kind {
		case 'd':
			must(os.Mkdir(p, 0o755))
		case 'f':
			must(os.WriteFile(p, []byte(e.Data), 0o644))
		case 'l':
			must(os.Symlink(e.Data, p))
		case 'h':
			must(os.Link(filepath.Join(root, e.Data), p))
		}
	}
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		p := filepath.Join(root, e.Path)
		if e.Kind == 'd' || e.Kind == 'f' {
			must(unix.Chmod(p, e.Mode))
		}
		if e.Kind != 'h' {
			must(unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{TimeOf(i), TimeOf(i)}, unix.AT_SYMLINK_NOFOLLOW))
		}
	}
	must(unix.UtimesNanoAt(unix.AT_FDCWD, root, []unix.Timespec{TimeOf(-1), TimeOf(-1)}, 0))
}

// Inode names a file: its device and inode number.
type Inode struct{ Dev, Ino uint64 }

// Node is what a tree comparison sees of one entry.
type Node struct {
	Mode   uint32 // st_mode: type and permission bits
	Mtime  unix.Timespec
	Ctime  unix.Timespec
	ID     Inode
	Data   string // bytes of a file, text of a link
	Nlinks uint64
}

// Snapshot reads the whole tree at root, keyed by path relative to root
// ("." for root itself).
func Snapshot(t testing.TB, root string) map[string]Node {
	t.Helper()
	out := map[string]Node{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		n := Node{Mode: uint32(st.Mode), Mtime: st.Mtim, Ctime: st.Ctim, ID: Inode{uint64(st.Dev), st.Ino}, Nlinks: uint64(st.Nlink)}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			n.Data = string(b)
		case unix.S_IFLNK:
			n.Data, err = os.Readlink(path)
			if err != nil {
				return err
			}
		}
		rel, _ := filepath.Rel(root, path)
		out[rel] = n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FmtTime prints ts in UTC, to the nanosecond.
func FmtTime(ts unix.Timespec) string {
	return time.Unix(ts.Sec, ts.Nsec).UTC().Format(time.RFC3339Nano)
}

// SameTree fails t unless got has exactly want's entries, each of the same
// type, permission bits, bytes or link text and mtime.
func SameTree(t testing.TB, want, got map[string]Node) {
	t.Helper()
	for rel, b := range want {
		f, ok := got[rel]
		if !ok {
			t.Errorf("%s: missing from the fork", rel)
			continue
		}
		if b.Mode != f.Mode {
			t.Errorf("%s: mode %o in the fork, %o in the base", rel, f.Mode, b.Mode)
		}
		if b.Mtime != f.Mtime {
			t.Errorf("%s: mtime %s in the fork, %s in the base", rel, FmtTime(f.Mtime), FmtTime(b.Mtime))
		}
		if b.Data != f.Data {
			t.Errorf("%s: content differs (%d bytes in the fork, %d in the base)", rel, len(f.Data), len(b.Data))
		}
	}
	for rel := range got {
		if _, ok := want[rel]; !ok {
			t.Errorf("%s: in the fork but not in the base", rel)
		}
	}
}

// Dir makes a fresh directory under parent, removed at the end of the
// test even where a fork left read-only directories in it.
func Dir(t testing.TB, parent string) string {
	t.Helper()
	dir, err := os.MkdirTemp(parent, "ferry-fork-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A fork's directories take the base's modes, and overlayfs
		// leaves work/work with mode 0: open them up before removing.
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(path, 0o700)
			}
			return nil
		})
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("clean up %s: %v", dir, err)
		}
	})
	return dir
}

// ciXFS is where .ci/run mounts the XFS filesystem with reflink=1.
const ciXFS = "/mnt/ferry-xfs"

// XFSRoot returns a writable directory on a filesystem that clones, or why
// there is none.
func XFSRoot() (dir, why string) {
	if d := knobs.XFS(); d != "" {
		return d, ""
	}
	// unpriv.Rerun gives the re-run a fixed environment without
	// FERRY_TEST_XFS, so the re-run looks where .ci/run mounts it.
	if unpriv.IsChild() && unix.Access(ciXFS, unix.W_OK) == nil {
		return ciXFS, ""
	}
	return "", "FERRY_TEST_XFS is not set (.ci/run mounts XFS with reflink=1 and sets it)"
}

// NeedOverlay skips t, with the blocker's explanation, when this host
// cannot mount an unprivileged overlay with its upper dir in parent.
// Nothing else may skip an overlay test: where the probe passes, the test
// must run.
func NeedOverlay(t testing.TB, parent string) {
	t.Helper()
	b, err := platform.Real().OverlayBlocker(Dir(t, parent))
	if err != nil {
		t.Fatalf("overlay probe in %s: %v", parent, err)
	}
	if b != nil {
		t.Skipf("overlay: %v\n%s", b, b.Remedy)
	}
}

// IsWhiteout reports whether path is overlayfs's whiteout: a character
// device 0/0 in the upper dir hiding the lower entry of its name.
func IsWhiteout(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

// E is the entry at path of kind ('d', 'f', 'l' or 'h'), mode and data (see
// Entry).
func E(path string, kind byte, mode uint32, data string) Entry {
	return Entry{Path: path, Kind: kind, Mode: mode, Data: data}
}

const mib = 1 << 20

// CargoTarget is a small but realistic Cargo target dir, parents before
// children.
func CargoTarget() []Entry {
	rng := rand.New(rand.NewPCG(1, 2))
	rlib := make([]byte, mib)
	for i := range rlib {
		rlib[i] = byte(rng.Uint32())
	}
	fp := "debug/.fingerprint/demo-0f1e2d3c4b5a6978"
	return []Entry{
		E("CACHEDIR.TAG", 'f', 0o644, "Signature: 8a477f597d28d172789f06886806bc55\n"),
		E(".rustc_info.json", 'f', 0o644, `{"rustc_fingerprint":1234}`),
		E("debug", 'd', 0o755, ""),
		E("debug/.cargo-lock", 'f', 0o644, ""),
		E("debug/.fingerprint", 'd', 0o755, ""),
		E(fp, 'd', 0o755, ""),
		E(fp+"/lib-demo", 'f', 0o644, "0123456789abcdef"),
		E(fp+"/lib-demo.json", 'f', 0o644, `{"rustc":1,"features":"[]"}`),
		E(fp+"/dep-lib-demo", 'f', 0o644, "\x00\x01\x02src/lib.rs\x00"),
		E(fp+"/invoked.timestamp", 'f', 0o644, ""),
		E("debug/deps", 'd', 0o755, ""),
		E("debug/deps/libdemo-0f1e2d3c4b5a6978.rlib", 'f', 0o644, string(rlib)),
		E("debug/deps/demo-0f1e2d3c4b5a6978", 'f', 0o755, "\x7fELF pretend executable"),
		E("debug/deps/demo-0f1e2d3c4b5a6978.d", 'f', 0o644, "demo: src/main.rs\n"),
		// Cargo uplifts artifacts by hard-linking them.
		E("debug/demo", 'h', 0, "debug/deps/demo-0f1e2d3c4b5a6978"),
		E("debug/build", 'd', 0o755, ""),
		E("debug/build/demo-1a2b3c", 'd', 0o755, ""),
		E("debug/build/demo-1a2b3c/build-script-build", 'f', 0o755, "#!/bin/sh\necho hi\n"),
		E("debug/build/demo-1a2b3c/out", 'd', 0o755, ""),
		E("debug/build/demo-1a2b3c/output", 'f', 0o644, "cargo:rerun-if-changed=build.rs\n"),
		E("debug/incremental", 'd', 0o755, ""),
		E("debug/incremental/demo-3k2j", 'd', 0o750, ""),
		E("debug/incremental/demo-3k2j/query-cache.bin", 'f', 0o444, "read-only cache"),
		E("debug/sealed", 'd', 0o555, ""),
		E("debug/sealed/file", 'f', 0o600, "in a read-only dir"),
		E("debug/deps-link", 'l', 0, "deps"),
		E("debug/dangling", 'l', 0, "../missing/nowhere"),
		E("debug/absolute", 'l', 0, "/nonexistent/ferry/absolute"),
		E("release", 'd', 0o700, ""),
	}
}

// FSName names the filesystem dir is on, for test messages.
func FSName(dir string) string {
	fs, err := platform.FilesystemType(dir)
	if err != nil {
		return "unknown filesystem"
	}
	return fs
}

// DirHolds fails t unless dir holds exactly names, in order (none: dir
// may be missing): a failed fork leaves nothing behind, neither a
// temporary dir nor a layer.
func DirHolds(t testing.TB, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && len(names) == 0 {
			return
		}
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, " ") != strings.Join(names, " ") {
		t.Errorf("%s holds %q, want %q", dir, got, names)
	}
}

// Layout lays out, in store, a base target holding entries and an empty
// agent dir, as a fork finds them, and returns both.
func Layout(t testing.TB, store string, entries []Entry) (baseTarget, agentDir string) {
	t.Helper()
	baseTarget = filepath.Join(store, "bases", "b1", "target")
	agentDir = filepath.Join(store, "agents", "a1")
	MakeTarget(t, baseTarget, entries)
	if err := os.MkdirAll(agentDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return baseTarget, agentDir
}
