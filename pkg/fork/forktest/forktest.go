// Package forktest is the conformance suite every fork backend passes
// (package fork's promises, checked where the sandbox would mount the
// fork): the fork is the base's tree to the nanosecond, writes in it never
// reach the base, a fork is finished or absent, special files are refused,
// a missing or empty base behaves, PrivateBytes counts what is private, and
// the base's change times, inodes and link counts stay as its seal lists
// them. fork's TestConformance runs it on every registered backend
// (fork.Backends); a new backend passes it before it is registered.
package forktest

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/platform"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/internal/treetest"
	"github.com/ferrydev/ferry/pkg/failure"
)

const mib = 1 << 20

// cases are what every backend must do.
var cases = []struct {
	name string
	fn   func(t *testing.T, b fork.Backend, storeDir string)
}{
	{"Tree", testTree},
	{"WritesStayInFork", testWritesStayInFork},
	{"ExistingTarget", testExistingTarget},
	{"SpecialFiles", testSpecialFiles},
	{"EmptyBase", testEmptyBase},
	{"MissingBase", testMissingBase},
	{"PrivateBytes", testPrivateBytes},
	{"KeepsChangeTimes", testKeepsChangeTimes},
}

// Run runs the suite on b on every filesystem the tests can reach (the
// temp dir, and XFS with reflink=1 when there is one), each case with a
// fresh store dir. A filesystem where b's Needs are not met is skipped
// with the reason: clones that do not work there, or an overlay the
// platform's probe names a blocker for.
//
// A backend that needs the overlay has its fork visible only where the
// overlay is mounted, which takes a user and mount namespace: its cases
// run again in the test binary re-executed in one
// (treetest.RunInNamespace), so the calling package's TestMain must be
// treetest.Main.
func Run(t *testing.T, b fork.Backend) {
	for _, place := range []string{"tmp", "xfs"} {
		t.Run(place, func(t *testing.T) {
			parent := os.TempDir()
			if place == "xfs" {
				d, why := treetest.XFSRoot()
				if d == "" {
					t.Skip(why)
				}
				parent = d
			}
			if b.Needs().Overlay && !treetest.InNamespace() {
				treetest.NeedOverlay(t, parent)
				treetest.RunInNamespace(t)
				return
			}
			if b.Needs().Clones {
				ok, err := fork.CanReflink(treetest.Dir(t, parent))
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					t.Skipf("%s: %s at %s cannot clone files", b.Name(), treetest.FSName(parent), parent)
				}
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.fn(t, b, treetest.Dir(t, parent)) })
			}
		})
	}
}

// newFork lays out a base target with entries and an agent dir in store.
func newFork(t *testing.T, store string, entries []treetest.Entry) fork.Paths {
	t.Helper()
	base, agent := treetest.Layout(t, store, entries)
	return fork.Paths{BaseTarget: base, AgentDir: agent}
}

// noLeftovers fails t if a temporary fork dir remains in dir: the tree
// backends' .target.tmp-*, the overlay's .overlay.tmp-*.
func noLeftovers(t *testing.T, dir string) {
	t.Helper()
	var names []string
	for _, pattern := range []string{".target.tmp-*", ".overlay.tmp-*"} {
		m, _ := filepath.Glob(filepath.Join(dir, pattern))
		names = append(names, m...)
	}
	if len(names) > 0 {
		t.Errorf("temporary fork dirs left behind: %v", names)
	}
}

