package units_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/units"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

// version is one commit of the test workspace. Between versions a member
// goes (gone), a dependency is dropped (dropme), another is bumped (tiny),
// and a feature changes (core-lib's fancy, which app turns on).
type version struct {
	Gone   bool   // the member gone, and app's dependency on it
	DropMe bool   // core-lib depends on dropme
	Tiny   string // the version of tiny core-lib depends on
	Fancy  bool   // app turns on core-lib's feature fancy
	Broken bool   // core-lib does not compile
}

var (
	v1 = version{Gone: true, DropMe: true, Tiny: "1.0.0", Fancy: true}
	v2 = version{Tiny: "1.1.0"}
)

// registry writes the crates the workspace takes from the default registry: a
// directory source holding tiny 1.0.0 and 1.1.0 (each with a build script)
// and dropme 1.0.0, so that a dependency can be bumped without a network.
func registry(t *testing.T, dir string) string {
	t.Helper()
	crate := func(name, ver string, files map[string]string) {
		root := filepath.Join(dir, name+"-"+ver)
		files["Cargo.toml"] = fmt.Sprintf("[package]\nname = %q\nversion = %q\nedition = \"2021\"\n", name, ver) + files["Cargo.toml"]
		// A directory source's checksum file; the package checksum only
		// has to be the same each time Cargo reads it.
		files[".cargo-checksum.json"] = `{"files":{},"package":"` + strings.Repeat("0", 63) + fmt.Sprint(len(ver)%10) + `"}`
		writeFiles(t, root, files)
	}
	for _, ver := range []string{"1.0.0", "1.1.0"} {
		crate("tiny", ver, map[string]string{
			"Cargo.toml": "build = \"build.rs\"\n\n[features]\nextra = []\n",
			"build.rs":   "fn main() {\n    println!(\"cargo:rustc-env=TINY_BUILT=built\");\n    println!(\"cargo:rerun-if-changed=build.rs\");\n}\n",
			"src/lib.rs": "pub fn tiny() -> String {\n    let s = format!(\"tiny " + ver + " {}\", env!(\"TINY_BUILT\"));\n    #[cfg(feature = \"extra\")]\n    let s = s + \" extra\";\n    s\n}\n",
		})
	}
	crate("dropme", "1.0.0", map[string]string{"src/lib.rs": "pub const NAME: &str = \"dropme\";\n"})
	return dir
}

