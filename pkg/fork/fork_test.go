package fork

import (
	"bytes"
	"errors"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/internal/unpriv"
	"github.com/ferrydev/ferry/pkg/failure"
)

// ciXFS is where .ci/run mounts the XFS filesystem with reflink=1.
const ciXFS = "/mnt/ferry-xfs"

// xfsRoot returns a writable directory on a filesystem that clones, or why
// there is none.
func xfsRoot() (dir, why string) {
	if d := os.Getenv("FERRY_TEST_XFS"); d != "" {
		return d, ""
	}
	// unpriv.Rerun gives the re-run a fixed environment without
	// FERRY_TEST_XFS, so the re-run looks where .ci/run mounts it.
	if unpriv.IsChild() && unix.Access(ciXFS, unix.W_OK) == nil {
		return ciXFS, ""
	}
	return "", "FERRY_TEST_XFS is not set (.ci/run mounts XFS with reflink=1 and sets it)"
}

// testDir makes a fresh directory under parent, removed at the end of the
// test even where a fork left read-only directories in it.
func testDir(t *testing.T, parent string) string {
	t.Helper()
	dir, err := os.MkdirTemp(parent, "ferry-fork-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := removeTree(dir); err != nil {
			t.Errorf("clean up %s: %v", dir, err)
		}
	})
	return dir
}

// forEachBackend runs fn for every backend on every filesystem the tests
// can reach (the temp dir, and XFS with reflink=1 when there is one), each
// with a fresh store dir. A combination whose operation does not work here
// is skipped with the reason.
func forEachBackend(t *testing.T, fn func(t *testing.T, b Backend, storeDir string)) {
	for _, b := range []Backend{Copy(), Reflink()} {
		for _, place := range []string{"tmp", "xfs"} {
			t.Run(b.Name()+"-"+place, func(t *testing.T) {
				parent := os.TempDir()
				if place == "xfs" {
					d, why := xfsRoot()
					if d == "" {
						t.Skip(why)
					}
					parent = d
				}
				store := testDir(t, parent)
				if b.Name() == NameReflink {
					ok, err := CanReflink(store)
					if err != nil {
						t.Fatal(err)
					}
					if !ok {
						t.Skipf("reflink: %s at %s cannot clone files", fsName(store), store)
					}
				}
				fn(t, b, store)
			})
		}
	}
}

// conformance is what every backend must do.
var conformance = []struct {
	name string
	fn   func(t *testing.T, b Backend, storeDir string)
}{
	{"Tree", testTree},
	{"WritesStayInFork", testWritesStayInFork},
	{"ExistingTarget", testExistingTarget},
	{"SpecialFiles", testSpecialFiles},
	{"EmptyBase", testEmptyBase},
	{"MissingBase", testMissingBase},
	{"PrivateBytes", testPrivateBytes},
}

func TestConformance(t *testing.T) {
	for _, c := range conformance {
		t.Run(c.name, func(t *testing.T) { forEachBackend(t, c.fn) })
	}
}

// An entry of a fixture target dir: 'd' directory, 'f' regular file, 'l'
// symlink (data is the link text), 'h' hard link to the path in data.
type entry struct {
	path string
	kind byte
	mode uint32
	data string
}

const mib = 1 << 20