func testTree(t *testing.T, b fork.Backend, store string) {
	entries := treetest.CargoTarget()
	p := newFork(t, store, entries)
	before := treetest.Snapshot(t, p.BaseTarget)

	st, err := b.Fork(p)
	if err != nil {
		t.Fatal(err)
	}
	noLeftovers(t, p.AgentDir)
	overlay := b.Needs().Overlay
	spec := b.TargetSpec(p)
	if overlay {
		want := fork.OverlaySpec{Lower: p.BaseTarget, Upper: p.Upper(), Work: p.Work()}
		if spec.Dir != "" || spec.Overlay == nil || *spec.Overlay != want {
			t.Errorf("TargetSpec() = %+v (overlay %+v), want only the overlay %+v", spec, spec.Overlay, want)
		}
		// The fork is two empty layer dirs; its tree exists only mounted.
		treetest.DirHolds(t, p.AgentDir, "upper", "work")
	} else if spec.Dir != p.Target() || spec.Overlay != nil {
		t.Errorf("TargetSpec() = %+v, want only Dir %s", spec, p.Target())
	}

	v := view(t, b, p)
	base, forked := treetest.Snapshot(t, p.BaseTarget), treetest.Snapshot(t, v)
	treetest.SameTree(t, base, forked)

	// The base is untouched: not even its ctimes moved.
	for rel, n := range before {
		if a := base[rel]; a.Ctime != n.Ctime || a.Mtime != n.Mtime || a.Mode != n.Mode || a.Data != n.Data {
			t.Errorf("%s: the base changed during the fork", rel)
		}
	}
	const link, linked = "debug/demo", "debug/deps/demo-0f1e2d3c4b5a6978"
	if overlay {
		// Nothing is copied: until the agent writes a file, the view shows
		// the base's own (the lower layer's) file, whose inode number
		// overlayfs reports on its own device, and upper/ holds nothing
		// but its root, even after the whole tree was read.
		for rel, f := range forked {
			bn := base[rel]
			if f.Mode&unix.S_IFMT != unix.S_IFDIR && f.ID.Ino != bn.ID.Ino {
				t.Errorf("%s: inode %d in the view, %d in the base: not read through the lower layer", rel, f.ID.Ino, bn.ID.Ino)
			}
			if f.ID.Dev == bn.ID.Dev {
				t.Errorf("%s: on the base's device in the view: not read through the overlay", rel)
			}
		}
		if up := treetest.Snapshot(t, p.Upper()); len(up) != 1 {
			t.Errorf("upper/ holds %d entries after the fork was read, want only its root", len(up)-1)
		}
		// So hard links inside the base are seen as the base has them.
		if l, f := forked[link], forked[linked]; l.ID != f.ID || l.Nlinks != 2 {
			t.Errorf("%s: inode %v (%d links) in the view, %s %v: want the base's one file with 2 links", link, l.ID, l.Nlinks, linked, f.ID)
		}
	} else {
		// New inodes everywhere; links inside the base are links inside the fork.
		for rel, f := range forked {
			if f.ID == base[rel].ID {
				t.Errorf("%s: the fork shares the base's inode", rel)
			}
		}
		if forked[link].ID != forked[linked].ID {
			t.Errorf("%s: not a hard link of %s inside the fork", link, linked)
		}
	}

	// The tree backends count what they made; the overlay makes its root.
	want := fork.Stats{Dirs: 1}
	for _, e := range entries {
		if overlay {
			break
		}
		switch e.Kind {
		case 'd':
			want.Dirs++
		case 'f':
			want.Files++
			want.Bytes += int64(len(e.Data))
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
}

func testWritesStayInFork(t *testing.T, b fork.Backend, store string) {
	p := newFork(t, store, treetest.CargoTarget())
	before := treetest.Snapshot(t, p.BaseTarget)
	if _, err := b.Fork(p); err != nil {
		t.Fatal(err)
	}
	v := view(t, b, p)
	in := func(rel string) string { return filepath.Join(v, rel) }
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

	after := treetest.Snapshot(t, p.BaseTarget)
	if len(after) != len(before) {
		t.Errorf("the base has %d entries after writes in the fork, %d before", len(after), len(before))
	}
	for rel, n := range before {
		if a, ok := after[rel]; !ok || a != n {
			t.Errorf("%s: a write in the fork changed the base", rel)
		}
	}

	// The fork has the writes, and keeps them: an agent entering its
	// sandbox again (for overlay, a new mount of the same layers) sees them.
	check := func(round int, v string) {
		t.Helper()
		forked := treetest.Snapshot(t, v)
		for rel, want := range map[string]string{
			fp + "lib-demo":                               "fedcba9876543210",
			fp + "dep-lib-demo":                           before[fp+"dep-lib-demo"].Data + "more",
			"debug/deps/libdemo-0f1e2d3c4b5a6978.rlib":    "new rlib",
			"debug/incremental/demo-3k2j/query-cache.bin": "",
			"debug/deps/new.rmeta":                        "",
		} {
			if n, ok := forked[rel]; !ok || n.Data != want {
				t.Errorf("mount %d: %s: %q in the fork (present %v), want %q", round, rel, trunc(n.Data), ok, trunc(want))
			}
		}
		if _, ok := forked["CACHEDIR.TAG"]; ok {
			t.Errorf("mount %d: CACHEDIR.TAG: removed in the fork but still there", round)
		}
		if n := forked[fp+"invoked.timestamp"]; n.Mtime != unix.NsecToTimespec(now.UnixNano()) {
			t.Errorf("mount %d: %s: mtime %s in the fork, set to %s", round, fp+"invoked.timestamp", treetest.FmtTime(n.Mtime), now.UTC().Format(time.RFC3339Nano))
		}
		// A chmod (for overlay, a copy-up of the metadata) keeps the mtime
		// Cargo compares.
		const chmodded = "debug/deps/demo-0f1e2d3c4b5a6978.d"
		if n := forked[chmodded]; n.Mode&0o7777 != 0o600 || n.Mtime != before[chmodded].Mtime {
			t.Errorf("mount %d: %s: mode %o, mtime %s in the fork after chmod 600; want 600 and the base's %s",
				round, chmodded, n.Mode&0o7777, treetest.FmtTime(n.Mtime), treetest.FmtTime(before[chmodded].Mtime))
		}

		const link, linked = "debug/demo", "debug/deps/demo-0f1e2d3c4b5a6978"
		if got := forked[link].Data; !strings.HasPrefix(got, "XXXX") {
			t.Errorf("mount %d: %s starts %q after writing XXXX through it", round, link, trunc(got))
		}
		if !b.Needs().Overlay {
			if got := forked[linked].Data; !strings.HasPrefix(got, "XXXX") {
				t.Errorf("mount %d: the fork's hard links are not one file: %s starts %q", round, linked, trunc(got))
			}
			return
		}
		// overlayfs copies up the one path written: the link breaks, and
		// the other path still shows the base's file (Cargo replaces an
		// uplifted artifact by linking anew, never writes it in place).
		if got := forked[linked].Data; got != before[linked].Data {
			t.Errorf("mount %d: %s is %q after a write through its hard link %s; overlayfs should have copied up only %s",
				round, linked, trunc(got), link, link)
		}
	}
	check(1, v)
	check(2, remount(t, b, p, v))

	if b.Needs().Overlay {
		// Every write went to upper/, a removal as a whiteout.
		up := treetest.Snapshot(t, p.Upper())
		for _, rel := range []string{fp + "lib-demo", fp + "dep-lib-demo", "debug/deps/libdemo-0f1e2d3c4b5a6978.rlib",
			"debug/demo", "debug/incremental/demo-3k2j/query-cache.bin", fp + "invoked.timestamp",
			"debug/deps/demo-0f1e2d3c4b5a6978.d", "debug/deps/new.rmeta"} {
			if _, ok := up[rel]; !ok {
				t.Errorf("%s: written through the view but not in upper/", rel)
			}
		}
		if !treetest.IsWhiteout(filepath.Join(p.Upper(), "CACHEDIR.TAG")) {
			t.Errorf("CACHEDIR.TAG: removed through the view, but upper/ has no whiteout for it")
		}
		if _, ok := up["debug/deps/demo-0f1e2d3c4b5a6978"]; ok {
			t.Errorf("debug/deps/demo-0f1e2d3c4b5a6978: never written, yet copied up")
		}
	}
}

// trunc shortens data for a failure message.
func trunc(data string) string {
	if len(data) > 24 {
		return data[:24] + "..."
	}
	return data
}

func testExistingTarget(t *testing.T, b fork.Backend, store string) {
	p := newFork(t, store, treetest.CargoTarget())
	// Whatever a fork would make is never merged into: the target, and for
	// overlay its layer dirs too.
	occupied := []string{p.Target()}
	if b.Needs().Overlay {
		occupied = append(occupied, p.Upper(), p.Work())
	}
	for _, path := range occupied {
		t.Run(filepath.Base(path), func(t *testing.T) {
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
					if err := mk.fn(path); err != nil {
						t.Fatal(err)
					}
					before := treetest.Snapshot(t, path)
					_, err := b.Fork(p)
					if err == nil {
						t.Fatalf("Fork over an existing %s succeeded", path)
					}
					if !errors.Is(err, fs.ErrExist) || failure.KindOf(err) != failure.Refused || failure.HintOf(err) == "" ||
						!strings.Contains(err.Error(), path) {
						t.Errorf("error %q: want a Refused fs.ErrExist naming %s, with a hint", err, path)
					}
					if after := treetest.Snapshot(t, path); len(after) != len(before) {
						t.Errorf("the existing %s changed: %d entries, %d before", path, len(after), len(before))
					}
					noLeftovers(t, p.AgentDir)
					treetest.DirHolds(t, p.AgentDir, filepath.Base(path))
					if err := platform.RemoveTree(path); err != nil {
						t.Fatal(err)
					}
				})
			}
		})
	}
}