// files are the workspace's files at version v.
func (v version) files(reg string) map[string]string {
	members := `"app", "core", "mac"`
	if v.Gone {
		members += `, "gone"`
	}
	core := "[package]\nname = \"core-lib\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[features]\nfancy = []\n\n[dependencies]\ntiny = { version = \"=" + v.Tiny + "\", features = [\"extra\"] }\n"
	coreLib := "pub fn describe() -> String {\n    let s = format!(\"core {}\", tiny::tiny());\n    #[cfg(feature = \"fancy\")]\n    let s = s + \" fancy\";\n"
	if v.DropMe {
		core += "dropme = \"1\"\n"
		coreLib += "    let s = s + \" \" + dropme::NAME;\n"
	}
	if v.Broken {
		coreLib += "    let _broken: u32 = \"not a number\";\n"
	}
	coreLib += "    s\n}\n"
	app := "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\nmac = { path = \"../mac\" }\n"
	if v.Fancy {
		app += "core-lib = { path = \"../core\", features = [\"fancy\"] }\n"
	} else {
		app += "core-lib = { path = \"../core\" }\n"
	}
	main := "fn main() {\n    let s = format!(\"app {} {} {}\", core_lib::describe(), mac::answer!(), env!(\"APP_BUILT\"));\n"
	if v.Gone {
		app += "gone = { path = \"../gone\" }\n"
		main += "    let s = s + \" \" + gone::NAME;\n"
	}
	main += "    println!(\"{s}\");\n}\n"
	f := map[string]string{
		"Cargo.toml":         "[workspace]\nresolver = \"2\"\nmembers = [" + members + "]\n",
		".cargo/config.toml": "[source.crates-io]\nreplace-with = \"test\"\n\n[source.test]\ndirectory = \"" + reg + "\"\n\n[net]\noffline = true\n",
		"core/Cargo.toml":    core,
		"core/src/lib.rs":    coreLib,
		"mac/Cargo.toml":     "[package]\nname = \"mac\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[lib]\nproc-macro = true\n",
		"mac/src/lib.rs":     "use proc_macro::TokenStream;\n\n#[proc_macro]\npub fn answer(_: TokenStream) -> TokenStream {\n    \"42\".parse().unwrap()\n}\n",
		"app/Cargo.toml":     app,
		"app/build.rs":       "fn main() {\n    println!(\"cargo:rustc-env=APP_BUILT=built\");\n    println!(\"cargo:rerun-if-changed=build.rs\");\n}\n",
		"app/src/main.rs":    main,
		"app/tests/it.rs":    "#[test]\nfn it() {\n    assert!(core_lib::describe().starts_with(\"core\"));\n}\n",
		"app/examples/ex.rs": "fn main() {\n    println!(\"{}\", core_lib::describe());\n}\n",
	}
	if v.Gone {
		f["gone/Cargo.toml"] = "[package]\nname = \"gone\"\nversion = \"0.1.0\"\nedition = \"2021\"\n"
		f["gone/src/lib.rs"] = "pub const NAME: &str = \"gone\";\n"
	}
	return f
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// ws is a checkout of the test workspace and its target dir, built the
// way a base's warm build builds: through the shim, which records each
// call in a warm-units directory.
type ws struct {
	t         *testing.T
	reg       string
	dir       string   // the checkout
	cwd       string   // where cargo runs, when not dir
	target    string   // its target dir
	toolchain []string // arguments before the subcommand (+nightly, -Z…)
	shimBin   string   // a PATH directory holding cargo -> ferry-shim
}

func needCargo(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("cargo"); err != nil {
		t.Skip("skipping: needs cargo on PATH")
	}
}

// newWS writes the workspace at version v, with an empty target dir.
func newWS(t *testing.T, v version, toolchain ...string) *ws {
	t.Helper()
	return makeWS(t, t.TempDir, v, toolchain...)
}

// makeWS is newWS with its directories made by tmp.
func makeWS(t *testing.T, tmp func() string, v version, toolchain ...string) *ws {
	t.Helper()
	needCargo(t)
	shim := filepath.Join(testenv.Binaries(t), "ferry-shim")
	bin := filepath.Join(tmp(), "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(shim, filepath.Join(bin, "cargo")); err != nil {
		t.Fatal(err)
	}
	w := &ws{t: t, reg: registry(t, tmp()), dir: filepath.Join(tmp(), "ws"), target: filepath.Join(tmp(), "target"), toolchain: toolchain, shimBin: bin}
	w.write(v)
	if err := os.Mkdir(w.target, 0o755); err != nil {
		t.Fatal(err)
	}
	return w
}

// write makes the checkout version v: what git would do when a refresh
// checks out the next commit.
func (w *ws) write(v version) {
	w.t.Helper()
	for _, d := range []string{"app", "core", "mac", "gone"} {
		if err := os.RemoveAll(filepath.Join(w.dir, d)); err != nil {
			w.t.Fatal(err)
		}
	}
	writeFiles(w.t, w.dir, v.files(w.reg))
}

// clone copies the checkout and its target elsewhere, keeping mtimes and
// hard links (a fork, as far as Cargo can tell), for a test of its own.
func (w *ws) clone(t *testing.T) *ws {
	t.Helper()
	c := *w
	c.t = t
	c.dir = filepath.Join(t.TempDir(), "ws")
	c.target = filepath.Join(t.TempDir(), "target")
	for from, to := range map[string]string{w.dir: c.dir, w.target: c.target} {
		if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
			t.Fatalf("cp -a %s %s: %v\n%s", from, to, err, out)
		}
	}
	return &c
}