// cargoTarget is a small but realistic Cargo target dir, parents before
// children.
func cargoTarget() []entry {
	rng := rand.New(rand.NewPCG(1, 2))
	rlib := make([]byte, mib)
	for i := range rlib {
		rlib[i] = byte(rng.Uint32())
	}
	fp := "debug/.fingerprint/demo-0f1e2d3c4b5a6978"
	return []entry{
		{"CACHEDIR.TAG", 'f', 0o644, "Signature: 8a477f597d28d172789f06886806bc55\n"},
		{".rustc_info.json", 'f', 0o644, `{"rustc_fingerprint":1234}`},
		{"debug", 'd', 0o755, ""},
		{"debug/.cargo-lock", 'f', 0o644, ""},
		{"debug/.fingerprint", 'd', 0o755, ""},
		{fp, 'd', 0o755, ""},
		{fp + "/lib-demo", 'f', 0o644, "0123456789abcdef"},
		{fp + "/lib-demo.json", 'f', 0o644, `{"rustc":1,"features":"[]"}`},
		{fp + "/dep-lib-demo", 'f', 0o644, "\x00\x01\x02src/lib.rs\x00"},
		{fp + "/invoked.timestamp", 'f', 0o644, ""},
		{"debug/deps", 'd', 0o755, ""},
		{"debug/deps/libdemo-0f1e2d3c4b5a6978.rlib", 'f', 0o644, string(rlib)},
		{"debug/deps/demo-0f1e2d3c4b5a6978", 'f', 0o755, "\x7fELF pretend executable"},
		{"debug/deps/demo-0f1e2d3c4b5a6978.d", 'f', 0o644, "demo: src/main.rs\n"},
		// Cargo uplifts artifacts by hard-linking them.
		{"debug/demo", 'h', 0, "debug/deps/demo-0f1e2d3c4b5a6978"},
		{"debug/build", 'd', 0o755, ""},
		{"debug/build/demo-1a2b3c", 'd', 0o755, ""},
		{"debug/build/demo-1a2b3c/build-script-build", 'f', 0o755, "#!/bin/sh\necho hi\n"},
		{"debug/build/demo-1a2b3c/out", 'd', 0o755, ""},
		{"debug/build/demo-1a2b3c/output", 'f', 0o644, "cargo:rerun-if-changed=build.rs\n"},
		{"debug/incremental", 'd', 0o755, ""},
		{"debug/incremental/demo-3k2j", 'd', 0o750, ""},
		{"debug/incremental/demo-3k2j/query-cache.bin", 'f', 0o444, "read-only cache"},
		{"debug/sealed", 'd', 0o555, ""},
		{"debug/sealed/file", 'f', 0o600, "in a read-only dir"},
		{"debug/deps-link", 'l', 0, "deps"},
		{"debug/dangling", 'l', 0, "../missing/nowhere"},
		{"debug/absolute", 'l', 0, "/nonexistent/ferry/absolute"},
		{"release", 'd', 0o700, ""},
	}
}

// timeOf gives entry i its own mtime, with nanoseconds; i = -1 is the root.
func timeOf(i int) unix.Timespec {
	return unix.Timespec{Sec: 1709294400 + int64(i+1)*37, Nsec: int64(123457 + (i+1)*7919*1013)}
}

// makeTarget writes entries under root (created), then sets modes and
// distinct times children-first, as a finished build leaves them.
func makeTarget(t *testing.T, root string, entries []entry) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(root, 0o755))
	for _, e := range entries {
		p := filepath.Join(root, e.path)
		switch e.kind {
		case 'd':
			must(os.Mkdir(p, 0o755))
		case 'f':
			must(os.WriteFile(p, []byte(e.data), 0o644))
		case 'l':
			must(os.Symlink(e.data, p))
		case 'h':
			must(os.Link(filepath.Join(root, e.data), p))
		}
	}
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		p := filepath.Join(root, e.path)
		if e.kind == 'd' || e.kind == 'f' {
			must(unix.Chmod(p, e.mode))
		}
		if e.kind != 'h' {
			must(unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{timeOf(i), timeOf(i)}, unix.AT_SYMLINK_NOFOLLOW))
		}
	}
	must(unix.UtimesNanoAt(unix.AT_FDCWD, root, []unix.Timespec{timeOf(-1), timeOf(-1)}, 0))
}