func testSpecialFiles(t *testing.T, b fork.Backend, store string) {
	for _, special := range []struct {
		kind string
		mode uint32
		make func(path string) error
	}{
		{"fifo", unix.S_IFIFO, func(p string) error { return unix.Mkfifo(p, 0o644) }},
		{"socket", unix.S_IFSOCK, func(p string) error {
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
			dir := treetest.Dir(t, store)
			entries := treetest.CargoTarget()
			p := newFork(t, dir, entries)
			// Last in walk order, so the fork has made (read-only
			// directories included) all else before it fails.
			bad := filepath.Join(p.BaseTarget, "zz")
			if err := special.make(bad); err != nil {
				t.Skipf("cannot make a %s here: %v", special.kind, err)
			}
			if b.Needs().Overlay {
				overlaySpecialFile(t, b, p, "zz", special.mode)
				return
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

// overlaySpecialFile checks the overlay backend's fork of a base holding the
// special file rel of type mode. Fork walks nothing, so it cannot refuse
// one; the view shows it as the base has it, and changing or removing it
// through the view changes only the fork, never the base.
func overlaySpecialFile(t *testing.T, b fork.Backend, p fork.Paths, rel string, mode uint32) {
	t.Helper()
	if _, err := b.Fork(p); err != nil {
		t.Fatalf("overlay Fork of a base with a special file: %v", err)
	}
	v := view(t, b, p)
	var base, seen unix.Stat_t
	if err := unix.Lstat(filepath.Join(p.BaseTarget, rel), &base); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lstat(filepath.Join(v, rel), &seen); err != nil {
		t.Fatalf("%s in the view: %v", rel, err)
	}
	if seen.Mode != base.Mode || uint32(seen.Mode)&unix.S_IFMT != mode {
		t.Errorf("%s: mode %o in the view, %o in the base, want type %o", rel, seen.Mode, base.Mode, mode)
	}

	if err := os.Chmod(filepath.Join(v, rel), 0o600); err != nil {
		t.Fatalf("chmod %s through the view: %v", rel, err)
	}
	var up, after unix.Stat_t
	if err := unix.Lstat(filepath.Join(p.Upper(), rel), &up); err != nil || uint32(up.Mode) != mode|0o600 {
		t.Errorf("%s: after chmod 600 through the view, upper/ has mode %o (%v), want %o", rel, up.Mode, err, mode|0o600)
	}
	if err := unix.Lstat(filepath.Join(p.BaseTarget, rel), &after); err != nil || after.Mode != base.Mode || after.Ctim != base.Ctim {
		t.Errorf("%s: chmod through the view changed the base: mode %o, was %o (%v)", rel, after.Mode, base.Mode, err)
	}

	if err := os.Remove(filepath.Join(v, rel)); err != nil {
		t.Fatalf("remove %s through the view: %v", rel, err)
	}
	if _, err := os.Lstat(filepath.Join(v, rel)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s: still in the view after its removal: %v", rel, err)
	}
	if err := unix.Lstat(filepath.Join(p.BaseTarget, rel), &after); err != nil || after.Mode != base.Mode {
		t.Errorf("%s: removal through the view reached the base: %v", rel, err)
	}
	if !treetest.IsWhiteout(filepath.Join(p.Upper(), rel)) {
		t.Errorf("%s: removed through the view, but upper/ has no whiteout for it", rel)
	}
}

func testEmptyBase(t *testing.T, b fork.Backend, store string) {
	p := newFork(t, store, nil)
	st, err := b.Fork(p)
	if err != nil {
		t.Fatal(err)
	}
	treetest.SameTree(t, treetest.Snapshot(t, p.BaseTarget), treetest.Snapshot(t, view(t, b, p)))
	if st.Dirs != 1 || st.Files != 0 || st.Bytes != 0 {
		t.Errorf("stats %+v for an empty base", st)
	}
}

func testMissingBase(t *testing.T, b fork.Backend, store string) {
	p := fork.Paths{BaseTarget: filepath.Join(store, "no-base"), AgentDir: filepath.Join(store, "agent")}
	if err := os.Mkdir(p.AgentDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Fork(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Fork of a missing base: %v, want fs.ErrNotExist", err)
	}
	// Nothing is left: no target, no layer dirs, no temporary dir.
	noLeftovers(t, p.AgentDir)
	treetest.DirHolds(t, p.AgentDir)

	// A missing agent dir is an error too: Fork makes only the fork.
	p = newFork(t, store, treetest.CargoTarget())
	p.AgentDir = filepath.Join(store, "no-agent")
	if _, err := b.Fork(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Fork into a missing agent dir: %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Lstat(p.AgentDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the agent dir exists after a failed fork: %v", err)
	}
}

func testPrivateBytes(t *testing.T, b fork.Backend, store string) {
	p := newFork(t, store, treetest.CargoTarget())
	if _, err := b.PrivateBytes(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("PrivateBytes before the fork: %v, want fs.ErrNotExist", err)
	}
	if _, err := b.Fork(p); err != nil {
		t.Fatal(err)
	}
	v := view(t, b, p)
	// Reading the whole fork costs a copy nothing, an overlay nothing.
	treetest.Snapshot(t, v)
	fresh, err := b.PrivateBytes(p)
	if err != nil {
		t.Fatal(err)
	}
	rlib := filepath.Join(v, "debug/deps/libdemo-0f1e2d3c4b5a6978.rlib")
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
	switch {
	case b.Needs().Clones || b.Needs().Overlay:
		// Shared extents (reflink), or nothing but the empty upper/
		// (overlay), until the agent writes.
		if fresh > 256<<10 {
			t.Errorf("a fresh %s fork has %d private bytes, want near 0", b.Name(), fresh)
		}
		if grew := rewritten - fresh; grew < mib || grew > 2*mib {
			t.Errorf("rewriting 1 MiB grew private bytes by %d", grew)
		}
	default:
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

// view returns where the test reads and writes the fork's tree: the dir the
// sandbox would bind-mount, or, for the overlay backend, a fresh mountpoint
// with the fork's overlay mounted on it with the sandbox's options, detached
// at the end of the test. Mounting needs the namespace treetest.RunInNamespace makes.
func view(t *testing.T, b fork.Backend, p fork.Paths) string {
	t.Helper()
	spec := b.TargetSpec(p)
	if spec.Overlay == nil {
		if spec.Dir == "" {
			t.Fatalf("%s: TargetSpec names neither a dir nor an overlay", b.Name())
		}
		return spec.Dir
	}
	if !treetest.InNamespace() {
		t.Fatalf("%s: mounting the fork needs the test's own mount namespace (treetest.RunInNamespace)", b.Name())
	}
	return treetest.MountView(t, spec.Overlay.Lower, spec.Overlay.Upper, spec.Overlay.Work)
}

// remount unmounts the overlay view v (overlayfs refuses a second mount of
// layers in use) and returns a new view of the same fork, as an agent sees
// it when it enters its sandbox again. For a backend without an overlay it
// returns the same dir.
func remount(t *testing.T, b fork.Backend, p fork.Paths, v string) string {
	t.Helper()
	if b.TargetSpec(p).Overlay == nil {
		return view(t, b, p)
	}
	treetest.UnmountView(t, v)
	return view(t, b, p)
}

// Forking a base leaves every entry of its target as the base's seal
// lists it (package base): the inode, the change time and the link count,
// which a same-user process cannot put back, are what the seal checks
// besides mtimes. A clone (FICLONE), a copy (copy_file_range) and an
// overlay with the target as its lower layer only read it, also while the
// fork is read and written (copy-up) and its processes end.
func testKeepsChangeTimes(t *testing.T, b fork.Backend, store string) {
	p := newFork(t, store, treetest.CargoTarget())
	before := treetest.Snapshot(t, p.BaseTarget)
	// Past the target's last change on the kernel's coarse clock, so
	// that a change now shows as one.
	time.Sleep(30 * time.Millisecond)
	if _, err := b.Fork(p); err != nil {
		t.Fatal(err)
	}
	v := view(t, b, p)
	// Read everything through the fork, then write some of it.
	filepath.WalkDir(v, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			os.ReadFile(path)
		}
		return nil
	})
	if err := os.WriteFile(filepath.Join(v, "debug/deps/libdemo-0f1e2d3c4b5a6978.rlib"), []byte("new rlib"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(v, "debug/demo"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("XXXX")
	f.Close()
	if err := os.Chmod(filepath.Join(v, "debug/deps/demo-0f1e2d3c4b5a6978.d"), 0o600); err != nil {
		t.Fatal(err)
	}
	v = remount(t, b, p, v)
	after := treetest.Snapshot(t, p.BaseTarget)
	if len(after) != len(before) {
		t.Fatalf("%s: the base holds %d entries after the fork, %d before", b.Name(), len(after), len(before))
	}
	for rel, n := range before {
		a := after[rel]
		if a.Ctime != n.Ctime || a.ID != n.ID || a.Nlinks != n.Nlinks {
			t.Errorf("%s: the base's %s changed: change time %s -> %s, inode %v -> %v, links %d -> %d",
				b.Name(), rel, treetest.FmtTime(n.Ctime), treetest.FmtTime(a.Ctime), n.ID, a.ID, n.Nlinks, a.Nlinks)
		}
	}
}
