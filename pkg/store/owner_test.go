package store

import (
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/internal/unpriv"
	"github.com/ferrydev/ferry/pkg/failure"
)

// tree makes a real directory under t.TempDir() with mode perm (set with
// chmod, so the umask does not change it) and returns its path.
func tree(t *testing.T, perm os.FileMode, elem ...string) string {
	t.Helper()
	p := filepath.Join(elem...)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
	return p
}

// safeRoot is a fresh directory the caller owns, mode 0755, with its real
// path (t.TempDir() may sit behind a symlink).
func safeRoot(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// refusedAt checks that err is the owner refusal of dir (a real path) with
// a hint, and returns it.
func refusedAt(t *testing.T, err error, dir string) *OwnerError {
	t.Helper()
	var oe *OwnerError
	if !errors.As(err, &oe) {
		t.Fatalf("want an owner refusal of %s, got %v", dir, err)
	}
	if oe.Dir != dir {
		t.Fatalf("refused %s (%v), want %s", oe.Dir, err, dir)
	}
	if failure.KindOf(err) != failure.Refused || failure.KindOf(err).ExitCode() != 6 {
		t.Fatalf("kind %v, want refused (exit 6): %v", failure.KindOf(err), err)
	}
	if !strings.Contains(failure.HintOf(err), "FERRY_HOME") {
		t.Fatalf("hint %q does not offer another FERRY_HOME", failure.HintOf(err))
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "uid ") || !strings.Contains(err.Error(), "mode ") {
		t.Fatalf("message does not name the path, the owner and the mode: %v", err)
	}
	return oe
}

func TestOwnerAcceptsOwnDirsAndMissingTail(t *testing.T) {
	root := safeRoot(t)
	if err := CheckOwned(RoleParent, filepath.Join(root, "not", "yet", "there")); err != nil {
		t.Fatalf("missing tail refused: %v", err)
	}
	parent := tree(t, 0o700, root, "home")
	tree(t, 0o755, parent, "bin")
	tree(t, 0o700, parent, "bus")
	s := &Store{Parent: parent, Dir: filepath.Join(parent, "repo-0123456789ab")}
	if err := s.CheckOwner(); err != nil {
		t.Fatalf("own store refused: %v", err)
	}
	if err := s.CheckOwnDirs(); err != nil {
		t.Fatalf("own store refused by the shim's check: %v", err)
	}
}

func TestOwnerRefusesGroupWritableParent(t *testing.T) {
	root := safeRoot(t)
	parent := tree(t, 0o775, root, "home")
	s := &Store{Parent: parent, Dir: filepath.Join(parent, "k")}
	oe := refusedAt(t, s.CheckOwner(), parent)
	if oe.Role != RoleParent || !oe.Own || oe.Reason() != "writable by its group" {
		t.Fatalf("%+v: %s", oe, oe.Reason())
	}
	if h := failure.HintOf(s.CheckOwner()); !strings.Contains(h, "chmod go-w "+parent) {
		t.Fatalf("hint %q does not give the chmod", h)
	}
	refusedAt(t, s.CheckOwnDirs(), parent)
	// Sticky does not make Ferry's own directory safe: others may still
	// add a bin/cargo to it.
	os.Chmod(parent, os.ModeSticky|0o777)
	refusedAt(t, s.CheckOwner(), parent)
}

func TestOwnerRefusesOpenBinAndBus(t *testing.T) {
	for _, sub := range []string{"bin", "bus"} {
		t.Run(sub, func(t *testing.T) {
			root := safeRoot(t)
			parent := tree(t, 0o755, root, "home")
			bad := tree(t, 0o777, parent, sub)
			s := &Store{Parent: parent, Dir: filepath.Join(parent, "k")}
			oe := refusedAt(t, s.CheckOwner(), bad)
			if want := map[string]string{"bin": RoleShim, "bus": RoleBus}[sub]; oe.Role != want {
				t.Fatalf("role %q, want %q", oe.Role, want)
			}
			if sub == "bus" {
				refusedAt(t, CheckOwned(RoleBus, s.BusDir()), bad)
			} else {
				refusedAt(t, s.CheckOwnDirs(), bad)
			}
		})
	}
}

func TestOwnerWorldWritableAncestor(t *testing.T) {
	root := safeRoot(t)
	shared := tree(t, 0o777, root, "shared")
	parent := tree(t, 0o755, shared, "mine", "home")
	oe := refusedAt(t, CheckOwned(RoleParent, parent), shared)
	if oe.Own || oe.Reason() != "writable by others and not sticky" {
		t.Fatalf("%+v: %s", oe, oe.Reason())
	}
	// Missing below it does not help: anyone could make the rest.
	refusedAt(t, CheckOwned(RoleParent, filepath.Join(shared, "later", "home")), shared)

	// A group-writable ancestor, not sticky: refused the same way.
	os.Chmod(shared, 0o775)
	refusedAt(t, CheckOwned(RoleParent, parent), shared)

	// Sticky, like /tmp: others may add entries but not replace ours.
	os.Chmod(shared, os.ModeSticky|0o777)
	if err := CheckOwned(RoleParent, parent); err != nil {
		t.Fatalf("sticky ancestor refused: %v", err)
	}
	if err := CheckOwned(RoleParent, filepath.Join(shared, "later", "home")); err != nil {
		t.Fatalf("missing tail in a sticky ancestor refused: %v", err)
	}
}

func TestOwnerTempDirPasses(t *testing.T) {
	// The existing tests put FERRY_HOME in t.TempDir(), under /tmp (sticky,
	// root's) or, unprivileged, under the re-run's home.
	parent := filepath.Join(t.TempDir(), "ferry")
	s := &Store{Parent: parent, Dir: filepath.Join(parent, "k")}
	if err := s.CheckOwner(); err != nil {
		t.Fatal(err)
	}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckOwner(); err != nil {
		t.Fatal(err)
	}
}

func TestOwnerResolvesSymlinks(t *testing.T) {
	root := safeRoot(t)
	real := tree(t, 0o755, root, "real", "home")
	link := filepath.Join(root, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if err := CheckOwned(RoleParent, link); err != nil {
		t.Fatalf("a link to an own directory refused: %v", err)
	}
	// Through a relative link, into a directory behind one.
	rel := filepath.Join(root, "rel")
	if err := os.Symlink("real/../real/home", rel); err != nil {
		t.Fatal(err)
	}
	if err := CheckOwned(RoleParent, rel); err != nil {
		t.Fatalf("a relative link refused: %v", err)
	}

	// The real directory is judged, not the link: the link looks fine, the
	// target is group-writable.
	os.Chmod(real, 0o775)
	refusedAt(t, CheckOwned(RoleParent, link), real)
	refusedAt(t, CheckOwned(RoleParent, rel), real)
	os.Chmod(real, 0o755)

	// A link whose target passes through an open directory.
	open := tree(t, 0o777, root, "open")
	tree(t, 0o755, open, "home")
	via := filepath.Join(root, "via")
	os.Symlink(filepath.Join(open, "home"), via)
	refusedAt(t, CheckOwned(RoleParent, via), open)

	// A link kept in an open directory: its target is fine, but anyone can
	// swap the link.
	swap := filepath.Join(open, "swap")
	os.Symlink(real, swap)
	refusedAt(t, CheckOwned(RoleParent, filepath.Join(swap)), open)

	// A dangling link: the part that exists is judged, the rest is created.
	dangling := filepath.Join(root, "dangling")
	os.Symlink(filepath.Join(root, "nowhere", "home"), dangling)
	if err := CheckOwned(RoleParent, dangling); err != nil {
		t.Fatalf("dangling link to an own place refused: %v", err)
	}

	// A loop ends with ELOOP, not forever.
	loop := filepath.Join(root, "loop")
	os.Symlink(loop, loop)
	if err := CheckOwned(RoleParent, loop); !errors.Is(err, unix.ELOOP) {
		t.Fatalf("loop: %v", err)
	}
}

func TestOwnerRefusesAnotherUsersDirectory(t *testing.T) {
	other, uid := otherUser(t)
	root := safeRoot(t)
	parent := tree(t, 0o755, root, "home")
	if err := os.Chown(parent, uid, uid); err != nil {
		t.Fatal(err)
	}
	s := &Store{Parent: parent, Dir: filepath.Join(parent, "k")}
	oe := refusedAt(t, s.CheckOwner(), parent)
	if want := other + " (uid " + strconv.Itoa(uid) + ")"; !strings.Contains(oe.Error(), want) {
		t.Fatalf("%v does not name the owner %s", oe, want)
	}
	refusedAt(t, s.CheckOwnDirs(), parent)
	// Root is not exempt, and Init writes nothing there.
	refusedAt(t, s.Init(), parent)
	if ents, _ := os.ReadDir(parent); len(ents) != 0 {
		t.Fatalf("Init wrote into a refused parent: %v", ents)
	}

	// Their directory on the way to ours: they could replace ours.
	os.Chown(parent, 0, 0)
	own := tree(t, 0o755, parent, "mine")
	os.Chown(parent, uid, uid)
	refusedAt(t, CheckOwned(RoleParent, own), parent)

	// Their symlink, in a directory of ours, to a directory of ours.
	os.Chown(parent, 0, 0)
	link := filepath.Join(root, "link")
	os.Symlink(own, link)
	if err := unix.Lchown(link, uid, uid); err != nil {
		t.Fatal(err)
	}
	oe = refusedAt(t, CheckOwned(RoleParent, link), link)
	if !oe.Link {
		t.Fatalf("%+v is not about the link", oe)
	}
}

// otherUser is the unprivileged test user, whose files root can make; it
// skips unless running as root with that user present.
func otherUser(t *testing.T) (string, int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another user")
	}
	name := os.Getenv("FERRY_TEST_USER")
	if name == "" {
		name = unpriv.DefaultUser
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Skipf("no user %q: %v", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	return name, uid
}

func TestOwnerRefusesRootsDirectoryForAUser(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("as root, root's directories are the caller's (the unprivileged re-run covers this)")
	}
	// /usr is root's: a user may have a store below a root directory, but
	// not one that is root's itself.
	oe := refusedAt(t, CheckOwned(RoleParent, "/usr"), "/usr")
	if !strings.Contains(oe.Error(), "owned by root (uid 0)") {
		t.Fatalf("%v", oe)
	}
	if err := CheckOwned(RoleParent, "/usr/no-such-ferry-home"); err != nil {
		t.Fatalf("a missing directory below root's refused: %v", err)
	}
}

func TestMkdirAllIgnoresUmask(t *testing.T) {
	root := safeRoot(t)
	old := unix.Umask(0o002)
	defer unix.Umask(old)

	// Asked for 0777 under umask 002, a plain mkdir makes 0775: a
	// directory the check refuses. MkdirAll takes group and other write off.
	deep := filepath.Join(root, "a", "b", "home")
	if err := MkdirAll(deep, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(root, "a"), filepath.Join(root, "a", "b"), deep} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o755 {
			t.Fatalf("%s: mode %04o under umask 002, want 0755", d, fi.Mode().Perm())
		}
	}
	if err := MkdirAll(filepath.Join(root, "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(root, "private")); fi.Mode().Perm() != 0o700 {
		t.Fatalf("private: mode %04o", fi.Mode().Perm())
	}
}

// TestInitIgnoresUmask: the whole store, made under umask 002, has no
// directory group or others may write, so it passes its own check. (Ferry
// asks for 0755, which no umask widens; this guards that it stays so.)
func TestInitIgnoresUmask(t *testing.T) {
	root := safeRoot(t)
	old := unix.Umask(0o002)
	defer unix.Umask(old)
	parent := filepath.Join(root, "x", "ferry")
	s := &Store{Parent: parent, Dir: filepath.Join(parent, "k"), Key: "k"}
	if err := s.Init(); err != nil {
		t.Fatalf("Init under umask 002: %v", err)
	}
	shim := filepath.Join(root, "ferry-shim")
	os.WriteFile(shim, []byte("#!/bin/sh\n"), 0o755)
	if err := s.InstallShim(shim); err != nil {
		t.Fatalf("InstallShim under umask 002: %v", err)
	}
	for _, d := range []string{filepath.Join(root, "x"), parent, s.Dir, s.ShimDir(), s.MntSrc(), s.MntTarget(), s.BasesDir(), s.AgentsDir(), s.TmpDir()} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o755 {
			t.Fatalf("%s: %v, mode %v; want 0755", d, err, fi.Mode())
		}
	}
}

func TestInstallShimRefusesOpenBin(t *testing.T) {
	root := safeRoot(t)
	parent := tree(t, 0o755, root, "home")
	bin := tree(t, 0o777, parent, "bin")
	shim := filepath.Join(root, "ferry-shim")
	os.WriteFile(shim, []byte("#!/bin/sh\n"), 0o755)
	s := &Store{Parent: parent, Dir: filepath.Join(parent, "k")}
	refusedAt(t, s.InstallShim(shim), bin)
	if _, err := os.Lstat(filepath.Join(bin, "cargo")); err == nil {
		t.Fatal("the shim was installed in an open bin/")
	}
}

// TestOwnerInsideUserNamespace: in a user namespace that maps only the
// caller, as an agent's sandbox does for an ordinary user, root's
// directories show the overflow uid; they are still accepted on the way to
// a store of the caller's, and not as the store itself.
func TestOwnerInsideUserNamespace(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root's sandbox maps root; the unprivileged re-run covers this")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare (util-linux)")
	}
	parent := filepath.Join(safeRoot(t), "home")
	cmd := exec.Command(unshare, "-U", "--map-user="+strconv.Itoa(os.Getuid()), "--map-group="+strconv.Itoa(os.Getgid()),
		os.Args[0], "-test.run=^TestOwnerInNamespaceChild$", "-test.v")
	cmd.Env = append(os.Environ(), "FERRY_OWNER_NS_DIR="+parent)
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "unshare failed") {
		t.Skipf("no user namespace here: %s", out)
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: TestOwnerInNamespaceChild") {
		t.Fatalf("in a user namespace: %v\n%s", err, out)
	}
}

