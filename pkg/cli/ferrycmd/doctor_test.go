package ferrycmd

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/doctor"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

// TestMain serves the sandbox's child, which `ferry doctor` starts to try
// the sandbox (the overlay probe's child is served by package platform).
func TestMain(m *testing.M) {
	sandbox.Init()
	os.Exit(m.Run())
}

// front runs the ferry command in-process.
func front(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(args, cli.IO{Stdout: &out, Stderr: &errOut})
	return out.String(), errOut.String(), code
}

// tempRepo makes a git repository whose one commit holds an empty
// workspace's Cargo.toml, enters it, and points Ferry's
// store at a fresh parent, with no backend or sandbox mode from outside.
func tempRepo(t *testing.T) (repo, storeParent string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	repo = t.TempDir()
	if err := os.WriteFile(filepath.Join(repo, "Cargo.toml"), []byte("[workspace]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "Cargo.toml"}, {"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "workspace"}} {
		c := exec.Command("git", args...)
		c.Dir = repo
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	repo, _ = filepath.EvalSymlinks(repo)
	storeParent = filepath.Join(t.TempDir(), "ferry")
	t.Setenv("FERRY_HOME", storeParent)
	t.Setenv("FERRY_BACKEND", "")
	t.Setenv("FERRY_SANDBOX", "")
	t.Chdir(repo)
	return repo, storeParent
}

func skipIfBlocked(t *testing.T) {
	t.Helper()
	if b := platform.Real().UsernsBlocker(); b != nil {
		t.Skipf("this host blocks user namespaces: %v", b)
	}
}

func TestDoctorInRepository(t *testing.T) {
	skipIfBlocked(t)
	repo, parent := tempRepo(t)
	out, errOut, code := front(t, "doctor", "--json")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var r struct {
		Repository string `json:"repository"`
		Store      string `json:"store"`
		Checks     []struct {
			Name, Status string
		} `json:"checks"`
		Spawn struct {
			Works     bool   `json:"works"`
			Backend   string `json:"backend"`
			Isolation string `json:"isolation"`
		} `json:"spawn"`
		ExitCode int `json:"exit_code"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.Repository != repo || !strings.HasPrefix(r.Store, parent+string(filepath.Separator)) {
		t.Errorf("repository %q, store %q; want %q and a store under %q", r.Repository, r.Store, repo, parent)
	}
	status := map[string]string{}
	for _, c := range r.Checks {
		status[c.Name] = c.Status
	}
	if status["userns"] != "ok" || status["overlay"] != "ok" || status["filesystem"] != "ok" || status["reflink"] == "" {
		t.Errorf("checks %v", status)
	}
	// auto: reflink where the store clones, else overlay (which works here).
	wantBackend := "overlay"
	if status["reflink"] == "ok" {
		wantBackend = "reflink"
	}
	if !r.Spawn.Works || r.Spawn.Backend != wantBackend || r.Spawn.Isolation != "namespace sandbox" || r.ExitCode != 0 {
		t.Errorf("spawn %+v, exit %d", r.Spawn, r.ExitCode)
	}
	if errOut != "" {
		t.Errorf("stderr: %s", errOut)
	}
	if _, err := os.Stat(parent); !os.IsNotExist(err) {
		t.Errorf("doctor created the store parent %s", parent)
	}

	out, _, code = front(t, "doctor")
	for _, want := range []string{"repository  " + repo, "CHECK", "userns", "overlay", "reflink", "spawn here:", "backend    " + wantBackend, "spawn can work here."} {
		if !strings.Contains(out, want) {
			t.Errorf("human output lacks %q:\n%s", want, out)
		}
	}
	if code != 0 {
		t.Errorf("exit %d", code)
	}
	t.Logf("ferry doctor:\n%s", out)
}

func TestDoctorRefusals(t *testing.T) {
	skipIfBlocked(t)
	tempRepo(t)
	t.Setenv("FERRY_SANDBOX", "off")
	out, _, code := front(t, "doctor")
	if code != 0 || !strings.Contains(out, "isolation  host paths") || !strings.Contains(out, "incremental") || strings.Contains(out, "backend    overlay") {
		t.Errorf("sandbox off: exit %d\n%s", code, out)
	}
	// The overlay exists only in a namespace: refused without one.
	t.Setenv("FERRY_BACKEND", "overlay")
	out, _, code = front(t, "doctor")
	if code != 6 || !strings.Contains(out, "needs the namespace sandbox") || !strings.Contains(out, "spawn would fail here (exit 6)") {
		t.Errorf("sandbox off, backend overlay: exit %d\n%s", code, out)
	}
	t.Setenv("FERRY_BACKEND", "")

	t.Setenv("FERRY_SANDBOX", "")
	if err := os.WriteFile("ferry.toml", []byte("[base]\nwram = []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code = front(t, "doctor", "--json")
	if code != 2 || !strings.Contains(out, `"name": "config"`) || !strings.Contains(out, "wram") {
		t.Errorf("broken ferry.toml: exit %d\n%s", code, out)
	}
}

func TestDoctorOutsideRepository(t *testing.T) {
	skipIfBlocked(t)
	t.Chdir(t.TempDir())
	out, _, code := front(t, "doctor")
	if code != 0 || !strings.Contains(out, "not inside a git repository") || !strings.Contains(out, "host checks only") ||
		strings.Contains(out, "spawn here:") {
		t.Errorf("exit %d\n%s", code, out)
	}
}

func TestDoctorAppArmorProfile(t *testing.T) {
	out, _, code := front(t, "doctor", "--apparmor-profile", "--json")
	var p struct{ Path, Profile string }
	if err := json.Unmarshal([]byte(out), &p); err != nil || code != 0 {
		t.Fatalf("exit %d, %v\n%s", code, err, out)
	}
	exe, _ := os.Executable()
	exe, _ = filepath.EvalSymlinks(exe)
	if !strings.HasPrefix(p.Path, "/etc/apparmor.d/ferry") || !strings.Contains(p.Profile, "\n  userns,\n") ||
		!strings.Contains(p.Profile, exe) || !strings.Contains(out, "abi <abi/4.0>") {
		t.Errorf("profile at %q for %s:\n%s", p.Path, exe, p.Profile)
	}
	text, _, _ := front(t, "doctor", "--apparmor-profile")
	if text != p.Profile {
		t.Errorf("text %q, JSON profile %q", text, p.Profile)
	}
}

func TestSetupAppArmor(t *testing.T) {
	out, errOut, code := front(t, "setup", "apparmor", "--json")
	var s struct {
		Facts struct {
			Profile string `json:"profile"`
			Path    string `json:"path"`
		} `json:"facts"`
		Decision struct {
			Action string `json:"action"`
			Reason string `json:"reason"`
			Script string `json:"script"`
		} `json:"decision"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil || code != 0 {
		t.Fatalf("exit %d, %v\n%s%s", code, err, out, errOut)
	}
	switch s.Decision.Action {
	case "nothing", "install-profile", "amend-profile":
	default:
		t.Errorf("action %q", s.Decision.Action)
	}
	if s.Decision.Reason == "" || !strings.HasPrefix(s.Facts.Path, "/etc/apparmor.d/") {
		t.Errorf("setup %+v", s)
	}
	script, _, code := front(t, "setup", "apparmor", "--script")
	if code != 0 || script != s.Decision.Script {
		t.Errorf("--script: exit %d, %q; want %q", code, script, s.Decision.Script)
	}
	human, _, _ := front(t, "setup", "apparmor")
	if !strings.Contains(human, "decision: "+s.Decision.Action) || !strings.Contains(human, "kernel.apparmor_restrict_unprivileged_userns") {
		t.Errorf("human output:\n%s", human)
	}
	if _, errOut, code := front(t, "setup"); code != 2 || !strings.Contains(errOut, "apparmor") {
		t.Errorf("ferry setup without a topic: exit %d\n%s", code, errOut)
	}
}

// TestDoctorTextBlocked renders the report of a host whose AppArmor
// restricts user namespaces (a prepared /proc/sys): the table, the failure
// with its exit code, and each remedy once.
func TestDoctorTextBlocked(t *testing.T) {
	proc := filepath.Join(t.TempDir(), "proc")
	os.MkdirAll(filepath.Join(proc, "sys", "kernel"), 0o755)
	os.WriteFile(filepath.Join(proc, "sys", "kernel", "apparmor_restrict_unprivileged_userns"), []byte("1\n"), 0o644)
	os.WriteFile(filepath.Join(proc, "sys", "kernel", "osrelease"), []byte("6.8.0-45-generic\n"), 0o644)
	h := platform.Host{ProcSys: filepath.Join(proc, "sys"), Uid: 1000, Exe: "/usr/local/bin/ferry"}
	parent := t.TempDir()
	r := doctor.Run(doctor.Options{Host: h, Repo: "/src/p",
		Settings: &config.Settings{Backend: "auto", SandboxMode: "on", StoreParent: parent},
		Store:    must(store.Open(parent, "/src/p/.git", "/src/p"))})
	var b bytes.Buffer
	printDoctor(&b, r)
	out := b.String()
	for _, want := range []string{
		"host        Linux 6.8.0-45-generic, uid 1000",
		"userns       blocked  blocked by kernel.apparmor_restrict_unprivileged_userns = 1",
		"isolation  refused: the namespace sandbox is unavailable",
		"spawn would fail here (exit 4)",
		"overlay (warning):\n  blocked by the same setting as userns, above.",
		"profile ferry /usr/local/bin/ferry{,-*} flags=(unconfined)",
		"ferry setup apparmor",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if n := strings.Count(out, "sudo apparmor_parser -r"); n != 1 {
		t.Errorf("the remedy is shown %d times", n)
	}
	if r.ExitCode != 4 {
		t.Errorf("exit %d", r.ExitCode)
	}

	// Under mode auto the same host gets host paths: a warning naming the
	// blocker, with its remedy, and what host paths cost.
	r = doctor.Run(doctor.Options{Host: h, Repo: "/src/p",
		Settings: &config.Settings{Backend: "auto", SandboxMode: "auto", StoreParent: parent},
		Store:    must(store.Open(parent, "/src/p/.git", "/src/p"))})
	b.Reset()
	printDoctor(&b, r)
	out = b.String()
	for _, want := range []string{
		"userns       warning  blocked by kernel.apparmor_restrict_unprivileged_userns = 1",
		"isolation  host paths: sandbox mode auto and user namespaces are blocked by kernel.apparmor_restrict_unprivileged_userns = 1",
		"incremental",
		"profile ferry /usr/local/bin/ferry{,-*} flags=(unconfined)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("mode auto: output lacks %q:\n%s", want, out)
		}
	}
	if r.ExitCode != 0 {
		t.Errorf("mode auto: exit %d", r.ExitCode)
	}
	if t.Failed() {
		t.Log("\n" + out)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