// newFork lays out a base target with entries and an agent dir in store.
func newFork(t *testing.T, store string, entries []entry) Paths {
	t.Helper()
	p := Paths{
		BaseTarget: filepath.Join(store, "bases", "b1", "target"),
		AgentDir:   filepath.Join(store, "agents", "a1"),
	}
	makeTarget(t, p.BaseTarget, entries)
	if err := os.MkdirAll(p.AgentDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// node is what a tree comparison sees of one entry.
type node struct {
	mode   uint32
	mtime  unix.Timespec
	ctime  unix.Timespec
	id     fileID
	data   string // bytes of a file, text of a link
	nlinks uint64
}

// snapshot reads the whole tree at root, keyed by path relative to root.
func snapshot(t *testing.T, root string) map[string]node {
	t.Helper()
	out := map[string]node{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		n := node{mode: st.Mode, mtime: st.Mtim, ctime: st.Ctim, id: fileID{uint64(st.Dev), st.Ino}, nlinks: uint64(st.Nlink)}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			n.data = string(b)
		case unix.S_IFLNK:
			n.data, err = os.Readlink(path)
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

func fmtTime(ts unix.Timespec) string {
	return time.Unix(ts.Sec, ts.Nsec).UTC().Format(time.RFC3339Nano)
}

// sameTree fails t unless fork has exactly base's entries, each of the same
// type, permission bits, bytes or link text and mtime.
func sameTree(t *testing.T, base, fork map[string]node) {
	t.Helper()
	for rel, b := range base {
		f, ok := fork[rel]
		if !ok {
			t.Errorf("%s: missing from the fork", rel)
			continue
		}
		if b.mode != f.mode {
			t.Errorf("%s: mode %o in the fork, %o in the base", rel, f.mode, b.mode)
		}
		if b.mtime != f.mtime {
			t.Errorf("%s: mtime %s in the fork, %s in the base", rel, fmtTime(f.mtime), fmtTime(b.mtime))
		}
		if b.data != f.data {
			t.Errorf("%s: content differs (%d bytes in the fork, %d in the base)", rel, len(f.data), len(b.data))
		}
	}
	for rel := range fork {
		if _, ok := base[rel]; !ok {
			t.Errorf("%s: in the fork but not in the base", rel)
		}
	}
}

// noLeftovers fails t if a temporary fork dir remains in dir.
func noLeftovers(t *testing.T, dir string) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, ".target.tmp-*"))
	if len(names) > 0 {
		t.Errorf("temporary fork dirs left behind: %v", names)
	}
}

func testTree(t *testing.T, b Backend, store string) {
	entries := cargoTarget()
	p := newFork(t, store, entries)
	before := snapshot(t, p.BaseTarget)

	st, err := b.Fork(p)
	if err != nil {
		t.Fatal(err)
	}
	base, fork := snapshot(t, p.BaseTarget), snapshot(t, p.Target())
	sameTree(t, base, fork)
	noLeftovers(t, p.AgentDir)

	// The base is untouched: not even its ctimes moved.
	for rel, n := range before {
		if a := base[rel]; a.ctime != n.ctime || a.mtime != n.mtime || a.mode != n.mode || a.data != n.data {
			t.Errorf("%s: the base changed during the fork", rel)
		}
	}
	// New inodes everywhere; links inside the base are links inside the fork.
	for rel, f := range fork {
		if f.id == base[rel].id {
			t.Errorf("%s: the fork shares the base's inode", rel)
		}
	}
	if fork["debug/demo"].id != fork["debug/deps/demo-0f1e2d3c4b5a6978"].id {
		t.Errorf("debug/demo: not a hard link of debug/deps/demo-0f1e2d3c4b5a6978 inside the fork")
	}

	want := Stats{Dirs: 1}
	for _, e := range entries {
		switch e.kind {
		case 'd':
			want.Dirs++
		case 'f':
			want.Files++
			want.Bytes += int64(len(e.data))
		case 'h':
			want.Files++
		case 'l':
			want.Symlinks++
		}
	}
	if st.Files != want.Files || st.Dirs != want.Dirs || st.Symlinks != want.Symlinks || st.Bytes != want.Bytes {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	if st.Duration <= 0 {
		t.Errorf("stats: duration %v", st.Duration)
	}
	if got := b.TargetSpec(p).Dir; got != p.Target() {
		t.Errorf("TargetSpec().Dir = %s, want %s", got, p.Target())
	}
}

func testWritesStayInFork(t *testing.T, b Backend, store string) {
	p := newFork(t, store, cargoTarget())
	before := snapshot(t, p.BaseTarget)
	if _, err := b.Fork(p); err != nil {
		t.Fatal(err)
	}
	in := func(rel string) string { return filepath.Join(p.Target(), rel) }
	fp := "debug/.fingerprint/demo-0f1e2d3c4b5a6978/"

	// Cargo rewrites a fingerprint with File::create: truncate in place.
	f, err := os.Create(in(fp + "lib-demo"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("fedcba9876543210"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// Rewrite the big file, overwrite the uplifted binary in place through
	// its hard link, append to a dep-info file, truncate a read-only file.
	if err := os.WriteFile(in("debug/deps/libdemo-0f1e2d3c4b5a6978.rlib"), []byte("new rlib"), 0o644); err != nil {
		t.Fatal(err)
	}
	overwrite := func(rel string, flag int, data string) {
		t.Helper()
		f, err := os.OpenFile(in(rel), os.O_WRONLY|flag, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(data); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	overwrite("debug/demo", 0, "XXXX")
	overwrite(fp+"dep-lib-demo", os.O_APPEND, "more")
	if err := os.Chmod(in("debug/incremental/demo-3k2j/query-cache.bin"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(in("debug/incremental/demo-3k2j/query-cache.bin"), 0); err != nil {
		t.Fatal(err)
	}
	// Metadata and entries: touch, chmod, remove, create.
	now := time.Now()
	if err := os.Chtimes(in(fp+"invoked.timestamp"), now, now); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(in("debug/deps/demo-0f1e2d3c4b5a6978.d"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(in("CACHEDIR.TAG")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in("debug/deps/new.rmeta"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	after := snapshot(t, p.BaseTarget)
	if len(after) != len(before) {
		t.Errorf("the base has %d entries after writes in the fork, %d before", len(after), len(before))
	}
	for rel, n := range before {
		if a, ok := after[rel]; !ok || a != n {
			t.Errorf("%s: a write in the fork changed the base", rel)
		}
	}
	if got, _ := os.ReadFile(in("debug/deps/demo-0f1e2d3c4b5a6978")); !bytes.HasPrefix(got, []byte("XXXX")) {
		t.Errorf("the fork's hard links are not one file: deps binary starts %q", got[:8])
	}
}

func testExistingTarget(t *testing.T, b Backend, store string) {
	p := newFork(t, store, cargoTarget())
	for _, mk := range []struct {
		name string
		fn   func(string) error
	}{
		{"empty dir", func(p string) error { return os.Mkdir(p, 0o755) }},
		{"dir", func(p string) error {
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(p, "keep"), []byte("mine"), 0o644)
		}},
		{"file", func(p string) error { return os.WriteFile(p, []byte("mine"), 0o644) }},
		{"dangling symlink", func(p string) error { return os.Symlink("nowhere", p) }},
	} {
		t.Run(mk.name, func(t *testing.T) {
			if err := mk.fn(p.Target()); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, p.Target())
			_, err := b.Fork(p)
			if err == nil {
				t.Fatal("Fork over an existing target succeeded")
			}
			if !errors.Is(err, fs.ErrExist) || failure.KindOf(err) != failure.Refused || failure.HintOf(err) == "" {
				t.Errorf("error %q: want a Refused fs.ErrExist with a hint", err)
			}
			if after := snapshot(t, p.Target()); len(after) != len(before) {
				t.Errorf("the existing target changed: %d entries, %d before", len(after), len(before))
			}
			noLeftovers(t, p.AgentDir)
			if err := removeTree(p.Target()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func testSpecialFiles(t *testing.T, b Backend, store string) {
	for _, special := range []struct {
		kind string
		make func(path string) error
	}{
		{"fifo", func(p string) error { return unix.Mkfifo(p, 0o644) }},
		{"socket", func(p string) error {
			l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
			if err != nil {
				return err
			}
			l.SetUnlinkOnClose(false)
			return l.Close()
		}},
	} {
		t.Run(special.kind, func(t *testing.T) {
			// Short paths: a socket's must fit in 108 bytes.
			dir := testDir(t, store)
			entries := cargoTarget()
			p := newFork(t, dir, entries)
			// Last in walk order, so the fork has made (read-only
			// directories included) all else before it fails.
			bad := filepath.Join(p.BaseTarget, "zz")
			if err := special.make(bad); err != nil {
				t.Skipf("cannot make a %s here: %v", special.kind, err)
			}
			_, err := b.Fork(p)
			if err == nil {
				t.Fatalf("Fork of a base with a %s succeeded", special.kind)
			}
			if !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), special.kind) {
				t.Errorf("error %q does not name the %s %s", err, special.kind, bad)
			}
			if failure.KindOf(err) != failure.Refused || failure.HintOf(err) == "" {
				t.Errorf("error %q: want Refused with a hint", err)
			}
			if _, err := os.Lstat(p.Target()); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("target exists after a failed fork: %v", err)
			}
			noLeftovers(t, p.AgentDir)
		})
	}
}

func testEmptyBase(t *testing.T, b Backend, store string) {
	p := newFork(t, store, nil)
	st, err := b.Fork(p)
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, snapshot(t, p.BaseTarget), snapshot(t, p.Target()))
	if st.Dirs != 1 || st.Files != 0 || st.Bytes != 0 {
		t.Errorf("stats %+v for an empty base", st)
	}
}

func testMissingBase(t *testing.T, b Backend, store string) {
	p := Paths{BaseTarget: filepath.Join(store, "no-base"), AgentDir: filepath.Join(store, "agent")}
	if err := os.Mkdir(p.AgentDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Fork(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Fork of a missing base: %v, want fs.ErrNotExist", err)
	}
	noLeftovers(t, p.AgentDir)
	if _, err := os.Lstat(p.Target()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("target exists after a failed fork: %v", err)
	}

	// A missing agent dir is an error too: Fork makes only the target.
	p = newFork(t, store, cargoTarget())
	p.AgentDir = filepath.Join(store, "no-agent")
	if _, err := b.Fork(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Fork into a missing agent dir: %v, want fs.ErrNotExist", err)
	}
}

func testPrivateBytes(t *testing.T, b Backend, store string) {
	p := newFork(t, store, cargoTarget())
	if _, err := b.PrivateBytes(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("PrivateBytes before the fork: %v, want fs.ErrNotExist", err)
	}
	if _, err := b.Fork(p); err != nil {
		t.Fatal(err)
	}
	fresh, err := b.PrivateBytes(p)
	if err != nil {
		t.Fatal(err)
	}
	rlib := filepath.Join(p.Target(), "debug/deps/libdemo-0f1e2d3c4b5a6978.rlib")
	data := make([]byte, mib)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(rlib, data, 0o644); err != nil {
		t.Fatal(err)
	}
	rewritten, err := b.PrivateBytes(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: private bytes %d after the fork, %d after rewriting 1 MiB", b.Name(), fresh, rewritten)
	switch b.Name() {
	case NameReflink:
		if fresh > 256<<10 {
			t.Errorf("a fresh reflink fork has %d private bytes, want near 0", fresh)
		}
		if grew := rewritten - fresh; grew < mib || grew > 2*mib {
			t.Errorf("rewriting 1 MiB grew private bytes by %d", grew)
		}
	case NameCopy:
		// A copy owns all its bytes (st_blocks counts shared extents too,
		// should the kernel have cloned).
		if fresh < mib {
			t.Errorf("a copy fork has %d private bytes, want at least the 1 MiB rlib", fresh)
		}
		if rewritten < mib {
			t.Errorf("after rewriting 1 MiB, %d private bytes", rewritten)
		}
	}
}

func TestSelect(t *testing.T) {
	tmp := testDir(t, os.TempDir())
	if ok, err := CanReflink(tmp); err != nil {
		t.Fatal(err)
	} else if ok {
		t.Logf("%s (%s) clones files: auto picks reflink there", tmp, fsName(tmp))
		if b, err := Select(NameAuto, tmp); err != nil || b.Name() != NameReflink {
			t.Errorf("Select(auto) on %s = %v, %v; want reflink", fsName(tmp), b, err)
		}
	} else {
		b, err := Select(NameAuto, tmp)
		if err != nil || b.Name() != NameCopy {
			t.Errorf("Select(auto) on %s = %v, %v; want copy", fsName(tmp), b, err)
		}
		_, err = Select(NameReflink, tmp)
		if failure.KindOf(err) != failure.Blocked || !strings.Contains(err.Error(), fsName(tmp)) ||
			!strings.Contains(failure.HintOf(err), "reflink=1") {
			t.Errorf("Select(reflink) on %s: %v (hint %q); want Blocked naming the filesystem, with a hint",
				fsName(tmp), err, failure.HintOf(err))
		}
	}
	if b, err := Select(NameCopy, tmp); err != nil || b.Name() != NameCopy {
		t.Errorf("Select(copy) = %v, %v", b, err)
	}

	if xfs, why := xfsRoot(); xfs == "" {
		t.Log("skipping auto on XFS: " + why)
	} else {
		dir := testDir(t, xfs)
		for _, name := range []string{NameAuto, NameReflink} {
			if b, err := Select(name, dir); err != nil || b.Name() != NameReflink {
				t.Errorf("Select(%s) on %s (%s) = %v, %v; want reflink", name, dir, fsName(dir), b, err)
			}
		}
	}

	for _, c := range []struct {
		name string
		kind failure.Kind
		hint string
	}{
		{"hardlink", failure.Usage, "File::create"},
		{"overlay", failure.Refused, "copy"},
		{"clonefile", failure.Usage, "auto"},
		{"", failure.Usage, "auto"},
	} {
		_, err := Select(c.name, tmp)
		if err == nil || failure.KindOf(err) != c.kind || !strings.Contains(failure.HintOf(err), c.hint) {
			t.Errorf("Select(%q): %v (kind %v, hint %q); want %v with a hint mentioning %q",
				c.name, err, failure.KindOf(err), failure.HintOf(err), c.kind, c.hint)
		}
	}

	// A store the probe cannot use is an error, not a silent copy.
	if b, err := Select(NameAuto, filepath.Join(tmp, "missing")); err == nil {
		t.Errorf("Select(auto) in a missing dir = %v, want an error", b.Name())
	}
}

func TestByName(t *testing.T) {
	for _, name := range []string{NameReflink, NameCopy} {
		if b, err := ByName(name); err != nil || b.Name() != name {
			t.Errorf("ByName(%s) = %v, %v", name, b, err)
		}
	}
	for _, name := range []string{NameAuto, NameOverlay, "hardlink", "bogus"} {
		if b, err := ByName(name); err == nil {
			t.Errorf("ByName(%s) = %v, want an error", name, b.Name())
		}
	}
}

func TestCanReflink(t *testing.T) {
	if _, err := CanReflink(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("CanReflink of a missing dir: no error")
	}
	dir := testDir(t, os.TempDir())
	ok, err := CanReflink(dir)
	t.Logf("%s (%s): CanReflink = %v, %v", dir, fsName(dir), ok, err)
	if err != nil {
		t.Fatal(err)
	}
	if xfs, why := xfsRoot(); xfs == "" {
		t.Log("skipping XFS: " + why)
	} else if ok, err := CanReflink(testDir(t, xfs)); !ok || err != nil {
		t.Errorf("CanReflink on %s = %v, %v; want true", xfs, ok, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("the probe left files behind: %v", entries)
	}
}

func TestUnprivileged(t *testing.T) {
	unpriv.Rerun(t, "^Test(Conformance|Select|ByName|CanReflink)$")
}
