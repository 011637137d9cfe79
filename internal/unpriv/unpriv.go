// Package unpriv re-runs a test binary as an unprivileged user, so tests of
// the namespace sandbox exercise what ordinary users get and not only what
// root gets. CI runs as root; script/bootstrap, which `make test` runs
// first, creates the user.
package unpriv

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/knobs"
)

// DefaultUser is the account script/bootstrap creates for these tests.
const DefaultUser = knobs.DefaultTestUser

// envMarker is set in the re-run so it does not re-run itself.
const envMarker = knobs.UnprivChild

// IsChild reports whether this test process is the unprivileged re-run.
func IsChild() bool { return os.Getenv(envMarker) == "1" }

// Rerun runs the current test binary's tests matching pattern as the
// unprivileged user (FERRY_TEST_USER, default ferrytest) and fails t if they
// fail. It skips, saying why, when the caller is not root or the user does
// not exist.
func Rerun(t *testing.T, pattern string) {
	t.Helper()
	if IsChild() {
		t.Skip("already running unprivileged")
	}
	if os.Getuid() != 0 {
		t.Skip("running unprivileged already: the other tests cover it")
	}
	name := knobs.User()
	u, err := user.Lookup(name)
	if err != nil {
		t.Skipf("no unprivileged user %q to re-run as (script/bootstrap creates it when run as root): %v", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)

	// The test binary lives in a root-only build dir; copy it somewhere the
	// user can execute it.
	dir, err := os.MkdirTemp("", "ferry-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, filepath.Base(os.Args[0]))
	if err := copyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	os.Mkdir(home, 0o755)
	os.Chown(home, uid, gid)

	var out bytes.Buffer
	cmd := exec.Command(bin, "-test.run", pattern, "-test.v", "-test.count=1")
	cmd.Dir = home
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.Env = []string{
		envMarker + "=1",
		knobs.TestXFS + "=" + knobs.XFS(),
		// Not fixture.RequireEnv: this PATH may not reach root's cargo
		// (rustup installs it under root's home), and a test skipping for
		// that is reported below as a skip of the re-run.
		fixture.RegistryEnv + "=" + os.Getenv(fixture.RegistryEnv),
		"HOME=" + home,
		"TMPDIR=" + home,
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"USER=" + name,
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	err = cmd.Run()
	t.Logf("as %s (uid %d):\n%s", name, uid, out.String())
	if err != nil {
		t.Fatalf("tests failed as unprivileged user %s: %v", name, err)
	}
	if !bytes.Contains(out.Bytes(), []byte("--- PASS")) {
		t.Fatalf("no test passed as unprivileged user %s (pattern %q)", name, pattern)
	}
	// A test the re-run skipped becomes a skipped subtest here, so that it
	// is reported where every other skip is (make test's summary), not only
	// inside this test's log.
	for _, s := range skips(out.String()) {
		t.Run(s.test, func(t *testing.T) { t.Skipf("as %s: %s", name, s.reason) })
	}
}

type skipped struct{ test, reason string }

// skips finds the skipped tests in the output of a test binary run with
// -test.v, with what each printed (its reason). Verbose output streams a
// test's log lines right after its "=== RUN" (or "=== NAME", "=== CONT")
// line; its "--- SKIP" line may come later, after other tests' lines.
func skips(out string) []skipped {
	logs := map[string][]string{}
	var found []skipped
	current := ""
	for _, line := range strings.Split(out, "\n") {
		trimmed := strings.TrimSpace(line)
		switch f := strings.Fields(trimmed); {
		case len(f) >= 3 && f[0] == "===":
			current = f[2]
		case len(f) >= 3 && f[0] == "---" && f[1] == "SKIP:":
			found = append(found, skipped{f[2], strings.Join(logs[f[2]], "\n")})
		case strings.HasPrefix(trimmed, "--- ") || trimmed == "PASS" || trimmed == "FAIL":
			current = ""
		case current != "" && trimmed != "":
			logs[current] = append(logs[current], trimmed)
		}
	}
	return found
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
