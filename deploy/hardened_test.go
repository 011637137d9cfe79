package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/internal/nouserns"
	"github.com/ferrydev/ferry/internal/testenv"
)

const hardenedUnit = "system/ferry-up@.service"

// TestHardenedUnitSettings checks the hardened system unit's promises
// without systemd: a non-root user, a read-only system with exactly the
// store, the worktrees and the repository's git directory writable, a
// private /tmp, no capabilities and no privilege gain, and none of the
// settings that break the namespace sandbox.
func TestHardenedUnitSettings(t *testing.T) {
	lines := unitLines(t, hardenedUnit)
	for _, want := range []string{
		"ProtectSystem=strict", "ProtectHome=read-only", "PrivateTmp=yes", "NoNewPrivileges=yes",
		"CapabilityBoundingSet=", "AmbientCapabilities=", "RestrictSUIDSGID=yes",
		"ReadWritePaths=/var/lib/ferry/store /var/lib/ferry/worktrees %f/.git",
		"Environment=FERRY_HOME=/var/lib/ferry/store", "Environment=FERRY_WORKTREES=/var/lib/ferry/worktrees",
		"KillMode=mixed", "ExecStart=/usr/local/bin/ferry up",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("%s: no %s", hardenedUnit, want)
		}
	}
	for _, l := range lines {
		key, v, _ := strings.Cut(l, "=")
		switch key {
		case "RestrictNamespaces", "SystemCallFilter", "PrivateUsers", "MemoryDenyWriteExecute",
			"SystemCallArchitectures", "LockPersonality", "ReadWritePaths", "CapabilityBoundingSet":
			if key == "ReadWritePaths" && strings.Count(l, "ReadWritePaths=") == 1 || key == "CapabilityBoundingSet" && v == "" {
				continue
			}
			t.Errorf("%s: %s breaks Ferry's sandbox or widens what the unit promises", hardenedUnit, l)
		case "User":
			if v == "" || v == "root" || v == "0" {
				t.Errorf("%s: User=%s: uid 0 without CAP_SETFCAP cannot map itself into a user namespace", hardenedUnit, v)
			}
		}
	}
}

var exposure = regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`)

// securityScore runs systemd-analyze security --offline on a copy of a unit
// named as an instance, and returns its overall exposure (0 best, 10 worst).
func securityScore(t *testing.T, analyze, file string) float64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("systemd", file))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), strings.Replace(filepath.Base(file), "@.", "@srv-src-repo.", 1))
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command(analyze, "security", "--offline=yes", "--no-pager", p).CombinedOutput()
	m := exposure.FindSubmatch(out)
	if m == nil {
		t.Skipf("skipping: systemd-analyze security --offline=yes gave no score here:\n%s", out)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// TestHardenedUnitSecurity scores the hardened unit with systemd-analyze
// security (offline: no systemd is running here) against the user unit's
// settings run as a system service, and verifies the unit.
func TestHardenedUnitSecurity(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("skipping: systemd-analyze is not installed")
	}
	before := securityScore(t, analyze, "ferry-base@.service")
	after := securityScore(t, analyze, hardenedUnit)
	t.Logf("exposure: %.1f with the user unit's settings, %.1f hardened", before, after)
	if after > 6.0 || after >= before {
		t.Errorf("hardened unit's exposure %.1f: want at most 6.0 and below %.1f", after, before)
	}

	// verify checks that ExecStart= exists: point it at a stand-in.
	dir := t.TempDir()
	bin := filepath.Join(dir, "ferry")
	os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)
	data, _ := os.ReadFile(filepath.Join("systemd", hardenedUnit))
	unit := filepath.Join(dir, "ferry-up@srv-src-repo.service")
	os.WriteFile(unit, []byte(strings.ReplaceAll(string(data), "/usr/local/bin/ferry", bin)), 0o644)
	out, _ := exec.Command(analyze, "verify", "--no-pager", unit).CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "ferry-up@") {
			t.Errorf("systemd-analyze verify: %s", l)
		}
	}
}

// unprivileged returns the test user's uid, skipping unless this test runs
// as root and the user exists.
func unprivileged(t *testing.T) int {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("skipping: needs root to drop to the test user and set up mounts")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("skipping: no setpriv (util-linux)")
	}
	u, err := user.Lookup(knobs.User())
	if err != nil {
		t.Skipf("skipping: no unprivileged user %q (script/bootstrap creates it)", knobs.User())
	}
	uid, _ := strconv.Atoi(u.Uid)
	return uid
}

// dropped is the setpriv invocation that gives what the hardened unit gives
// its processes: the user, no_new_privs, an empty bounding set, no
// inheritable or ambient capabilities.
func dropped(uid int) []string {
	id := strconv.Itoa(uid)
	return []string{"setpriv", "--reuid=" + id, "--regid=" + id, "--clear-groups",
		"--no-new-privs", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all"}
}

// TestUserNamespaceUnderNoNewPrivs checks the claim the hardened unit rests
// on: with no_new_privs and an empty capability bounding set, an
// unprivileged user still creates a user namespace with mount and PID
// namespaces and mounts in it. And the reason the unit is not root's: uid 0
// with an empty bounding set may not map itself.
func TestUserNamespaceUnderNoNewPrivs(t *testing.T) {
	uid := unprivileged(t)
	script := `grep -E '^(NoNewPrivs|CapBnd|CapEff)' /proc/self/status
