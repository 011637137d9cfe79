package ferrycmd

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ferrydev/ferry/internal/bustest"
	"github.com/ferrydev/ferry/internal/unpriv"
	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/cli/basecmd"
	"github.com/ferrydev/ferry/pkg/cli/gccmd"
	"github.com/ferrydev/ferry/pkg/cli/spawncmd"
	"github.com/ferrydev/ferry/pkg/platform"
)

// The store belongs to its user: a store parent, bin/ or bus/ that someone
// else owns or may write is refused by every command, before it writes,
// installs the shim or publishes anything. These tests plant what another
// user would plant: their own FERRY_HOME, or open bin/ and bus/ directories
// holding the address and token of a real bus they host.

// cargoRepo makes a git repository with one committed Cargo package (so
// that, were the store trusted, ferry base would go on to build it), enters
// it, and points FERRY_HOME at home and the worktrees at a fresh path.
func cargoRepo(t *testing.T, home string) (worktrees string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	repo := t.TempDir()
	files := map[string]string{
		"Cargo.toml":  "[package]\nname = \"owned\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
		"src/main.rs": "fn main() { println!(\"owned\"); }\n",
		".gitignore":  "/target\n",
	}
	for name, content := range files {
		p := filepath.Join(repo, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"add", "-A"},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "init"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	worktrees = filepath.Join(t.TempDir(), "worktrees")
	t.Setenv("FERRY_HOME", home)
	t.Setenv("FERRY_WORKTREES", worktrees)
	t.Setenv("FERRY_BACKEND", "")
	t.Setenv("FERRY_SANDBOX", "")
	t.Setenv("FERRY_NATS_URL", "")
	t.Chdir(repo)
	return worktrees
}

// otherUser is the unprivileged test user; it skips unless root.
func otherUser(t *testing.T) (string, int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give directories to another user")
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

// plantBus writes, into dir (made if missing, then given mode), the
// bus.json and token of a real bus hosted elsewhere, and gives everything
// to uid unless it is -1. It returns the server's connection count so far.
func plantBus(t *testing.T, dir string, mode os.FileMode, uid int) (connections func() uint64) {
	t.Helper()
	h := bustest.Start(t)
	os.MkdirAll(dir, 0o755)
	for _, name := range []string{"bus.json", "token"} {
		b, err := os.ReadFile(filepath.Join(h.Dir(), name))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if uid != -1 {
			os.Chown(p, uid, uid)
		}
	}
	os.Chmod(dir, mode)
	if uid != -1 {
		os.Chown(dir, uid, uid)
	}
	return func() uint64 {
		v, err := h.Server().Varz(nil)
		if err != nil {
			t.Fatal(err)
		}
		return v.TotalConnections
	}
}

// snapshot lists everything under dir with its owner, mode and size.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			lines = append(lines, p+" "+err.Error())
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		lines = append(lines, fmt.Sprintf("%s uid=%d mode=%v size=%d mtime=%d", p, st.Uid, fi.Mode(), fi.Size(), fi.ModTime().UnixNano()))
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// ownerCommands are the commands that open the store, run in-process.
var ownerCommands = []struct {
	name string
	run  func(args []string, io cli.IO) int
	args []string
}{
	{"ferry base", stage(basecmd.Main, "ferry base"), []string{"--json"}},
	{"ferry spawn", stage(spawncmd.Main, "ferry spawn"), []string{"a1", "--json"}},
	{"ferry list", Main, []string{"list", "--json"}},
	{"ferry env", Main, []string{"env", "a1", "--json"}},
	{"ferry gc", stage(gccmd.Main, "ferry gc"), []string{"--json"}},
	{"ferry rm", Main, []string{"rm", "a1", "--json"}},
	{"ferry doctor", Main, []string{"doctor", "--json"}},
}

// expectRefusals runs every command and checks each is refused with exit
// 6, its message containing every want, and that nothing under home
// changed, no worktree was made and the planted bus saw no connection.
func expectRefusals(t *testing.T, home, worktrees string, connections func() uint64, want ...string) {
	t.Helper()
	before, conns := snapshot(t, home), connections()
	blocked := platform.Real().UsernsBlocker() != nil
	for _, c := range ownerCommands {
		if c.name == "ferry doctor" && blocked {
			continue // doctor reports the blocked sandbox first
		}
		var out, errOut bytes.Buffer
		code := c.run(c.args, cli.IO{Stdout: &out, Stderr: &errOut})
		text := out.String() + errOut.String()
		if code != 6 || !strings.Contains(text, `"exit_code": 6`) {
			t.Errorf("%s: exit %d, want 6 (refused)\nstdout:\n%s\nstderr:\n%s", c.name, code, out.String(), errOut.String())
			continue
		}
		for _, w := range append([]string{"refused the", "hint:"}, want...) {
			if c.name == "ferry doctor" && w == "hint:" {
				w = `"hint": "`
			}
			if !strings.Contains(text, w) {
				t.Errorf("%s: output lacks %q\nstdout:\n%s\nstderr:\n%s", c.name, w, out.String(), errOut.String())
			}
		}
	}
	if after := snapshot(t, home); after != before {
		t.Errorf("the commands changed the refused store parent:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if _, err := os.Stat(filepath.Join(home, "bin", "cargo")); err == nil {
		t.Errorf("the shim was installed into %s", filepath.Join(home, "bin"))
	}
	if _, err := os.Stat(worktrees); err == nil {
		t.Errorf("a worktree parent %s was made", worktrees)
	}
	if n := connections(); n != conns {
		t.Errorf("the planted bus saw %d connection(s)", n-conns)
	}
}

// TestStoreParentOfAnotherUserIsRefused: root, with FERRY_HOME a directory
// another user made (and filled with their bus), is refused by every
// command, naming that user; nothing is written or published.
func TestStoreParentOfAnotherUserIsRefused(t *testing.T) {
	name, uid := otherUser(t)
	home := filepath.Join(t.TempDir(), "home")
	os.Mkdir(home, 0o755)
	worktrees := cargoRepo(t, home)
	connections := plantBus(t, filepath.Join(home, "bus"), 0o700, uid)
	os.MkdirAll(filepath.Join(home, "bin"), 0o755)
	os.Chown(filepath.Join(home, "bin"), uid, uid)
	os.Chown(home, uid, uid)
	expectRefusals(t, home, worktrees, connections,
		home+" is owned by "+name+" (uid "+strconv.Itoa(uid)+")", "chown -R root")
}

// TestOpenBinAndBusOfAnotherUserAreRefused: a store parent of root's own,
// where another user has made bin/ and bus/ mode 0777 with their bus.json
// and token, is refused by every command, which never connects.
func TestOpenBinAndBusOfAnotherUserAreRefused(t *testing.T) {
	name, uid := otherUser(t)
	home := filepath.Join(t.TempDir(), "home")
	os.Mkdir(home, 0o755)
	worktrees := cargoRepo(t, home)
	connections := plantBus(t, filepath.Join(home, "bus"), 0o777, uid)
	bin := filepath.Join(home, "bin")
	os.Mkdir(bin, 0o777)
	os.Chmod(bin, 0o777)
	os.Chown(bin, uid, uid)
	expectRefusals(t, home, worktrees, connections, "is owned by "+name+" (uid "+strconv.Itoa(uid)+")")

	// Only bus/ theirs: the bus directory is named.
	os.Chown(bin, 0, 0)
	os.Chmod(bin, 0o755)
	expectRefusals(t, home, worktrees, connections, "refused the bus directory "+filepath.Join(home, "bus"), "owned by "+name)
}

// TestOpenBinAndBusAreRefused: bin/ and bus/ mode 0777, even the caller's
// own, are refused (anyone could add a cargo or a bus.json); this runs as
// any user, and as root again unprivileged.
func TestOpenBinAndBusAreRefused(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	os.Mkdir(home, 0o755)
	worktrees := cargoRepo(t, home)
	connections := plantBus(t, filepath.Join(home, "bus"), 0o777, -1)
	bin := filepath.Join(home, "bin")
	os.Mkdir(bin, 0o755)
	os.Chmod(bin, 0o777)
	expectRefusals(t, home, worktrees, connections, bin+" is writable by group and others (mode 0777", "chmod go-w "+bin)
}

func TestOwnerRefusalsUnprivileged(t *testing.T) {
	unpriv.Rerun(t, "^TestOpenBinAndBusAreRefused$")
}

// stage runs a stage's Main as the front would, under its typed name.
func stage(main func(string, []string, cli.IO) int, name string) func([]string, cli.IO) int {
	return func(args []string, io cli.IO) int { return main(name, args, io) }
}