// TestOwnerInNamespaceChild is TestOwnerInsideUserNamespace's child.
func TestOwnerInNamespaceChild(t *testing.T) {
	parent := os.Getenv("FERRY_OWNER_NS_DIR")
	if parent == "" {
		t.Skip("run by TestOwnerInsideUserNamespace")
	}
	var st unix.Stat_t
	if err := unix.Stat("/", &st); err != nil || int(st.Uid) == 0 {
		t.Fatalf("/ shows uid %d (%v): not in a namespace that leaves root unmapped", st.Uid, err)
	}
	s := &Store{Parent: parent, Dir: filepath.Join(parent, "k")}
	if err := s.CheckOwner(); err != nil {
		t.Fatalf("a store of the caller's, below root's directories: %v", err)
	}
	if err := CheckOwned(RoleParent, "/"); err == nil || !strings.Contains(err.Error(), "owned by") {
		t.Fatalf("/ as the store parent: %v", err)
	}
	// Open ways are refused there too.
	shared := tree(t, 0o777, filepath.Dir(parent), "shared")
	refusedAt(t, CheckOwned(RoleParent, filepath.Join(shared, "home")), shared)
}

func TestOwnerUnprivileged(t *testing.T) {
	unpriv.Rerun(t, "^Test(OwnerAcceptsOwnDirsAndMissingTail|OwnerRefusesGroupWritableParent|OwnerRefusesOpenBinAndBus|OwnerWorldWritableAncestor|OwnerTempDirPasses|OwnerResolvesSymlinks|OwnerRefusesRootsDirectoryForAUser|MkdirAllIgnoresUmask|InitIgnoresUmask|InstallShimRefusesOpenBin|OwnerInsideUserNamespace)$")
}

// The cost of the checks (see the package notes in owner.go): go test
// -run ^$ -bench Check ./pkg/store
func BenchmarkCheckOwner(b *testing.B) {
	parent := filepath.Join(b.TempDir(), "a", "b", "ferry")
	s := &Store{Parent: parent, Dir: filepath.Join(parent, "k"), Key: "k"}
	if err := s.Init(); err != nil {
		b.Fatal(err)
	}
	MkdirAll(s.ShimDir(), 0o755)
	MkdirAll(s.BusDir(), 0o700)
	b.Run("CheckOwner", func(b *testing.B) {
		for b.Loop() {
			if err := s.CheckOwner(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("CheckOwnDirs", func(b *testing.B) {
		for b.Loop() {
			if err := s.CheckOwnDirs(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
