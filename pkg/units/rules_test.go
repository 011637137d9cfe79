package units_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/pkg/units"
)

// findUnit returns the one unit of o of package pkg holding fingerprint
// name; it fails the test unless there is exactly one.
func findUnit(t *testing.T, o *units.Observation, pkg, name string) *units.Unit {
	t.Helper()
	us := findUnits(o, pkg, name)
	if len(us) != 1 {
		t.Fatalf("%d units of %s hold fingerprint %s: %v", len(us), pkg, name, dirs(us))
	}
	return us[0]
}

func findUnits(o *units.Observation, pkg, name string) []*units.Unit {
	var out []*units.Unit
	for _, u := range o.Units {
		if u.Package != pkg {
			continue
		}
		for _, f := range u.Fingerprints {
			if f.Name == name {
				out = append(out, u)
			}
		}
	}
	return out
}

func fingerprintOf(u *units.Unit, name string) *units.Fingerprint {
	for _, f := range u.Fingerprints {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// A build that finds every unit fresh names each one, by the rule its
// files call for: build scripts and their runs by their own directories,
// libraries and tests by their hashes, binaries, examples, a root proc
// macro and rustdoc's output, which Cargo names without the hash, by the
// fingerprint Cargo names after the target. Nothing is written: every unit
// was built before the threshold.
func TestEveryUnitOfAFreshBuildIsNamed(t *testing.T) {
	w := template(t)
	before, _ := unitsDir(t)
	w.mustWarm(before, "doc")
	dir, _ := unitsDir(t)
	w.mustWarm(dir, warmCommand...) // every member is a root: mac's library is uplifted, without its hash
	w.mustWarm(dir, "doc")          // mac is a dependency: its library is named with its hash
	o := w.observe(dir)
	requireComplete(t, o)
	if u := o.Unused(); len(u) != 0 {
		t.Errorf("units unused: %v", dirs(u))
	}
	if len(o.Orphans) != 0 {
		t.Errorf("orphans: %v", o.Orphans)
	}
	for _, c := range []struct {
		pkg, fingerprint string
		how              units.Match
	}{
		{"app", "build-script-build-script-build", units.ByDir},
		{"app", "run-build-script-build-script-build", units.ByDir},
		{"tiny", "run-build-script-build-script-build", units.ByDir},
		{"core-lib", "lib-core_lib", units.ByHash},
		{"tiny", "lib-tiny", units.ByHash},
		{"app", "test-bin-app", units.ByHash},
		{"app", "test-integration-test-it", units.ByHash},
		// Two units hold lib-mac, a root's and a dependency's: the
		// uplifted library is the root's, by its inode.
		{"mac", "lib-mac", units.ByInode},
		{"mac", "lib-mac", units.ByHash},
		{"app", "bin-app", units.ByName},
		{"app", "example-ex", units.ByName},
		{"core-lib", "doc-lib-core_lib", units.ByName},
		{"app", "doc-bin-app", units.ByName},
	} {
		// cargo doc adds check units holding the same fingerprints.
		us := findUnits(o, c.pkg, c.fingerprint)
		var got []string
		for _, u := range us {
			f := fingerprintOf(u, c.fingerprint)
			got = append(got, f.Match.String())
			if !u.Used || u.Written {
				t.Errorf("%s: used %v, written %v (%s)", u.Dir, u.Used, u.Written, u.Why)
			}
		}
		if !slices.Contains(got, c.how.String()) {
			t.Errorf("%s of %s was matched by %q, want one matched by %q", c.fingerprint, c.pkg, got, c.how)
		}
	}
}

// A unit whose files Cargo names without the hash is told apart from other
// units of its package holding the same fingerprint (here the previous
// version's bin and example, still in the target): by the inode of its
// uplifted file (Cargo hard-links it on Linux), or where that does not
// match or Cargo copies (macOS), by its length and mtime. When neither
// tells, the observation is incomplete.
func TestUpliftedFilesAmongSeveralUnits(t *testing.T) {
	w := template(t)
	w.write(v2)
	rebuild, _ := unitsDir(t)
	w.mustWarm(rebuild, warmCommand...)
	fresh, _ := unitsDir(t) // the threshold after the rebuild: nothing is written now
	w.mustWarm(fresh, warmCommand...)

	check := func(t *testing.T, o *units.Observation, how units.Match) {
		t.Helper()
		requireComplete(t, o)
		for _, c := range []struct{ fingerprint, uplifted string }{
			{"bin-app", "debug/app"},
			{"example-ex", "debug/examples/ex"},
		} {
			us := findUnits(o, "app", c.fingerprint)
			if len(us) != 2 {
				t.Fatalf("%d units hold %s, want the old and the new: %v", len(us), c.fingerprint, dirs(us))
			}
			up, err := os.Stat(filepath.Join(w.target, c.uplifted))
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range us {
				linked := false
				for _, p := range u.Paths {
					if fi, err := os.Stat(filepath.Join(w.target, p)); err == nil && os.SameFile(fi, up) {
						linked = true
					}
				}
				f := fingerprintOf(u, c.fingerprint)
				if u.Used != linked || (linked && f.Match != how) {
					t.Errorf("%s: used %v, matched by %q; its output is %s: %v (want matched by %q)", u.Dir, u.Used, f.Match, c.uplifted, linked, how)
				}
			}
		}
	}
	t.Run("inode", func(t *testing.T) {
		check(t, w.observe(fresh), units.ByInode)
	})
	t.Run("length and mtime", func(t *testing.T) {
		// As where Cargo copies: the recorded inodes match no output.
		dir := t.TempDir()
		rewriteRecords(t, fresh, dir, func(f map[string]any) {
			if p := f["path"].(string); strings.HasSuffix(p, "/debug/app") || strings.HasSuffix(p, "/examples/ex") {
				f["ino"] = 1
			}
		})
		copyFile(t, filepath.Join(fresh, "threshold-before"), filepath.Join(dir, "threshold-before"))
		copyFile(t, filepath.Join(fresh, "threshold"), filepath.Join(dir, "threshold"))
		check(t, w.observe(dir), units.BySizeMtime)
	})
	t.Run("copies, as on macOS", func(t *testing.T) {
		// Where Cargo copies uplifted files the inode is not tried, though
		// here it would match: length and mtime decide.
		o, err := units.ObserveCopied(w.target, fresh)
		if err != nil {
			t.Fatal(err)
		}
		check(t, o, units.BySizeMtime)
	})
	t.Run("ambiguous", func(t *testing.T) {
		// The old bin's output made a hard link of the new one: both
		// units have the uplifted file's inode, length and mtime.
		o := w.observe(fresh)
		var outs []string
		for _, u := range findUnits(o, "app", "bin-app") {
			for _, p := range u.Paths {
				if strings.HasPrefix(p, "debug/deps/app-") && !strings.HasSuffix(p, ".d") {
					outs = append(outs, filepath.Join(w.target, p))
				}
			}
		}
		if len(outs) != 2 {
			t.Fatalf("outputs of the two bins: %v", outs)
		}
		link := outs[0]
		if !sameFile(t, outs[1], filepath.Join(w.target, "debug/app")) {
			link = outs[1]
		}
		if err := os.Remove(link); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(filepath.Join(w.target, "debug/app"), link); err != nil {
			t.Fatal(err)
		}
		requireCause(t, w.observe(fresh), units.SeveralUnits)
	})
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	fa, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(fa, fb)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
}

// rewriteRecords copies the records of dir to out, passing every recorded
// file of every message through edit.
func rewriteRecords(t *testing.T, dir, out string, edit func(map[string]any)) {
	t.Helper()
	recs, err := filepath.Glob(filepath.Join(dir, "call-*.jsonl"))
	if err != nil || len(recs) == 0 {
		t.Fatalf("records in %s: %v %v", dir, recs, err)
	}
	for _, r := range recs {
		data, err := os.ReadFile(r)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
			var m map[string]any
			d := json.NewDecoder(strings.NewReader(l))
			d.UseNumber() // mtimes in ns do not fit a float64
			if err := d.Decode(&m); err != nil {
				t.Fatal(err)
			}
			if files, ok := m["files"].([]any); ok {
				for _, f := range files {
					edit(f.(map[string]any))
				}
			}
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, string(b))
		}
		if err := os.WriteFile(filepath.Join(out, filepath.Base(r)), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A cargo call that bypasses the shim and builds leaves units written
// that no message reports, while every recorded call succeeded: the
// observation is incomplete, and Prune refuses it.
func TestCallBypassingTheShim(t *testing.T) {
	w := template(t)
	dir, _ := unitsDir(t)
	w.mustWarm(dir, warmCommand...)
	w.mustPlain("build", "--release", "-p", "tiny")
	o := w.observe(dir)
	requireCause(t, o, units.Bypassed)
	_, err := units.Prune(o)
	var ie *units.IncompleteError
	if !errors.As(err, &ie) || len(ie.Reasons) == 0 {
		t.Fatalf("Prune of an incomplete observation: %v", err)
	}
	if _, err := os.Stat(filepath.Join(w.target, "release")); err != nil {
		t.Errorf("Prune touched the target: %v", err)
	}
}

// A profile dir holding what neither of Cargo's layouts has makes the
// observation incomplete: units may be where the scan does not look.
func TestUnknownLayout(t *testing.T) {
	for _, c := range []struct{ name, path string }{
		{"a directory in the profile dir", "debug/units"},
		{"an entry of .fingerprint that is no unit", "debug/.fingerprint/no-unit"},
		{"an entry of build/ that is no unit", "debug/build/no-unit/x"},
		{"fingerprints without a .cargo-lock", "other/.fingerprint/x-0123456789abcdef"},
		{"build units without a .cargo-lock", "other/build/x/0123456789abcdef/fingerprint"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := template(t)
			dir, _ := unitsDir(t)
			w.mustWarm(dir, warmCommand...)
			if err := os.MkdirAll(filepath.Join(w.target, c.path), 0o755); err != nil {
				t.Fatal(err)
			}
			requireCause(t, w.observe(dir), units.UnknownLayout)
		})
	}
}

// A message whose files lead to no unit (its fingerprint dir is gone), or
// to more than one (two fingerprint dirs carry its hash), makes the
// observation incomplete.
func TestMessageMatchingNoUnitOrSeveral(t *testing.T) {
	t.Run("none", func(t *testing.T) {
		w := template(t)
		dir, _ := unitsDir(t)
		w.mustWarm(dir, warmCommand...)
		u := findUnit(t, w.observe(dir), "core-lib", "lib-core_lib")
		if err := os.RemoveAll(filepath.Join(w.target, u.Dir)); err != nil {
			t.Fatal(err)
		}
		requireCause(t, w.observe(dir), units.NoUnit)
	})
	t.Run("several", func(t *testing.T) {
		w := template(t)
		dir, _ := unitsDir(t)
		w.mustWarm(dir, warmCommand...)
		u := findUnit(t, w.observe(dir), "core-lib", "lib-core_lib")
		copyFile(t, filepath.Join(w.target, u.Dir), filepath.Join(w.target, "debug/.fingerprint/other-"+u.Hash))
		requireCause(t, w.observe(dir), units.SeveralUnits)
	})
}

// A message reporting a unit rebuilt whose fingerprint is older than the
// threshold shows timestamps that cannot be trusted.
func TestRebuiltUnitPredatingTheThreshold(t *testing.T) {
	w := template(t)
	dir, th := unitsDir(t)
	lib := filepath.Join(w.dir, "core/src/lib.rs")
	src, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, append(src, "// edited\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	w.mustWarm(dir, warmCommand...)
	o := w.observe(dir)
	requireComplete(t, o)
	u := findUnit(t, o, "core-lib", "lib-core_lib")
	if !u.Written || !fingerprintOf(u, "lib-core_lib").Written {
		t.Fatalf("the rebuilt unit %s is not written", u.Dir)
	}
	old := th.Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(w.target, u.Dir, "lib-core_lib"), old, old); err != nil {
		t.Fatal(err)
	}
	requireCause(t, w.observe(dir), units.Predates)
}

// After a call that failed (a build under --keep-going with a crate that
// does not compile), the units Cargo did not build are written but
// reported by no message: they count as unused, not as a bypass, and the
// prune removes them; what the failed call found fresh stays.
func TestFailedCallUnderKeepGoing(t *testing.T) {
	w := template(t)
	dir, _ := unitsDir(t)
	broken := v1
	broken.Broken = true
	w.write(broken)
	if r := w.warm(dir, append(warmCommand, "--keep-going")...); r.code == 0 {
		t.Fatal("the build of a crate that does not compile succeeded")
	}
	o := w.observe(dir)
	requireComplete(t, o)
	if o.Failed != 1 {
		t.Errorf("%d calls failed, want 1", o.Failed)
	}
	lib := findUnit(t, o, "core-lib", "lib-core_lib")
	if lib.Used || !lib.Written || !strings.Contains(lib.Why, "failed") {
		t.Errorf("the unit that failed to build: used %v, written %v (%s)", lib.Used, lib.Written, lib.Why)
	}
	for _, c := range [][2]string{{"mac", "lib-mac"}, {"tiny", "lib-tiny"}, {"gone", "lib-gone"}} {
		if u := findUnit(t, o, c[0], c[1]); !u.Used {
			t.Errorf("%s, fresh in the failed call, is unused (%s)", u.Dir, u.Why)
		}
	}
	if _, err := units.Prune(o); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(w.target, lib.Dir)); !os.IsNotExist(err) {
		t.Errorf("the unit that failed to build is still there: %v", err)
	}
	// Fixed, it builds, and what stayed is still good.
	w.write(v1)
	w.mustPlain(warmCommand...)
	if got := runBin(t, filepath.Join(w.target, "debug/app")); !strings.Contains(got, "core tiny 1.0.0 built extra fancy dropme") {
		t.Errorf("the binary prints %q", got)
	}
}

// Calls whose units the shim cannot see run unchanged and make the
// observation incomplete: human or short messages, a subcommand it does
// not know (a user's alias, an external subcommand).
func TestUnobservableCalls(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		code int
	}{
		{"human messages", []string{"build", "--message-format=human"}, 0},
		{"short messages", []string{"build", "--message-format", "short"}, 0},
		{"alias", []string{"bb"}, 0},
		{"unknown subcommand", []string{"ferry-test-no-such-subcommand"}, 101},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := template(t)
			writeFiles(t, w.dir, map[string]string{".cargo/config.toml": mustRead(t, filepath.Join(w.dir, ".cargo/config.toml")) + "\n[alias]\nbb = \"build\"\n"})
			dir, _ := unitsDir(t)
			r := w.warm(dir, c.args...)
			if r.code != c.code {
				t.Fatalf("exit %d, want %d\n%s", r.code, c.code, tail(r.stderr))
			}
			requireCause(t, w.observe(dir), units.Unobservable)
		})
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A call killed midway leaves a record without its end: it did not
// finish, and the units it was building count as unused, not as a bypass.
func TestKilledCall(t *testing.T) {
	w := template(t)
	marker := filepath.Join(t.TempDir(), "running")
	writeFiles(t, w.dir, map[string]string{"app/build.rs": `fn main() {
    std::fs::write(std::env::var("UNITS_TEST_MARKER").unwrap(), "").unwrap();
    std::thread::sleep(std::time::Duration::from_secs(120));
}
`})
	dir, _ := unitsDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, filepath.Join(w.shimBin, "cargo"), warmCommand...)
	c.Dir = w.dir
	c.Env = append(baseEnv(), "PATH="+w.shimBin+string(filepath.ListSeparator)+os.Getenv("PATH"),
		"FERRY_WARM_SRC="+w.dir, "FERRY_WARM_TARGET="+w.target, "FERRY_WARM_UNITS="+dir, "UNITS_TEST_MARKER="+marker)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if ctx.Err() != nil {
			syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			t.Fatal("the build script never ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Kill the call: the shim and everything it started.
	if err := syscall.Kill(-c.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.Wait()
	o := w.observe(dir)
	requireCause(t, o, units.Unfinished)
	run := findUnits(o, "app", "run-build-script-build-script-build")
	for _, u := range run {
		if u.Written && u.Used {
			t.Errorf("the build script run killed midway counts as used: %s (%s)", u.Dir, u.Why)
		}
	}
}

// A directory of the target that cannot be read makes the observation
// incomplete: units may be in it.
func TestUnreadableDirectory(t *testing.T) {
	w := template(t)
	dir, _ := unitsDir(t)
	w.mustWarm(dir, warmCommand...)
	deps := filepath.Join(w.target, "debug/deps")
	if err := os.Chmod(deps, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(deps, 0o755)
	var o *units.Observation
	var err error
	withoutDACOverride(t, func() { o, err = units.Observe(w.target, dir) })
	if err != nil {
		t.Fatal(err)
	}
	requireCause(t, o, units.Unreadable)
}

// A workspace nested in the checkout builds in its own target dir under
// ferry-ws/ (the shim gives it one). It is not observed: the analysis
// ignores it and says it is there, and Prune leaves it alone.
func TestNestedWorkspaceIsNotObserved(t *testing.T) {
	w := template(t)
	writeFiles(t, w.dir, map[string]string{
		"nested/Cargo.toml": "[package]\nname = \"nested\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
		"nested/src/lib.rs": "pub fn nested() {}\n",
	})
	dir, _ := unitsDir(t)
	w.mustWarm(dir, warmCommand...)
	nested := *w
	nested.cwd = filepath.Join(w.dir, "nested")
	nested.mustWarm(dir, "build")
	nestedTarget := filepath.Join(w.target, "ferry-ws/nested/debug")
	if _, err := os.Stat(nestedTarget); err != nil {
		t.Fatalf("the nested workspace did not build in its own target dir: %v", err)
	}
	o := w.observe(dir)
	requireComplete(t, o)
	if !o.Nested {
		t.Error("Observation.Nested is false")
	}
	for _, u := range o.Units {
		if strings.HasPrefix(u.Dir, "ferry-ws/") {
			t.Errorf("unit %s of the nested workspace is observed", u.Dir)
		}
	}
	before := entries(t, filepath.Join(w.target, "ferry-ws/nested"))
	if _, err := units.Prune(o); err != nil {
		t.Fatal(err)
	}
	if after := entries(t, filepath.Join(w.target, "ferry-ws/nested")); len(before) == 0 || strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("Prune changed the nested workspace's target:\n%s", diff(after, before))
	}
}

// Prune reaches every path from the target without following a symlink:
// links in what it removes are removed, not followed, and a profile dir's
// entry that is a link is left alone.
func TestPruneNeverFollowsSymlinks(t *testing.T) {
	w := template(t)
	outside := t.TempDir()
	keep := filepath.Join(outside, "keep")
	if err := os.WriteFile(keep, []byte("outside the target"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, _ := unitsDir(t)
	w.mustWarm(dir, "build", "-p", "mac") // everything but mac goes
	o := w.observe(dir)
	requireComplete(t, o)
	run := findUnit(t, o, "app", "run-build-script-build-script-build")
	if run.Used {
		t.Fatalf("%s is used", run.Dir)
	}
	var buildDir string
	for _, p := range run.Paths {
		if strings.HasPrefix(p, "debug/build/") {
			buildDir = filepath.Join(w.target, p)
		}
	}
	links := []string{
		filepath.Join(buildDir, "out", "escape"),                              // in a unit's build dir
		filepath.Join(w.target, "debug/deps/liborphan-0123456789abcdef.rlib"), // an orphan
	}
	for _, l := range links {
		if err := os.Symlink(outside, l); err != nil {
			t.Fatal(err)
		}
	}
	// A link where a build dir would be is not followed: it is not a
	// layout Cargo makes.
	if err := os.Symlink(outside, filepath.Join(w.target, "debug/build/orphan-0123456789abcdef")); err != nil {
		t.Fatal(err)
	}
	o = w.observe(dir)
	requireCause(t, o, units.UnknownLayout) // build/ holds a link, not a directory
	if err := os.Remove(filepath.Join(w.target, "debug/build/orphan-0123456789abcdef")); err != nil {
		t.Fatal(err)
	}
	o = w.observe(dir)
	requireComplete(t, o)
	p, err := units.Prune(o)
	if err != nil {
		t.Fatal(err)
	}
	if p.Orphans != 1 || p.Units == 0 {
		t.Errorf("pruned %+v", p)
	}
	for _, l := range links {
		if _, err := os.Lstat(l); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", l, err)
		}
	}
	if got := mustRead(t, keep); got != "outside the target" {
		t.Errorf("the file outside the target changed: %q", got)
	}
	// The next build rebuilds what went, and mac stays fresh.
	r := w.mustPlain(append(warmCommand, "--message-format=json")...)
	for _, a := range artifacts(t, r.stdout) {
		if strings.HasSuffix(a.PackageID, "/mac#0.1.0") && !a.Profile.Test && !a.Fresh {
			t.Errorf("mac's library, used, was rebuilt")
		}
	}
}

// Rustdoc units share one directory per package (their hash is the
// package's). In a directory the warm build used, a fingerprint no
// message named and the build did not write is dropped alone: here a
// bin's documentation, where only the library was documented.
func TestSharedFingerprintDir(t *testing.T) {
	w := template(t)
	writeFiles(t, w.dir, map[string]string{"core/src/bin/tool.rs": "fn main() {}\n"})
	before, _ := unitsDir(t)
	w.mustWarm(before, "doc", "-p", "core-lib")
	dir, _ := unitsDir(t)
	w.mustWarm(dir, "doc", "-p", "core-lib", "--lib")
	o := w.observe(dir)
	requireComplete(t, o)
	u := findUnit(t, o, "core-lib", "doc-lib-core_lib")
	lib, bin := fingerprintOf(u, "doc-lib-core_lib"), fingerprintOf(u, "doc-bin-tool")
	if bin == nil || !u.Used || !lib.Named || lib.Dropped || bin.Named || !bin.Dropped {
		t.Fatalf("%s (used %v): %+v, %+v", u.Dir, u.Used, lib, bin)
	}
	p, err := units.Prune(o)
	if err != nil {
		t.Fatal(err)
	}
	if p.Fingerprints != 1 {
		t.Errorf("pruned %+v, want one fingerprint", p)
	}
	left, err := os.ReadDir(filepath.Join(w.target, u.Dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		if strings.Contains(e.Name(), "doc-bin-tool") {
			t.Errorf("%s is left in %s", e.Name(), u.Dir)
		}
	}
	// cargo doc documents the bin again, and only the bin (it also
	// builds core_lib's metadata for the bin's docs, which the library's
	// docs did not use, and which went too).
	r := w.mustPlain("doc", "-p", "core-lib", "--message-format=json")
	for _, a := range artifacts(t, r.stdout) {
		if len(a.Filenames) == 1 && strings.Contains(a.Filenames[0], "/doc/") && a.Fresh == (a.Target.Name == "tool") {
			t.Errorf("cargo doc after the prune: %s's docs fresh %v", a.Target.Name, a.Fresh)
		}
	}

	// Written, but reported by no message, while every call succeeded: a
	// call that bypassed the shim.
	dir2, _ := unitsDir(t)
	w.mustWarm(dir2, "doc", "-p", "core-lib", "--lib")
	w.mustPlain("doc", "-p", "core-lib", "--bin", "tool", "--no-deps")
	o = w.observe(dir2)
	requireCause(t, o, units.Bypassed)
	found := false
	for _, r := range o.Incomplete {
		found = found || (r.Path == u.Dir && strings.Contains(r.Detail, "doc-bin-tool"))
	}
	if !found {
		t.Errorf("no reason names fingerprint doc-bin-tool of %s: %v", u.Dir, o.Incomplete)
	}
}