// result is what one cargo call did.
type result struct {
	code           int
	stdout, stderr string
}

// warm runs cargo args through the shim as a base's warm command does,
// recording the call in unitsDir.
func (w *ws) warm(unitsDir string, args ...string) result {
	w.t.Helper()
	env := []string{
		"PATH=" + w.shimBin + string(filepath.ListSeparator) + os.Getenv("PATH"),
		"FERRY_WARM_SRC=" + w.dir, "FERRY_WARM_TARGET=" + w.target, "FERRY_WARM_UNITS=" + unitsDir,
		"CARGO_TARGET_DIR=" + w.target, "CARGO_BUILD_BUILD_DIR=" + w.target,
	}
	return w.run(filepath.Join(w.shimBin, "cargo"), env, args)
}

// plain runs cargo args without the shim, into the same target.
func (w *ws) plain(args ...string) result {
	w.t.Helper()
	cargo, err := exec.LookPath("cargo")
	if err != nil {
		w.t.Fatal(err)
	}
	return w.run(cargo, []string{"PATH=" + os.Getenv("PATH"), "CARGO_TARGET_DIR=" + w.target, "CARGO_BUILD_BUILD_DIR=" + w.target}, args)
}

func (w *ws) run(cargo string, env, args []string) result {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args = append(append([]string(nil), w.toolchain...), args...)
	c := exec.CommandContext(ctx, cargo, args...)
	c.Args[0] = "cargo"
	c.Dir = w.dir
	if w.cwd != "" {
		c.Dir = w.cwd
	}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.Env = append(baseEnv(), env...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		w.t.Fatalf("cargo %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// baseEnv is the test's environment without what would redirect cargo or
// the shim.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PATH" || strings.HasPrefix(k, "FERRY_") || strings.HasPrefix(k, "CARGO_TARGET_DIR") ||
			strings.HasPrefix(k, "CARGO_BUILD_") || k == "CARGO_INCREMENTAL" || k == "RUSTFLAGS" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// mustWarm runs a warm command that must succeed.
func (w *ws) mustWarm(unitsDir string, args ...string) result {
	w.t.Helper()
	r := w.warm(unitsDir, args...)
	if r.code != 0 {
		w.t.Fatalf("cargo %s through the shim: exit %d\n%s", strings.Join(args, " "), r.code, tail(r.stderr))
	}
	return r
}

func (w *ws) mustPlain(args ...string) result {
	w.t.Helper()
	r := w.plain(args...)
	if r.code != 0 {
		w.t.Fatalf("cargo %s: exit %d\n%s", strings.Join(args, " "), r.code, tail(r.stderr))
	}
	return r
}

func tail(s string) string {
	if len(s) > 3000 {
		return "…" + s[len(s)-3000:]
	}
	return s
}

// unitsDir makes a warm-units directory and takes its threshold.
func unitsDir(t *testing.T) (string, time.Time) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "warm-units")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	th, err := units.TakeThreshold(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, th
}

// observe analyses w's target with the records in dir.
func (w *ws) observe(dir string) *units.Observation {
	w.t.Helper()
	o, err := units.Observe(w.target, dir)
	if err != nil {
		w.t.Fatal(err)
	}
	return o
}

// artifacts are the compiler-artifact messages of a cargo call's JSON output.
type artifact struct {
	PackageID string   `json:"package_id"`
	Filenames []string `json:"filenames"`
	Fresh     bool     `json:"fresh"`
	Profile   struct {
		Test bool `json:"test"`
	} `json:"profile"`
	Target struct {
		Name string   `json:"name"`
		Kind []string `json:"kind"`
	} `json:"target"`
}

func artifacts(t *testing.T, stdout string) []artifact {
	t.Helper()
	var out []artifact
	for _, l := range strings.Split(stdout, "\n") {
		if !strings.HasPrefix(l, `{"reason":"compiler-artifact"`) {
			continue
		}
		var a artifact
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		out = append(out, a)
	}
	return out
}

// unitDirs lists the fingerprint dirs of a target's units (both layouts),
// relative to the target.
func unitDirs(t *testing.T, target string) []string {
	t.Helper()
	var out []string
	for _, pat := range []string{"*/.fingerprint/*", "*/build/*/*/fingerprint"} {
		m, err := filepath.Glob(filepath.Join(target, pat))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(target, p)
			out = append(out, rel)
		}
	}
	sort.Strings(out)
	return out
}

// entries lists what a target holds that belongs to units: the entries of
// each profile dir's .fingerprint/, build/ (two levels in the build-units
// layout), deps/ and examples/, relative to the target.
func entries(t *testing.T, target string) []string {
	t.Helper()
	var out []string
	// incremental/*: rustc's dir per crate, named by the crate and a hash
	// of its metadata, the same in every build of the same units.
	for _, pat := range []string{"*/.fingerprint/*", "*/build/*", "*/build/*/*", "*/deps/*", "*/examples/*", "*/incremental/*"} {
		m, err := filepath.Glob(filepath.Join(target, pat))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(target, p)
			out = append(out, rel)
		}
	}
	sort.Strings(out)
	return out
}

