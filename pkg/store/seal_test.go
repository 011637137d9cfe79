//go:build linux

package store

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/failure"
)

// A store on a read-only filesystem is named as that (a prerequisite, with
// the setting that moves it), not as the sandbox: only a store whose
// secrets are covered, as a sandbox covers them, is refused as sealed.
func TestReadOnlyStoreIsNotTakenForTheSandbox(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare (util-linux)")
	}
	cmd := exec.Command(unshare, "-Urm", os.Args[0], "-test.run=^TestReadOnlyStoreChild$", "-test.v")
	cmd.Env = append(os.Environ(), "FERRY_RO_STORE_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "unshare failed") {
		t.Skipf("no user namespace here: %s", out)
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: TestReadOnlyStoreChild") {
		t.Fatalf("in a mount namespace: %v\n%s", err, out)
	}
}

// TestReadOnlyStoreChild is TestReadOnlyStoreIsNotTakenForTheSandbox's
// child, in a user and mount namespace of its own.
func TestReadOnlyStoreChild(t *testing.T) {
	dir := os.Getenv("FERRY_RO_STORE_DIR")
	if dir == "" {
		t.Skip("run by TestReadOnlyStoreIsNotTakenForTheSandbox")
	}
	parent := filepath.Join(dir, "home")
	os.MkdirAll(filepath.Join(parent, "k"), 0o755)
	s := &Store{Parent: parent, Dir: filepath.Join(parent, "k")}
	if err := s.CheckWritable(); err != nil {
		t.Fatalf("a writable store: %v", err)
	}
	for _, d := range Secrets(parent) {
		os.Mkdir(d, 0o700)
	}
	if err := unix.Mount(parent, parent, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("", parent, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	err := s.CheckWritable()
	if failure.KindOf(err) != failure.Prereq || !strings.Contains(err.Error(), "read-only filesystem") || strings.Contains(err.Error(), "sandbox") {
		t.Fatalf("a store on a read-only filesystem: %v (%v)", err, failure.KindOf(err))
	}
	if hint := failure.HintOf(err); !strings.Contains(hint, "FERRY_HOME") {
		t.Errorf("hint %q names no setting", hint)
	}
	// Sealed as a sandbox seals it: the keys covered by a mount of their own.
	if err := unix.Mount("tmpfs", KeysDir(parent), "tmpfs", unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	err = s.CheckWritable()
	if failure.KindOf(err) != failure.Refused || !strings.Contains(err.Error(), "sandbox") {
		t.Fatalf("a sealed store: %v (%v)", err, failure.KindOf(err))
	}
}
