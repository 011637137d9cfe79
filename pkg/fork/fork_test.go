package fork

import (
	"errors"
	"github.com/ferrydev/ferry/internal/treetest"
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
	"github.com/ferrydev/ferry/pkg/platform"
)

// forEachBackend runs fn for every backend on every filesystem the tests
// can reach (the temp dir, and XFS with reflink=1 when there is one), each
// with a fresh store dir. A combination whose operation does not work here
// is skipped with the reason.
//
// The overlay backend's fork is visible only where its overlay is mounted,
// which takes a user and mount namespace: its subtests run again in this
// binary re-executed in one (runInOverlayNS), and may be skipped only for a
// blocker the platform's overlay probe names.
func forEachBackend(t *testing.T, fn func(t *testing.T, b Backend, storeDir string)) {
	for _, b := range []Backend{Copy(), Reflink(), Overlay()} {
		for _, place := range []string{"tmp", "xfs"} {
			t.Run(b.Name()+"-"+place, func(t *testing.T) {
				parent := os.TempDir()
				if place == "xfs" {
					d, why := treetest.XFSRoot()
					if d == "" {
						t.Skip(why)
					}
					parent = d
				}
				if b.Name() == NameOverlay && !treetest.InNamespace() {
					treetest.NeedOverlay(t, parent)
					treetest.RunInNamespace(t)
					return
				}
				store := treetest.Dir(t, parent)
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

const mib = 1 << 20

// cargoTarget is a small but realistic Cargo target dir, parents before
// children.
func cargoTarget() []treetest.Entry {
	rng := rand.New(rand.NewPCG(1, 2))
	rlib := make([]byte, mib)
	for i := range rlib {
		rlib[i] = byte(rng.Uint32())
	}
	fp := "debug/.fingerprint/demo-0f1e2d3c4b5a6978"
	return []treetest.Entry{
		treetest.E("CACHEDIR.TAG", 'f', 0o644, "Signature: 8a477f597d28d172789f06886806bc55\n"),
		treetest.E(".rustc_info.json", 'f', 0o644, `{"rustc_fingerprint":1234}`),
		treetest.E("debug", 'd', 0o755, ""),
		treetest.E("debug/.cargo-lock", 'f', 0o644, ""),
		treetest.E("debug/.fingerprint", 'd', 0o755, ""),
		treetest.E(fp, 'd', 0o755, ""),
		treetest.E(fp + "/lib-demo", 'f', 0o644, "0123456789abcdef"),
		treetest.E(fp + "/lib-demo.json", 'f', 0o644, `{"rustc":1,"features":"[]"}`),
		treetest.E(fp + "/dep-lib-demo", 'f', 0o644, "\x00\x01\x02src/lib.rs\x00"),
		treetest.E(fp + "/invoked.timestamp", 'f', 0o644, ""),
		treetest.E("debug/deps", 'd', 0o755, ""),
		treetest.E("debug/deps/libdemo-0f1e2d3c4b5a6978.rlib", 'f', 0o644, string(rlib)),
		treetest.E("debug/deps/demo-0f1e2d3c4b5a6978", 'f', 0o755, "\x7fELF pretend executable"),
		treetest.E("debug/deps/demo-0f1e2d3c4b5a6978.d", 'f', 0o644, "demo: src/main.rs\n"),
		// Cargo uplifts artifacts by hard-linking them.
		treetest.E("debug/demo", 'h', 0, "debug/deps/demo-0f1e2d3c4b5a6978"),
		treetest.E("debug/build", 'd', 0o755, ""),
		treetest.E("debug/build/demo-1a2b3c", 'd', 0o755, ""),
		treetest.E("debug/build/demo-1a2b3c/build-script-build", 'f', 0o755, "#!/bin/sh\necho hi\n"),
		treetest.E("debug/build/demo-1a2b3c/out", 'd', 0o755, ""),
		treetest.E("debug/build/demo-1a2b3c/output", 'f', 0o644, "cargo:rerun-if-changed=build.rs\n"),
		treetest.E("debug/incremental", 'd', 0o755, ""),
		treetest.E("debug/incremental/demo-3k2j", 'd', 0o750, ""),
		treetest.E("debug/incremental/demo-3k2j/query-cache.bin", 'f', 0o444, "read-only cache"),
		treetest.E("debug/sealed", 'd', 0o555, ""),
		treetest.E("debug/sealed/file", 'f', 0o600, "in a read-only dir"),
		treetest.E("debug/deps-link", 'l', 0, "deps"),
		treetest.E("debug/dangling", 'l', 0, "../missing/nowhere"),
		treetest.E("debug/absolute", 'l', 0, "/nonexistent/ferry/absolute"),
		treetest.E("release", 'd', 0o700, ""),
	}
}

// newFork lays out a base target with entries and an agent dir in store.
func newFork(t *testing.T, store string, entries []treetest.Entry) Paths {
	t.Helper()
	p := Paths{
		BaseTarget: filepath.Join(store, "bases", "b1", "target"),
		AgentDir:   filepath.Join(store, "agents", "a1"),
	}
	treetest.MakeTarget(t, p.BaseTarget, entries)
	if err := os.MkdirAll(p.AgentDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
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

func testTree(t *testing.T, b Backend, store string) {
	entries := cargoTarget()
	p := newFork(t, store, entries)
	before := treetest.Snapshot(t, p.BaseTarget)

	st, err := b.Fork(p)
	if err != nil {
		t.Fatal(err)
	}
	noLeftovers(t, p.AgentDir)
	overlay := b.Name() == NameOverlay
	spec := b.TargetSpec(p)
	if overlay {
		want := OverlaySpec{Lower: p.BaseTarget, Upper: p.Upper(), Work: p.Work()}
		if spec.Dir != "" || spec.Overlay == nil || *spec.Overlay != want {
			t.Errorf("TargetSpec() = %+v (overlay %+v), want only the overlay %+v", spec, spec.Overlay, want)
		}
		// The fork is two empty layer dirs; its tree exists only mounted.
		agentDirHolds(t, p, "upper", "work")
	} else if spec.Dir != p.Target() || spec.Overlay != nil {
		t.Errorf("TargetSpec() = %+v, want only Dir %s", spec, p.Target())
	}

	v := view(t, b, p)
	base, fork := treetest.Snapshot(t, p.BaseTarget), treetest.Snapshot(t, v)
	treetest.SameTree(t, base, fork)

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
		for rel, f := range fork {
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
		if l, f := fork[link], fork[linked]; l.ID != f.ID || l.Nlinks != 2 {
			t.Errorf("%s: inode %v (%d links) in the view, %s %v: want the base's one file with 2 links", link, l.ID, l.Nlinks, linked, f.ID)
		}
	} else {
		// New inodes everywhere; links inside the base are links inside the fork.
		for rel, f := range fork {
			if f.ID == base[rel].ID {
				t.Errorf("%s: the fork shares the base's inode", rel)
			}
		}
		if fork[link].ID != fork[linked].ID {
			t.Errorf("%s: not a hard link of %s inside the fork", link, linked)
		}
	}

	// The tree backends count what they made; the overlay makes its root.
	want := Stats{Dirs: 1}
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

func testWritesStayInFork(t *testing.T, b Backend, store string) {
	p := newFork(t, store, cargoTarget())
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
		fork := treetest.Snapshot(t, v)
		for rel, want := range map[string]string{
			fp + "lib-demo":                               "fedcba9876543210",
			fp + "dep-lib-demo":                           before[fp+"dep-lib-demo"].Data + "more",
			"debug/deps/libdemo-0f1e2d3c4b5a6978.rlib":    "new rlib",
			"debug/incremental/demo-3k2j/query-cache.bin": "",
			"debug/deps/new.rmeta":                        "",
		} {
			if n, ok := fork[rel]; !ok || n.Data != want {
				t.Errorf("mount %d: %s: %q in the fork (present %v), want %q", round, rel, trunc(n.Data), ok, trunc(want))
			}
		}
		if _, ok := fork["CACHEDIR.TAG"]; ok {
			t.Errorf("mount %d: CACHEDIR.TAG: removed in the fork but still there", round)
		}
		if n := fork[fp+"invoked.timestamp"]; n.Mtime != unix.NsecToTimespec(now.UnixNano()) {
			t.Errorf("mount %d: %s: mtime %s in the fork, set to %s", round, fp+"invoked.timestamp", treetest.FmtTime(n.Mtime), now.UTC().Format(time.RFC3339Nano))
		}
		// A chmod (for overlay, a copy-up of the metadata) keeps the mtime
		// Cargo compares.
		const chmodded = "debug/deps/demo-0f1e2d3c4b5a6978.d"
		if n := fork[chmodded]; n.Mode&0o7777 != 0o600 || n.Mtime != before[chmodded].Mtime {
			t.Errorf("mount %d: %s: mode %o, mtime %s in the fork after chmod 600; want 600 and the base's %s",
				round, chmodded, n.Mode&0o7777, treetest.FmtTime(n.Mtime), treetest.FmtTime(before[chmodded].Mtime))
		}

		const link, linked = "debug/demo", "debug/deps/demo-0f1e2d3c4b5a6978"
		if got := fork[link].Data; !strings.HasPrefix(got, "XXXX") {
			t.Errorf("mount %d: %s starts %q after writing XXXX through it", round, link, trunc(got))
		}
		if b.Name() != NameOverlay {
			if got := fork[linked].Data; !strings.HasPrefix(got, "XXXX") {
				t.Errorf("mount %d: the fork's hard links are not one file: %s starts %q", round, linked, trunc(got))
			}
			return
		}
		// overlayfs copies up the one path written: the link breaks, and
		// the other path still shows the base's file (Cargo replaces an
		// uplifted artifact by linking anew, never writes it in place).
		if got := fork[linked].Data; got != before[linked].Data {
			t.Errorf("mount %d: %s is %q after a write through its hard link %s; overlayfs should have copied up only %s",
				round, linked, trunc(got), link, link)
		}
	}
	check(1, v)
	check(2, remount(t, b, p, v))

	if b.Name() == NameOverlay {
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

func testExistingTarget(t *testing.T, b Backend, store string) {
	p := newFork(t, store, cargoTarget())
	// Whatever a fork would make is never merged into: the target, and for
	// overlay its layer dirs too.
	occupied := []string{p.Target()}
	if b.Name() == NameOverlay {
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
					agentDirHolds(t, p, filepath.Base(path))
					if err := RemoveTree(path); err != nil {
						t.Fatal(err)
					}
				})
			}
		})
	}
}

func testSpecialFiles(t *testing.T, b Backend, store string) {
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
			entries := cargoTarget()
			p := newFork(t, dir, entries)
			// Last in walk order, so the fork has made (read-only
			// directories included) all else before it fails.
			bad := filepath.Join(p.BaseTarget, "zz")
			if err := special.make(bad); err != nil {
				t.Skipf("cannot make a %s here: %v", special.kind, err)
			}
			if b.Name() == NameOverlay {
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
func overlaySpecialFile(t *testing.T, b Backend, p Paths, rel string, mode uint32) {
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

func testEmptyBase(t *testing.T, b Backend, store string) {
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

func testMissingBase(t *testing.T, b Backend, store string) {
	p := Paths{BaseTarget: filepath.Join(store, "no-base"), AgentDir: filepath.Join(store, "agent")}
	if err := os.Mkdir(p.AgentDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Fork(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Fork of a missing base: %v, want fs.ErrNotExist", err)
	}
	// Nothing is left: no target, no layer dirs, no temporary dir.
	noLeftovers(t, p.AgentDir)
	agentDirHolds(t, p)

	// A missing agent dir is an error too: Fork makes only the fork.
	p = newFork(t, store, cargoTarget())
	p.AgentDir = filepath.Join(store, "no-agent")
	if _, err := b.Fork(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Fork into a missing agent dir: %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Lstat(p.AgentDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the agent dir exists after a failed fork: %v", err)
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
	switch b.Name() {
	case NameReflink, NameOverlay:
		// Shared extents (reflink), or nothing but the empty upper/
		// (overlay), until the agent writes.
		if fresh > 256<<10 {
			t.Errorf("a fresh %s fork has %d private bytes, want near 0", b.Name(), fresh)
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
	default:
		t.Fatalf("no expectation for backend %s", b.Name())
	}
}

func TestSelect(t *testing.T) {
	tmp := treetest.Dir(t, os.TempDir())
	blocker, err := platform.Real().OverlayBlocker(tmp)
	if err != nil {
		t.Fatalf("overlay probe in %s: %v", tmp, err)
	}
	if blocker != nil {
		t.Logf("overlay is blocked in %s (%s): %v", tmp, fsName(tmp), blocker)
	}
	if ok, err := CanReflink(tmp); err != nil {
		t.Fatal(err)
	} else if ok {
		t.Logf("%s (%s) clones files: auto picks reflink there", tmp, fsName(tmp))
		if b, err := Select(NameAuto, tmp); err != nil || b.Name() != NameReflink {
			t.Errorf("Select(auto) on %s = %v, %v; want reflink", fsName(tmp), b, err)
		}
	} else {
		// No clones: overlay where it mounts, else copy.
		want := NameOverlay
		if blocker != nil {
			want = NameCopy
		}
		b, err := Select(NameAuto, tmp)
		if err != nil || b.Name() != want {
			t.Errorf("Select(auto) on %s = %v, %v; want %s", fsName(tmp), b, err, want)
		}
		_, err = Select(NameReflink, tmp)
		if failure.KindOf(err) != failure.Blocked || !strings.Contains(err.Error(), fsName(tmp)) ||
			!strings.Contains(failure.HintOf(err), "reflink=1") {
			t.Errorf("Select(reflink) on %s: %v (hint %q); want Blocked naming the filesystem, with a hint",
				fsName(tmp), err, failure.HintOf(err))
		}
	}
	b, err := Select(NameOverlay, tmp)
	switch {
	case blocker == nil && (err != nil || b.Name() != NameOverlay):
		t.Errorf("Select(overlay) on %s = %v, %v; want overlay", fsName(tmp), b, err)
	case blocker != nil && (failure.KindOf(err) != failure.Blocked || failure.HintOf(err) != blocker.Remedy):
		t.Errorf("Select(overlay) on %s: %v (hint %q); want Blocked with the remedy %q",
			fsName(tmp), err, failure.HintOf(err), blocker.Remedy)
	}
	if b, err := Select(NameCopy, tmp); err != nil || b.Name() != NameCopy {
		t.Errorf("Select(copy) = %v, %v", b, err)
	}

	if xfs, why := treetest.XFSRoot(); xfs == "" {
		t.Log("skipping auto on XFS: " + why)
	} else {
		// Reflink first, where the store clones files.
		dir := treetest.Dir(t, xfs)
		for _, name := range []string{NameAuto, NameReflink} {
			if b, err := Select(name, dir); err != nil || b.Name() != NameReflink {
				t.Errorf("Select(%s) on %s (%s) = %v, %v; want reflink", name, dir, fsName(dir), b, err)
			}
		}
		// An explicit overlay is overlay there too, where it mounts.
		if blocker, err := platform.Real().OverlayBlocker(dir); err != nil {
			t.Errorf("overlay probe in %s: %v", dir, err)
		} else if blocker != nil {
			t.Logf("overlay is blocked in %s (%s): %v", dir, fsName(dir), blocker)
		} else if b, err := Select(NameOverlay, dir); err != nil || b.Name() != NameOverlay {
			t.Errorf("Select(overlay) on %s (%s) = %v, %v; want overlay", dir, fsName(dir), b, err)
		}
	}

	for _, c := range []struct {
		name string
		kind failure.Kind
		hint string
	}{
		{"hardlink", failure.Usage, "File::create"},
		{"clonefile", failure.Usage, "overlay"},
		{"", failure.Usage, "auto"},
	} {
		_, err := Select(c.name, tmp)
		if err == nil || failure.KindOf(err) != c.kind || !strings.Contains(failure.HintOf(err), c.hint) {
			t.Errorf("Select(%q): %v (kind %v, hint %q); want %v with a hint mentioning %q",
				c.name, err, failure.KindOf(err), failure.HintOf(err), c.kind, c.hint)
		}
	}

	// A store the probes cannot use is an error, not a silent copy.
	for _, name := range []string{NameAuto, NameOverlay} {
		if b, err := Select(name, filepath.Join(tmp, "missing")); err == nil {
			t.Errorf("Select(%s) in a missing dir = %v, want an error", name, b.Name())
		}
	}
}

func TestByName(t *testing.T) {
	for _, name := range []string{NameReflink, NameCopy, NameOverlay} {
		if b, err := ByName(name); err != nil || b.Name() != name {
			t.Errorf("ByName(%s) = %v, %v", name, b, err)
		}
	}
	for _, name := range []string{NameAuto, "hardlink", "bogus"} {
		if b, err := ByName(name); err == nil {
			t.Errorf("ByName(%s) = %v, want an error", name, b.Name())
		}
	}
}

func TestCanReflink(t *testing.T) {
	if _, err := CanReflink(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("CanReflink of a missing dir: no error")
	}
	dir := treetest.Dir(t, os.TempDir())
	ok, err := CanReflink(dir)
	t.Logf("%s (%s): CanReflink = %v, %v", dir, fsName(dir), ok, err)
	if err != nil {
		t.Fatal(err)
	}
	if xfs, why := treetest.XFSRoot(); xfs == "" {
		t.Log("skipping XFS: " + why)
	} else if ok, err := CanReflink(treetest.Dir(t, xfs)); !ok || err != nil {
		t.Errorf("CanReflink on %s = %v, %v; want true", xfs, ok, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("the probe left files behind: %v", entries)
	}
}

func TestUnprivileged(t *testing.T) {
	unpriv.Rerun(t, "^Test(Conformance|CloningWalk|Select|SelectOverlayBlocked|ByName|CanReflink|OverlayInexpressiblePath)$")
}