exec unshare --user --map-root-user --mount --pid --fork sh -c 'mount -t tmpfs ferry /mnt && echo mounted'`
	args := append(dropped(uid), "sh", "-c", script)
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	t.Logf("as uid %d:\n%s", uid, out)
	for _, want := range []string{"NoNewPrivs:\t1", "CapBnd:\t0000000000000000", "CapEff:\t0000000000000000", "mounted"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q (err %v)", want, err)
		}
	}
	root := append(dropped(0), "unshare", "--user", "--map-root-user", "true")
	out, err = exec.Command(root[0], root[1:]...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "uid_map") {
		t.Errorf("uid 0 with an empty bounding set mapped itself (err %v): %s; the unit's comment about User= is wrong here", err, out)
	}
}

// hardenScript reproduces the hardened unit's file system and privileges,
// since systemd is not PID 1 here: in a private mount namespace it keeps
// $ROOT across a fresh /tmp (PrivateTmp=), binds the binaries and the
// toolchain read-only, makes every mount read-only but /dev, /proc, /sys,
// /tmp and the writable paths (ProtectSystem=strict, ReadWritePaths=), and
// execs the command with the privileges dropped.
const hardenScript = `set -e
mount --bind "$BIN" "$ROOT/bin"
mount --bind "$TC_CARGO" "$ROOT/cargo"
mount --bind "$TC_RUSTUP" "$ROOT/rustup"
mount --rbind "$ROOT" /mnt
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=1777 tmpfs /var/tmp
mkdir -p "$ROOT"
mount --move /mnt "$ROOT"
for p in $RW; do mount --bind "$p" "$p"; done
awk '{print $5}' /proc/self/mountinfo | sort -u | while read m; do
	case "$m" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*|/tmp|/var/tmp) continue;; esac
	case " $RW " in *" $m "*) continue;; esac
	mount -o remount,bind,ro "$m"
