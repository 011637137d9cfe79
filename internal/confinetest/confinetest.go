// Package confinetest is one confined sandbox plan, with what a command in
// it must be able to write and what it must not, for every way into a
// sandbox to be tested against (package sandbox's child, the shim's C
// constructor in package inplace).
//
// The layout puts the store and the worktrees below a fake $HOME, and all
// of it below /tmp (t.TempDir), which stays writable: the plan covers
// $HOME with a private layer, which must put the store and the worktrees
// back on top, inside a /tmp made a writable mount of its own, with the
// worktree writable again inside both.
package confinetest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/sandbox"
)

// World is a confined plan and the host paths its checks name.
type World struct {
	Plan sandbox.Plan
	// The host's paths.
	Home, Store, Worktree, Other, Layer, Tmp, MntTarget string
	// Marker is a file name the command makes in /tmp, $TMPDIR and
	// /dev/shm.
	Marker string
}

// New makes the layout and returns the plan, whose command checks what it
// may write (Check reads its output). With inHome the store and the
// worktrees lie below $HOME, as Ferry's defaults put them; without, beside
// it, directly in the writable /tmp (FERRY_HOME=/tmp/...), where the store
// must be a read-only mount of its own with the worktree writable again
// inside it.
func New(t *testing.T, inHome bool) *World {
	t.Helper()
	root := t.TempDir()
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	if !strings.HasPrefix(root, "/tmp/") {
		t.Skipf("the layout must lie below /tmp to cover it, and TMPDIR puts it at %s", root)
	}
	os.Chmod(root, 0o755)
	// The overlay leaves work/work at mode 0, which an unprivileged
	// user's TempDir cleanup could not remove.
	t.Cleanup(func() {
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if d != nil && d.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
	})
	w := &World{Home: filepath.Join(root, "home")}
	w.Store = filepath.Join(w.Home, ".cache", "ferry")
	w.Worktree = filepath.Join(w.Home, ".local", "share", "ferry", "worktrees", "repo-1234", "a")
	if !inHome {
		w.Store = filepath.Join(root, "ferry")
		w.Worktree = filepath.Join(w.Store, "worktrees", "repo-1234", "a")
	}
	repo := filepath.Join(w.Store, "repo-1234")
	w.Other = filepath.Join(filepath.Dir(w.Worktree), "b")
	agent := filepath.Join(repo, "agents", "a")
	w.Layer = filepath.Join(agent, "private", "layers", "0", "home")
	w.Tmp = filepath.Join(agent, "private", "tmp")
	w.MntTarget = filepath.Join(repo, "mnt", "target")
	w.Marker = "ferry-confinetest" + strings.ReplaceAll(root, "/", "-")
	mntSrc := filepath.Join(repo, "mnt", "src")
	mntTmp := filepath.Join(repo, "mnt", "tmp")
	fork := filepath.Join(agent, "target")
	for _, d := range []string{w.Worktree, w.Other, mntSrc, mntTmp, w.MntTarget, fork, filepath.Join(w.Layer, "upper"), filepath.Join(w.Layer, "work"),
		w.Tmp, filepath.Join(w.Home, ".cargo", "bin"), filepath.Join(w.Home, ".cargo", "registry", "src", "dep-1.0"),
		filepath.Join(w.Store, "bin"), filepath.Join(w.Store, "keys")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range map[string]string{
		filepath.Join(w.Home, ".bashrc"):                                        "# the host's\n",
		filepath.Join(w.Home, ".cargo", "bin", "cargo"):                         "#!/bin/sh\n",
		filepath.Join(w.Home, ".cargo", "registry", "src", "dep-1.0", "lib.rs"): "pub fn f() {}\n",
		filepath.Join(w.Worktree, ".git"):                                       "gitdir: /elsewhere\n",
		filepath.Join(w.Worktree, "main.rs"):                                    "fn main() {}\n",
		filepath.Join(w.Other, "main.rs"):                                       "fn main() {}\n",
		filepath.Join(w.Store, "keys", "signing"):                               "secret\n",
	} {
		if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w.Plan = sandbox.Plan{
		Store:    w.Store,
		World:    true,
		Writable: []string{w.Worktree, "/tmp"},
		ReadOnly: []string{filepath.Join(w.Worktree, ".git"), filepath.Join(w.Home, ".cargo", "bin"), filepath.Dir(w.Worktree)},
		Private:  []sandbox.Layer{{Root: w.Home, Upper: filepath.Join(w.Layer, "upper"), Work: filepath.Join(w.Layer, "work")}},
		Masked:   []string{filepath.Join(w.Store, "keys")},
		Binds:    []sandbox.Bind{{Source: w.Worktree, Target: mntSrc}, {Source: fork, Target: w.MntTarget}, {Source: w.Tmp, Target: mntTmp}},
		Dir:      mntSrc,
		Argv:     []string{"sh", "-c", w.script()},
		Env:      []string{"PATH=/usr/bin:/bin", "HOME=" + w.Home, "TMPDIR=" + mntTmp},
	}
	return w
}

// script writes where it may, tries where it may not, and says which
// failed.
func (w *World) script() string {
	must := []string{
		w.Worktree + "/built.txt",  // the worktree, by its host path
		"main.rs",                  // and at the canonical path
		w.MntTarget + "/debug.txt", // the fork
		w.Home + "/.bashrc",        // $HOME: the private layer
		w.Home + "/.cargo/registry/src/dep-1.0/lib.rs",
		w.Home + "/new-file",
		"/tmp/" + w.Marker,     // /tmp: the host's, writable
		"$TMPDIR/" + w.Marker,  // $TMPDIR: the agent's own
		"/dev/shm/" + w.Marker, // /dev/shm too
		"/dev/null",
	}
	mustNot := []string{
		w.Worktree + "/.git",           // the worktree's git link
		w.Home + "/.cargo/bin/cargo",   // a toolchain
		w.Other + "/main.rs",           // another agent's worktree
		w.Store + "/planted",           // the store
		w.Store + "/bin/cargo",         // the shim
		w.Layer + "/upper/direct",      // its own layer, by its store path
		"/usr/local/ferry-confinetest", // the rest of the host
		"/etc/ferry-confinetest",
	}
	var b strings.Builder
	for i, f := range must {
		b.WriteString("echo x >> \"" + f + "\" || { echo \"could not write " + f + "\"; exit " + strconv.Itoa(10+i) + "; }\n")
	}
	for i, f := range mustNot {
		b.WriteString("if echo x >> '" + f + "' 2>/dev/null; then echo 'wrote " + f + "'; exit " + strconv.Itoa(30+i) + "; fi\n")
	}
	// The secrets are hidden, and nothing may mount (root neither).
	b.WriteString("if [ -e '" + w.Store + "/keys/signing' ]; then echo 'saw the key'; exit 50; fi\n")
	b.WriteString("cap() { echo $(( 0x$(sed -n \"s/^$1:[[:space:]]*//p\" /proc/self/status) >> 21 & 1 )); }\n")
	b.WriteString("if [ $(cap CapEff) = 1 ] || { [ $(id -u) = 0 ] && [ $(cap CapBnd) = 1 ]; }; then echo 'may mount'; exit 51; fi\n")
	b.WriteString("echo ok\n")
	return b.String()
}

// Check fails t unless the command's output says every check passed and the
// host shows exactly the writes that were to reach it.
func (w *World) Check(t *testing.T, out string, err error) {
	t.Helper()
	if err != nil || !strings.HasSuffix(out, "ok\n") {
		t.Fatalf("%v\n%s", err, out)
	}
	read := func(p string) string {
		b, _ := os.ReadFile(p)
		return string(b)
	}
	if got := read(filepath.Join(w.Worktree, "built.txt")); got != "x\n" {
		t.Errorf("the worktree's write reached the host as %q", got)
	}
	if got := read(filepath.Join(w.Worktree, "main.rs")); got != "fn main() {}\nx\n" {
		t.Errorf("the canonical write reached the host as %q", got)
	}
	if got := read(filepath.Join(w.Home, ".bashrc")); got != "# the host's\n" {
		t.Errorf("the host's .bashrc is %q: the private layer let the write through", got)
	}
	if got := read(filepath.Join(w.Layer, "upper", ".bashrc")); got != "# the host's\nx\n" {
		t.Errorf("the private layer holds .bashrc as %q", got)
	}
	if got := read(filepath.Join(w.Home, ".cargo", "registry", "src", "dep-1.0", "lib.rs")); got != "pub fn f() {}\n" {
		t.Errorf("the host's registry source is %q", got)
	}
	if got := read("/tmp/" + w.Marker); got != "x\n" {
		t.Errorf("/tmp holds %q on the host", got)
	}
	os.Remove("/tmp/" + w.Marker)
	for _, p := range []string{filepath.Join(w.Home, "new-file"), "/dev/shm/" + w.Marker} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s reached the host", p)
			os.Remove(p)
		}
	}
	if got := read(filepath.Join(w.Tmp, w.Marker)); got != "x\n" {
		t.Errorf("the agent's $TMPDIR holds %q", got)
	}
	if got := read(filepath.Join(w.Home, ".cargo", "bin", "cargo")); got != "#!/bin/sh\n" {
		t.Errorf("the toolchain's cargo is %q", got)
	}
}
