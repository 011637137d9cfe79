package base_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/cli/basecmd"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

// The test binary doubles as ferry-base when asked, so tests can run real
// concurrent processes and kill them.
func TestMain(m *testing.M) {
	sandbox.Init()
	if os.Getenv("FERRY_TEST_RUN_AS") == "ferry-base" {
		os.Exit(basecmd.Main("ferry-base", os.Args[1:], cli.StdIO()))
	}
	os.Exit(m.Run())
}

type env struct {
	repo  *fixture.Repo
	home  string // store parent
	vars  testenv.Env
	store *store.Store
	g     *git.Repo
}

func setup(t *testing.T, warm ...string) *env {
	t.Helper()
	return setupOf(t, fixture.Options{}, warm...)
}

// setupLight is setup with a repository that leaves out the registry crates
// (fixture.Options.NoRegistry): most of a cold build's work, for tests
// whose subject does not depend on where crates come from.
func setupLight(t *testing.T, warm ...string) *env {
	t.Helper()
	return setupOf(t, fixture.Options{NoRegistry: true}, warm...)
}

func setupOf(t *testing.T, opts fixture.Options, warm ...string) *env {
	t.Helper()
	e := &env{repo: testenv.Repo(t, opts), home: filepath.Join(t.TempDir(), "ferry-home")}
	if len(warm) > 0 {
		e.setWarm(t, warm...)
	}
	e.vars = testenv.NewEnv(t.TempDir(), e.repo.Dir)
	e.vars.Set("FERRY_HOME", e.home)
	var err error
	if e.g, err = git.Open(e.repo.Dir); err != nil {
		t.Fatal(err)
	}
	common, _ := e.g.CommonDir()
	if e.store, err = store.Open(e.home, common, e.g.Top); err != nil {
		t.Fatal(err)
	}
	return e
}