done
exec "$@"
`

// TestHardenedBuildAndAgent builds a base, spawns an agent and builds in it
// under the hardened unit's restrictions (hardenScript) as the unprivileged
// test user: the namespace sandbox still works, the agent's build is warm,
// and nothing outside the writable paths can be written.
func TestHardenedBuildAndAgent(t *testing.T) {
	hardenedBuildAndAgent(t, false)
}

// TestContainerBuildAndAgent does the same as the runner pod of
// kubernetes/runner-job.yaml: a read-only root file system with writable
// store, worktrees and checkout, not root, no capabilities, no_new_privs,
// and a seccomp filter refusing user namespaces as RuntimeDefault does, so
// Ferry runs in the no-namespace mode the manifest chooses
// (FERRY_SANDBOX=off).
func TestContainerBuildAndAgent(t *testing.T) {
	hardenedBuildAndAgent(t, true)
}

// noUsernsMarker makes TestMain run its arguments under nouserns's filter.
const noUsernsMarker = "DEPLOY_TEST_NOUSERNS"

func TestMain(m *testing.M) {
	if os.Getenv(noUsernsMarker) == "true" {
		os.Unsetenv(noUsernsMarker)
		if err := nouserns.Exec(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

func hardenedBuildAndAgent(t *testing.T, container bool) {
	sandbox := "on"
	if container {
		sandbox = "off"
	}
	uid := unprivileged(t)
	cargo, err := exec.LookPath("cargo")
	if err != nil {
		t.Skip("skipping: no cargo")
	}
	rustup := os.Getenv("RUSTUP_HOME")
	if rustup == "" {
		home, _ := os.UserHomeDir()
		rustup = filepath.Join(home, ".rustup")
	}
	if _, err := os.Stat(filepath.Join(rustup, "toolchains")); err != nil {
		t.Skipf("skipping: cargo is not a rustup install with its home at %s", rustup)
	}
	bin := testenv.Binaries(t)

	root, err := os.MkdirTemp("", "ferry-hardened-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	os.Chmod(root, 0o755)
	repo, err := fixture.Generate(filepath.Join(root, "repo"), fixture.Options{NoRegistry: true})
	if err != nil {
		t.Skipf("skipping: fixture: %v", err)
	}
	for _, d := range []string{"bin", "cargo", "rustup", "store", "worktrees", "home"} {
		os.Mkdir(filepath.Join(root, d), 0o755)
	}
	for _, d := range []string{"repo", "store", "worktrees", "home"} {
		if out, err := exec.Command("chown", "-R", strconv.Itoa(uid)+":"+strconv.Itoa(uid), filepath.Join(root, d)).CombinedOutput(); err != nil {
			t.Fatalf("chown: %v: %s", err, out)
		}
	}
	rw := []string{filepath.Join(root, "store"), filepath.Join(root, "worktrees"), filepath.Join(repo.Dir, ".git")}
	if container {
		rw = []string{filepath.Join(root, "store"), filepath.Join(root, "worktrees"), repo.Dir}
	}
	run := func(script string) (string, error) {
		args := append([]string{"unshare", "--mount", "--propagation", "private", "sh", "-c", hardenScript, "harden"}, dropped(uid)...)
		args = append(args, "sh", "-c", script)
		if container {
			// RuntimeDefault's refusal of user namespaces, by the same
			// kind of seccomp filter.
			args = append([]string{os.Args[0]}, args...)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = repo.Dir
		cmd.Env = []string{
			"FERRY_SANDBOX=" + sandbox,
			noUsernsMarker + "=" + strconv.FormatBool(container),
			"ROOT=" + root, "BIN=" + bin, "TC_CARGO=" + filepath.Dir(filepath.Dir(cargo)), "TC_RUSTUP=" + rustup,
			"RW=" + strings.Join(rw, " "),
			"HOME=" + filepath.Join(root, "home"),
			"FERRY_HOME=" + filepath.Join(root, "store"), "FERRY_WORKTREES=" + filepath.Join(root, "worktrees"),
			"CARGO_HOME=" + filepath.Join(root, "cargo"), "RUSTUP_HOME=" + filepath.Join(root, "rustup"),
			"PATH=" + filepath.Join(root, "bin") + ":" + filepath.Join(root, "cargo", "bin") + ":/usr/bin:/bin",
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := run(`grep -E '^(NoNewPrivs|CapBnd)' /proc/self/status
touch /usr/ferry-probe "$ROOT/ferry-probe" "$ROOT/repo/ferry-probe" 2>&1 || true
ferry base`)
	t.Logf("ferry base, hardened:\n%s", out)
	if err != nil {
		t.Fatalf("ferry base under the hardened unit's restrictions: %v", err)
	}
	for _, want := range []string{"NoNewPrivs:\t1", "CapBnd:\t0000000000000000", "built base"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q", want)
		}
	}
	if n, want := strings.Count(out, "Read-only file system"), 3; n != want && !container || container && n != 2 {
		t.Errorf("%d writes outside the writable paths failed with EROFS, want every one", n)
	}
	if !container && (strings.Contains(out, "user namespaces are blocked") || strings.Contains(out, "without the namespace sandbox")) {
		t.Errorf("the base was built without the namespace sandbox")
	}
	if container {
		// The filter is in force: the namespace sandbox is refused.
		probe, _ := run(`unshare --user true 2>&1 || echo refused`)
		if !strings.Contains(probe, "refused") {
			t.Errorf("a user namespace was created under the RuntimeDefault-like filter: %s", probe)
		}
	}

	out, err = run(`ferry spawn a1 && ferry run a1 -- cargo build 2>&1`)
	t.Logf("agent, hardened:\n%s", out)
	if err != nil {
		t.Fatalf("spawn and build in the agent under the hardened unit's restrictions: %v", err)
	}
	compiled := strings.Count(out, "Compiling ")
	switch {
	case !container && compiled > 0:
		t.Errorf("the agent's first build compiled %d crates: in the namespace sandbox it is fresh from the base", compiled)
	case container:
		// At host paths the agent's workspace members are at other paths
		// than the base's, and Cargo rebuilds them (docs/configuration.md, sandbox mode).
		t.Logf("no-namespace mode: the agent's first build compiled %d crates", compiled)
	}
	if !strings.Contains(out, "Finished") {
		t.Errorf("the agent's build did not finish")
	}
}