// unitOf returns the unit whose fingerprint dir is dir, or nil.
func unitOf(o *units.Observation, dir string) *units.Unit {
	for _, u := range o.Units {
		if u.Dir == dir {
			return u
		}
	}
	return nil
}

// reasons returns the causes of o's incompleteness, and the reasons as text.
func reasons(o *units.Observation) (map[units.Cause]bool, string) {
	causes := map[units.Cause]bool{}
	var b strings.Builder
	for _, r := range o.Incomplete {
		causes[r.Cause] = true
		fmt.Fprintf(&b, "  %s\n", r)
	}
	return causes, b.String()
}

// requireComplete fails the test when o is incomplete.
func requireComplete(t *testing.T, o *units.Observation) {
	t.Helper()
	if !o.Complete() {
		_, text := reasons(o)
		t.Fatalf("the observation is incomplete:\n%s", text)
	}
}

// requireCause fails the test unless o is incomplete for cause c (and
// only for the causes listed).
func requireCause(t *testing.T, o *units.Observation, want ...units.Cause) {
	t.Helper()
	causes, text := reasons(o)
	for _, c := range want {
		if !causes[c] {
			t.Errorf("the observation is not incomplete for %q; its reasons:\n%s", c, text)
		}
	}
	for c := range causes {
		found := false
		for _, w := range want {
			found = found || w == c
		}
		if !found {
			t.Errorf("the observation is also incomplete for %q:\n%s", c, text)
		}
	}
}

var (
	templateOnce sync.Once
	templateWS   *ws
)

// template returns a copy of the workspace at version 1 with its target
// built (cargo build --all-targets, through the shim), for a test of its
// own: the build runs once per test binary.
func template(t *testing.T) *ws {
	t.Helper()
	needCargo(t)
	templateOnce.Do(func() {
		tmp := func() string {
			d, err := os.MkdirTemp("", "ferry-units-")
			if err != nil {
				t.Fatal(err)
			}
			testenv.RemoveAtExit(d)
			return d
		}
		w := makeWS(t, tmp, v1)
		units := filepath.Join(tmp(), "warm-units")
		if err := os.Mkdir(units, 0o755); err != nil {
			t.Fatal(err)
		}
		w.mustWarm(units, warmCommand...)
		templateWS = w
	})
	if templateWS == nil {
		t.Fatal("the template workspace could not be built (see the first test that used it)")
	}
	return templateWS.clone(t)
}