// setWarm writes an (untracked) ferry.toml choosing the warm commands.
func (e *env) setWarm(t *testing.T, warm ...string) {
	t.Helper()
	q := make([]string, len(warm))
	for i, w := range warm {
		q[i] = fmt.Sprintf("%q", w)
	}
	if err := os.WriteFile(filepath.Join(e.repo.Dir, "ferry.toml"), []byte("[base]\nwarm = ["+strings.Join(q, ", ")+"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *env) build(t *testing.T, rev string) (*base.Result, error) {
	t.Helper()
	settings, err := config.Load(e.repo.Dir, e.vars)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	res, err := base.Build(context.Background(), base.Options{
		Repo: e.g, Settings: settings, Store: e.store, Rev: rev, Progress: &log, Prog: "ferry-test",
	})
	if err != nil {
		t.Logf("build log:\n%s", log.String())
	}
	// Progress lines name the program that builds, whichever it is.
	if strings.Contains(log.String(), base.DefaultProg+":") || !strings.Contains(log.String(), "ferry-test: ") {
		t.Errorf("progress lines not named after the building program (ferry-test):\n%s", log.String())
	}
	return res, err
}

// command runs the test binary as ferry-base in the fixture repository.
func (e *env) command(args ...string) *exec.Cmd {
	c := exec.Command(os.Args[0], args...)
	c.Dir = e.repo.Dir
	c.Env = append(os.Environ(), "FERRY_TEST_RUN_AS=ferry-base", "FERRY_HOME="+e.home)
	return c
}

// digest summarizes a tree: every path, type, mode, size, mtime and content
// hash, so any write to it changes the digest.
func digest(t *testing.T, root string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fmt.Fprintf(h, "%s %v %d %d\n", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(b)
			h.Write(s[:])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// registered lists the worktrees registered besides the repository's own
// and the store's spare checkout (spare_test.go checks that one).
func (e *env) registered(t *testing.T) []string {
	t.Helper()
	wts, err := e.g.Worktrees()
	if err != nil {
		t.Fatal(err)
	}
	spare := resolved(e.store.Spare().Src)
	var out []string
	for _, w := range wts {
		if w.Path != e.g.Top && resolved(w.Path) != spare {
			out = append(out, w.Path)
		}
	}
	return out
}

// resolved is p with its symlinks resolved, as git records worktree paths.
func resolved(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

// The full default build: a base at canonical paths, reused without building,
// and never written to again.
func TestBaseAtCanonicalPathsAndReused(t *testing.T) {
	e := setup(t)
	res, err := e.build(t, "")
	if err != nil {
		t.Fatal(err)
	}
	r := res.Record
	if res.Reused || r.Commit != e.repo.Head {
		t.Fatalf("reused=%v commit=%s, want a new build of %s", res.Reused, r.Commit, e.repo.Head)
	}
	if cur, _ := e.store.Current(); cur != r.ID {
		t.Fatalf("current = %q, want %q", cur, r.ID)
	}
	if want := config.DefaultWarm(true, true, false); len(r.Warm) != len(want) {
		t.Fatalf("warm = %+v, want the generated commands %q", r.Warm, want)
	}
	for i, w := range r.Warm {
		// The builds decide; the check and clippy commands only warn.
		if lint := i >= 3; w.Generated != lint || w.Why != "default" {
			t.Errorf("warm command %d %q: generated %t, why %q; want generated %t, why default", i, w.Command, w.Generated, w.Why, lint)
		}
	}
	// The generated commands build progressively: the first command's
	// base, cold and stamped, then this one seeded from it.
	cold := res.First
	if cold == nil || r.Seed != cold.ID {
		t.Fatalf("first base %v, seed %q: the generated commands did not build progressively", cold, r.Seed)
	}
	if cold.Stamped.Files == 0 || cold.Stamped.Dirs == 0 {
		t.Fatalf("nothing stamped: %+v", cold.Stamped)
	}

	// The binary reports the canonical path as its manifest dir.
	out, err := exec.Command(filepath.Join(r.Target, "debug", fixture.BinName), fixture.ManifestDirFlag).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(e.store.MntSrc(), fixture.CrateDir(fixture.ManifestCrate))
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("manifest dir = %q, want the canonical %q", got, want)
	}
	// Tracked files of a cold build carry the stamp time.
	fi, err := os.Lstat(filepath.Join(cold.Src, fixture.SymlinkPath))
	if err != nil || !fi.ModTime().Equal(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("symlink mtime %v (%v), want the stamp time", fi.ModTime(), err)
	}
	// No warnings: the fixture's build scripts write only into OUT_DIR.
	if len(r.Warnings) != 0 {
		t.Fatalf("warnings: %v", r.Warnings)
	}
	// The last warm command is clippy, yet the rustc-info cache is the
	// one a plain build uses: agents' first builds keep it.
	checkRustcInfoServesBuilds(t, r.Target)

	before := digest(t, r.Dir)
	res2, err := e.build(t, "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	if !res2.Reused || res2.Record.ID != r.ID {
		t.Fatalf("second build: reused=%v id=%s, want reuse of %s", res2.Reused, res2.Record.ID, r.ID)
	}
	// ferry-base list shows it, as a process would.
	var list []base.Entry
	c := e.command("list", "--json")
	outb, err := c.Output()
	if err != nil {
		t.Fatal(err)
	}
	// Both bases, the full one current (newest first).
	if err := json.Unmarshal(outb, &list); err != nil || len(list) != 2 || list[0].ID != r.ID || !list[0].Current || list[0].State != "ready" || list[1].ID != cold.ID {
		t.Fatalf("list = %s (%v)", outb, err)
	}
	if after := digest(t, r.Dir); after != before {
		t.Fatal("a ready base was written to by a reuse and a list")
	}
}

// Two concurrent ferry-base runs at one commit build once and report one base.
func TestConcurrentBuildsBuildOnce(t *testing.T) {
	e := setup(t, "cargo build -p "+fixture.ChainC)
	type result struct {
		ID     string `json:"id"`
		Reused bool   `json:"reused"`
	}
	var wg sync.WaitGroup
	results := make([]result, 2)
	errs := make([]error, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var stderr bytes.Buffer
			c := e.command("--json")
			c.Stderr = &stderr
			out, err := c.Output()
			if err != nil {
				errs[i] = fmt.Errorf("%v\n%s", err, stderr.String())
				return
			}
			errs[i] = json.Unmarshal(out, &results[i])
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if results[0].ID != results[1].ID || results[0].ID == "" {
		t.Fatalf("two runs report different bases: %+v", results)
	}
	if results[0].Reused == results[1].Reused {
		t.Fatalf("want exactly one build and one reuse, got %+v", results)
	}
	if n := len(e.registered(t)); n != 1 {
		t.Fatalf("%d base worktrees registered, want 1", n)
	}
}

// A failing warm command leaves no ready base, no directory, no lock file,
// no registered worktree, and the previous current base in place.
func TestFailedWarmLeavesNothing(t *testing.T) {
	e := setup(t, "cargo build -p "+fixture.ChainC)
	first, err := e.build(t, "")
	if err != nil {
		t.Fatal(err)
	}
	wtBefore := e.registered(t)

	e.setWarm(t, "cargo build -p "+fixture.ChainC, "echo failing >&2; exit 3")
	_, err = e.build(t, "")
	if failure.KindOf(err) != failure.BuildFailed || failure.KindOf(err).ExitCode() != 5 {
		t.Fatalf("err = %v, want a build failure", err)
	}
	if cur, _ := e.store.Current(); cur != first.Record.ID {
		t.Fatalf("current = %q, want the previous %q", cur, first.Record.ID)
	}
	ents, _ := os.ReadDir(e.store.BasesDir())
	for _, d := range ents {
		if d.IsDir() && d.Name() != first.Record.ID {
			t.Fatalf("failed base left directory %s", d.Name())
		}
		if !d.IsDir() && d.Name() != filepath.Base(e.store.BaseLock(first.Record.ID)) {
			t.Fatalf("failed base left %s in bases/", d.Name())
		}
	}
	if got := e.registered(t); len(got) != len(wtBefore) {
		t.Fatalf("registered worktrees %v, want %v", got, wtBefore)
	}
}

// A generated clippy command only warns; a configured failing one fails.
func TestClippyFailureOnlyWarnsWhenGenerated(t *testing.T) {
	e := setupLight(t)
	// Make clippy fail (deny a lint the fixture trips) while the build passes:
	// CLIPPY_CONF is not needed; an env RUSTFLAGS change would alter the build,
	// so use a clippy-only lint level through the command's own flag.
	settings, err := config.Load(e.repo.Dir, e.vars)
	if err != nil {
		t.Fatal(err)
	}
	if !settings.WarmIsDefault {
		t.Fatal("fixture has a ferry.toml")
	}
	// A PATH entry whose cargo fails for clippy alone.
	bin := t.TempDir()
	real, err := exec.LookPath("cargo")
	if err != nil {
		t.Skip("cargo not on PATH")
	}
	script := "#!/bin/sh\nif [ \"$1\" = clippy ] && [ \"$2\" != --version ]; then echo clippy says no >&2; exit 101; fi\nexec " + real + " \"$@\"\n"
	os.WriteFile(filepath.Join(bin, "cargo"), []byte(script), 0o755)
	var log bytes.Buffer
	env := append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	res, err := base.Build(context.Background(), base.Options{
		Repo: e.g, Settings: settings, Store: e.store, Progress: &log, Env: env,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	r := res.Record
	var clippy []base.WarmCommand
	for _, w := range r.Warm {
		if strings.HasPrefix(w.Command, "cargo clippy") {
			clippy = append(clippy, w)
		}
	}
	if len(clippy) != 2 || len(r.Warnings) != 2 {
		t.Fatalf("want both generated clippy commands, each failure warned: %+v", r)
	}
	for _, w := range clippy {
		if w.ExitCode != 101 || !slices.Contains(r.Incomplete, w.Command) {
			t.Errorf("want the failure of %q (exit %d) recorded as incomplete: %q", w.Command, w.ExitCode, r.Incomplete)
		}
	}
}

// A kill -9 during the warm build leaves no ready base and no process behind,
// and the next run rebuilds cleanly.
func TestKilledBuildIsRebuilt(t *testing.T) {
	e := setupLight(t, "cargo build --workspace")
	c := e.command("--json")
	var stderr testenv.Buffer
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitCompiling(t, c, &stderr)
	time.Sleep(300 * time.Millisecond)
	c.Process.Kill()
	c.Wait()

	// Nothing keeps building into the abandoned directory.
	deadline := time.Now().Add(10 * time.Second)
	for len(processesUsing(e.store.Dir)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("processes outlived the killed builder: %v", processesUsing(e.store.Dir))
		}
		time.Sleep(50 * time.Millisecond)
	}
	list, err := base.List(e.store)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].State != "partial" || list[0].Current {
		t.Fatalf("after kill -9: %+v, want one partial base that is not current", list)
	}
	if cur, _ := e.store.Current(); cur != "" {
		t.Fatalf("current = %q after a killed first build", cur)
	}

	res, err := e.build(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Reused {
		t.Fatal("a partial base was reused")
	}
	if n := len(e.registered(t)); n != 1 {
		t.Fatalf("%d base worktrees registered after the rebuild, want 1", n)
	}
	out, err := exec.Command(filepath.Join(res.Record.Target, "debug", fixture.BinName)).Output()
	if err != nil || !strings.HasPrefix(string(out), fixture.MarkerPrefix) {
		t.Fatalf("rebuilt binary printed %q (%v)", out, err)
	}
}

// waitCompiling waits until the running build c has said "Compiling" on
// stderr, and kills it and fails t when it does not within two minutes.
func waitCompiling(t *testing.T, c *exec.Cmd, stderr *testenv.Buffer) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(stderr.String(), "Compiling") {
		if time.Now().After(deadline) {
			c.Process.Kill()
			t.Fatalf("the build never started compiling:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processesUsing lists processes whose command line mentions dir.
func processesUsing(dir string) []string {
	var found []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(dir)) {
			found = append(found, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

var _ = errors.Is

// checkRustcInfoServesBuilds fails unless the rustc-info cache Cargo left in
// target is keyed for a plain cargo build (no rustc wrapper): a build of a
// small package given a copy of it must reuse it, not discard it for
// another compiler (see warm.go).
func checkRustcInfoServesBuilds(t *testing.T, target string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(target, ".rustc_info.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"Cargo.toml":              "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
		"src/lib.rs":              "",
		"target/.rustc_info.json": string(b),
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := exec.Command("cargo", "build", "--offline")
	c.Dir = dir
	c.Env = append(os.Environ(), "CARGO_TARGET_DIR="+filepath.Join(dir, "target"), "CARGO_LOG=cargo::util::rustc=debug")
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("cargo build: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "reusing existing rustc info cache") || strings.Contains(string(out), "different compiler") {
		t.Fatalf("the base's rustc-info cache is not a plain build's:\n%s", out)
	}
}

// A repository that ignores its lockfile (Cargo.lock in .gitignore, as
// library workspaces do): the lockfile Cargo writes into the base's
// checkout is Cargo resolving the workspace, not a build script writing
// into the sources, and is not warned about.
func TestIgnoredLockfileIsNoWarning(t *testing.T) {
	e := setup(t, "cargo build -p "+fixture.ChainC)
	if _, err := e.repo.Git("rm", "-q", "--cached", fixture.Lockfile); err != nil {
		t.Fatal(err)
	}
	if err := e.repo.Append(".gitignore", "/"+fixture.Lockfile+"\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.repo.Commit("ignore the lockfile"); err != nil {
		t.Fatal(err)
	}
	res, err := e.build(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(res.Record.Src, fixture.Lockfile)); err != nil {
		t.Fatalf("cargo wrote no lockfile into the base's checkout: %v", err)
	}
	for _, w := range res.Record.Warnings {
		if strings.Contains(w, fixture.Lockfile) {
			t.Errorf("warning about the ignored lockfile: %s", w)
		}
	}
}
