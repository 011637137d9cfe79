package relocate_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/relocate"
	"github.com/ferrydev/ferry/pkg/units"
)

// The trap workspace: each member captures the base's paths in one of the
// ways the plan must see, and app prints what each captured. Every test
// builds it with plain cargo at host path A (a checkout and a target under
// a store dir laid out as Ferry's), copies both to path B (cp -a keeps
// mtimes, as a fork does), plans with A's roots, applies the plan to B's
// target and builds at B: the program must show B's paths, never A's, and
// Cargo must rebuild exactly the units the plan says (Plan.Rebuilds).
var trapFiles = map[string]string{
	"Cargo.toml": `[workspace]
resolver = "2"
members = ["app", "gencode", "rustcenv", "pmacro", "pmuser", "liveout", "bdep", "cached", "clean"]
exclude = ["tools"]
`,
	".cargo/config.toml": "[net]\noffline = true\n",

	// A build script writing its manifest dir into generated code (and
	// nothing else).
	"gencode/Cargo.toml": pkg("gencode", ""),
	"gencode/build.rs": `fn main() {
    let out = std::env::var("OUT_DIR").unwrap();
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    std::fs::write(format!("{out}/gen.rs"), format!("pub const DIR: &str = {dir:?};\n")).unwrap();
    println!("cargo:rerun-if-changed=build.rs");
}
`,
	"gencode/src/lib.rs": `include!(concat!(env!("OUT_DIR"), "/gen.rs"));` + "\n",

	// A build script passing its manifest dir as a rustc-env value, and
	// its own OUT_DIR in another (which Cargo rewrites: exempt).
	"rustcenv/Cargo.toml": pkg("rustcenv", ""),
	"rustcenv/build.rs": `fn main() {
    println!("cargo:rustc-env=RENV_DIR={}", std::env::var("CARGO_MANIFEST_DIR").unwrap());
    println!("cargo:rustc-env=RENV_OUT={}/x", std::env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed=build.rs");
}
`,
	"rustcenv/src/lib.rs": `pub const DIR: &str = env!("RENV_DIR");` + "\n",

	// A local proc macro reading CARGO_MANIFEST_DIR from the environment
	// (the rust-embed pattern: nothing tracks it), and a crate using it.
	"pmacro/Cargo.toml": pkg("pmacro", "") + "\n[lib]\nproc-macro = true\n",
	"pmacro/src/lib.rs": `use proc_macro::TokenStream;

#[proc_macro]
pub fn here(_: TokenStream) -> TokenStream {
    format!("{:?}", std::env::var("CARGO_MANIFEST_DIR").unwrap()).parse().unwrap()
}
`,
	"pmuser/Cargo.toml": pkg("pmuser", `pmacro = { path = "../pmacro" }`),
	"pmuser/src/lib.rs": "pub const HERE: &str = pmacro::here!();\n",

	// A unit keeping a path into the OUT_DIR of the run it depends on.
	"liveout/Cargo.toml": pkg("liveout", ""),
	"liveout/build.rs": `fn main() {
    let out = std::env::var("OUT_DIR").unwrap();
    std::fs::write(format!("{out}/n.rs"), "pub const N: u32 = 7;\n").unwrap();
    println!("cargo:rerun-if-changed=build.rs");
}
`,
	"liveout/src/lib.rs": `include!(concat!(env!("OUT_DIR"), "/n.rs"));` + "\n",

	// A build-dependency that records its manifest dir (so the plan
	// removes it), and a build script that caches what it got from it in
	// its OUT_DIR, hex-encoded (no needle finds it): only removing the
	// run whole makes it write the agent's.
	"bdep/Cargo.toml":   pkg("bdep", ""),
	"bdep/src/lib.rs":   `pub const DIR: &str = env!("CARGO_MANIFEST_DIR");` + "\n",
	"cached/Cargo.toml": pkg("cached", "") + "\n[build-dependencies]\nbdep = { path = \"../bdep\" }\n",
	"cached/build.rs": `fn main() {
    let f = format!("{}/dir.hex", std::env::var("OUT_DIR").unwrap());
    if std::fs::metadata(&f).is_err() {
        let hex: String = bdep::DIR.bytes().map(|b| format!("{b:02x}")).collect();
        std::fs::write(&f, hex).unwrap();
    }
    println!("cargo:rerun-if-changed=build.rs");
}
`,
	"cached/src/lib.rs": `pub fn dir() -> String {
    let h = include_str!(concat!(env!("OUT_DIR"), "/dir.hex"));
    (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap() as char).collect()
}
`,

	// A crate that records nothing: kept.
	"clean/Cargo.toml": pkg("clean", ""),
	"clean/src/lib.rs": "pub fn two() -> u32 { 2 }\n",

	"app/Cargo.toml": pkg("app", `gencode = { path = "../gencode" }
rustcenv = { path = "../rustcenv" }
pmuser = { path = "../pmuser" }
liveout = { path = "../liveout" }
cached = { path = "../cached" }
clean = { path = "../clean" }`),
	"app/src/main.rs": `fn main() {
    println!("gencode {}", gencode::DIR);
    println!("rustcenv {}", rustcenv::DIR);
    println!("pmuser {}", pmuser::HERE);
    println!("cached {}", cached::dir());
    println!("liveout {}", liveout::N);
    println!("clean {}", clean::two());
}
`,
	// A test baking in the binary's path.
	"app/tests/binexe.rs": `#[test]
fn bin() {
    println!("binexe {}", env!("CARGO_BIN_EXE_app"));
}
`,

	// A nested workspace (built into <target>/ferry-ws/tools, as the shim
	// does): one crate records its manifest dir, one nothing.
	"tools/Cargo.toml": `[workspace]
resolver = "2"
members = ["tool", "quiet"]
`,
	"tools/tool/Cargo.toml":  pkg("tool", `quiet = { path = "../quiet" }`),
	"tools/tool/src/main.rs": `fn main() { println!("tool {} {}", env!("CARGO_MANIFEST_DIR"), quiet::one()); }` + "\n",
	"tools/quiet/Cargo.toml": pkg("quiet", ""),
	"tools/quiet/src/lib.rs": "pub fn one() -> u32 { 1 }\n",
}

func pkg(name, deps string) string {
	s := "[package]\nname = \"" + name + "\"\nversion = \"0.1.0\"\nedition = \"2021\"\n"
	if deps != "" {
		s += "\n[dependencies]\n" + deps + "\n"
	}
	return s
}

// site is one place a workspace is built at: a checkout, and a target
// dir under a store dir.
type site struct {
	store, src, target string
}

// siteA lays out a base: <store>/bases/b1/{src,target}.
func siteA(root string) site {
	s := filepath.Join(root, "A", "store")
	return site{store: s, src: filepath.Join(s, "bases", "b1", "src"), target: filepath.Join(s, "bases", "b1", "target")}
}

// siteB lays out an agent: its worktree, and its fork in the store.
func siteB(root string) site {
	s := filepath.Join(root, "B", "store")
	return site{store: s, src: filepath.Join(root, "B", "wt"), target: filepath.Join(s, "agents", "x", "target")}
}

type cargo struct {
	t    testing.TB
	home string
	// plus and flags choose a toolchain and Cargo's unstable flags
	// (a flavor of build).
	plus  string
	flags []string
}

func (c cargo) run(dir, target string, args ...string) string {
	c.t.Helper()
	var all []string
	if c.plus != "" {
		all = append(all, c.plus)
	}
	all = append(append(all, args[0]), c.flags...)
	all = append(all, args[1:]...)
	cmd := exec.Command("cargo", all...)
	cmd.Dir = dir
	cmd.Env = fixture.CargoEnv(os.Environ(), c.home, target)
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("cargo %s in %s: %v\n%s", strings.Join(all, " "), dir, err, out)
	}
	return string(out)
}

func writeTree(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func copyTree(t testing.TB, from, to string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v\n%s", from, to, err, out)
	}
}

// A flavor is a toolchain and Cargo flags the trap workspace is built with.
type flavor struct {
	name  string
	plus  string
	flags []string
}

var (
	stable = flavor{name: "stable"}
	// buildUnits is Cargo's new build-dir layout (build/<pkg>/<hash>/).
	buildUnits = flavor{name: "build-units", plus: "+nightly", flags: []string{"-Zbuild-dir-new-layout"}}
)

// builtBase is the trap workspace built once at A in one flavor, shared by
// the tests (each copies it).
type builtBase struct {
	once sync.Once
	root string
	err  string
}

var (
	builtMu sync.Mutex
	built   = map[string]*builtBase{}
)

// buildCommands are what A and B both run.
var buildCommands = [][]string{{"build", "--workspace", "--all-targets"}}

func buildTraps(c cargo, s site) {
	for _, args := range buildCommands {
		c.run(s.src, s.target, args...)
	}
	c.run(filepath.Join(s.src, "tools"), filepath.Join(s.target, "ferry-ws", "tools"), "build", "--workspace")
}

func trapBase(t *testing.T, f flavor) (site, cargo) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping: builds a Cargo workspace; run without -short")
	}
	fixture.RequireCommands(t)
	if f.plus != "" {
		if out, err := exec.Command("cargo", f.plus, "-V").CombinedOutput(); err != nil {
			t.Skipf("skipping: no cargo %s here (%v: %s)", f.plus, err, bytes.TrimSpace(out))
		}
	}
	builtMu.Lock()
	bb := built[f.name]
	if bb == nil {
		bb = &builtBase{}
		built[f.name] = bb
	}
	builtMu.Unlock()
	c := func(root string) cargo {
		return cargo{t: t, home: filepath.Join(root, "cargo-home"), plus: f.plus, flags: f.flags}
	}
	bb.once.Do(func() {
		root, err := os.MkdirTemp("", "ferry-relocate-")
		if err != nil {
			bb.err = err.Error()
			return
		}
		bb.root = root
		a := siteA(root)
		writeTree(t, a.src, trapFiles)
		buildTraps(c(root), a)
	})
	if bb.err != "" {
		t.Fatal(bb.err)
	}
	return siteA(bb.root), c(bb.root)
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, bb := range built {
		if bb.root != "" {
			os.RemoveAll(bb.root)
		}
	}
	os.Exit(code)
}

// relocated is the outcome of one relocation of the trap workspace.
type relocated struct {
	a, b    site
	plan    *relocate.Plan
	rebuilt []string // fingerprint dirs Cargo wrote at B
	app     string   // what app printed at B
}

// relocateTraps copies the trap workspace built at A (stable cargo) to B,
// plans with A's roots (live or not), applies the plan to B's target,
// builds at B, and checks that Cargo rebuilt exactly Plan.Rebuilds.
func relocateTraps(t *testing.T, live bool) relocated {
	t.Helper()
	return relocateFlavor(t, stable, live)
}

func relocateFlavor(t *testing.T, f flavor, live bool) relocated {
	t.Helper()
	a, c := trapBase(t, f)
	return relocateTree(t, a, c, live, func(b site) { buildTraps(c, b) })
}

// relocateTree copies a's checkout and target to B, plans with a's roots,
// applies the plan to B's target, runs build at B, and checks that Cargo
// rebuilt exactly Plan.Rebuilds and that app shows none of A's paths.
func relocateTree(t *testing.T, a site, c cargo, live bool, build func(b site)) relocated {
	t.Helper()
	b := siteB(t.TempDir())
	copyTree(t, a.src, b.src)
	copyTree(t, a.target, b.target)
	start := time.Now()
	plan, err := relocate.Compute(a.target, relocate.Roots{Store: a.store, Src: a.src}, live)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Compute: %v for %d units, %d removals, %d rebuilds", time.Since(start).Round(time.Millisecond), plan.Units, len(plan.Remove), len(plan.Rebuilds))
	for _, r := range plan.Remove {
		t.Logf("remove %s: %s", r.Path, r.Why)
	}
	if _, err := plan.Apply(b.target); err != nil {
		t.Fatal(err)
	}
	before := fingerprints(t, b.target)
	build(b)
	r := relocated{a: a, b: b, plan: plan, rebuilt: written(t, b.target, before)}
	if !equal(r.rebuilt, plan.Rebuilds) {
		t.Errorf("Cargo rebuilt %d units:\n  %s\nthe plan says %d:\n  %s", len(r.rebuilt), strings.Join(r.rebuilt, "\n  "),
			len(plan.Rebuilds), strings.Join(plan.Rebuilds, "\n  "))
	}
	out, err := exec.Command(filepath.Join(b.target, "debug", "app")).Output()
	if err != nil {
		t.Fatalf("app at B: %v", err)
	}
	r.app = string(out)
	if strings.Contains(r.app, a.store) {
		t.Errorf("app at B shows A's paths:\n%s", r.app)
	}
	return r
}

// fingerprints returns the modification times of every fingerprint hash
// file of target, by fingerprint dir.
func fingerprints(t *testing.T, target string) map[string]string {
	t.Helper()
	l, err := units.List(target)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, u := range l.Units {
		for _, f := range u.Fingerprints {
			out[u.Dir] += f.Name + " " + f.ModTime.String() + ";"
		}
	}
	return out
}

// written returns the fingerprint dirs whose hash files were written since
// before.
func written(t *testing.T, target string, before map[string]string) []string {
	t.Helper()
	var out []string
	for dir, m := range fingerprints(t, target) {
		if before[dir] != m {
			out = append(out, dir)
		}
	}
	sort.Strings(out)
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// line returns app's line for trap name.
func (r relocated) line(t *testing.T, name string) string {
	t.Helper()
	for _, l := range strings.Split(r.app, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	t.Fatalf("app printed no %s line:\n%s", name, r.app)
	return ""
}

// removed reports whether the plan removes a unit of package pkg whose
// fingerprint dir holds a fingerprint whose name starts with prefix.
func (r relocated) removed(t *testing.T, pkg, prefix string) bool {
	t.Helper()
	for _, rm := range r.plan.Remove {
		base := filepath.Base(rm.Path)
		if !strings.HasPrefix(base, pkg+"-") || !strings.Contains(rm.Path, ".fingerprint/") {
			continue
		}
		ents, _ := os.ReadDir(filepath.Join(r.a.target, filepath.FromSlash(rm.Path)))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), prefix) {
				return true
			}
		}
	}
	return false
}

func TestTrapBuildScriptWritesManifestDirIntoCode(t *testing.T) {
	r := relocateTraps(t, true)
	if got, want := r.line(t, "gencode"), filepath.Join(r.b.src, "gencode"); got != want {
		t.Errorf("gencode::DIR at B = %q, want %q", got, want)
	}
	if !r.removed(t, "gencode", "run-") {
		t.Error("the plan keeps gencode's build-script run")
	}
}

func TestTrapRustcEnvPath(t *testing.T) {
	r := relocateTraps(t, true)
	if got, want := r.line(t, "rustcenv"), filepath.Join(r.b.src, "rustcenv"); got != want {
		t.Errorf("rustcenv::DIR at B = %q, want %q", got, want)
	}
	if !r.removed(t, "rustcenv", "run-") {
		t.Error("the plan keeps rustcenv's build-script run")
	}
}

func TestTrapLocalProcMacroReadsManifestDir(t *testing.T) {
	r := relocateTraps(t, true)
	if got, want := r.line(t, "pmuser"), filepath.Join(r.b.src, "pmuser"); got != want {
		t.Errorf("pmuser::HERE at B = %q, want %q", got, want)
	}
	if !r.removed(t, "pmuser", "lib-") {
		t.Error("the plan keeps pmuser, which uses a proc macro reading CARGO_MANIFEST_DIR")
	}
	if r.removed(t, "pmacro", "lib-") {
		t.Error("the plan removes pmacro itself, which records no path")
	}
}

func TestTrapTestBakesInBinaryPath(t *testing.T) {
	r := relocateTraps(t, true)
	_, c := trapBase(t, stable)
	out := c.run(r.b.src, r.b.target, "test", "-p", "app", "--test", "binexe", "--", "--nocapture")
	want := "binexe " + filepath.Join(r.b.target, "debug", "app")
	if !strings.Contains(out, want) {
		t.Errorf("the test at B printed\n%s\nwant a line %q", out, want)
	}
	if !r.removed(t, "app", "test-integration-test-binexe") {
		t.Error("the plan keeps the test using CARGO_BIN_EXE_app")
	}
}

func TestTrapLiveOutDirStays(t *testing.T) {
	r := relocateTraps(t, true)
	if r.removed(t, "liveout", "lib-") || r.removed(t, "liveout", "run-") {
		t.Error("a live plan removes liveout, whose only path leads into the OUT_DIR of the run it depends on")
	}
	if got := r.line(t, "liveout"); got != "7" {
		t.Errorf("liveout::N = %s", got)
	}
	if r.removed(t, "clean", "lib-") {
		t.Error("the plan removes clean, which records no path")
	}
	// Dead, the same path goes (liveout is no registry crate).
	dead := relocateTraps(t, false)
	if !dead.removed(t, "liveout", "lib-") {
		t.Error("a dead plan keeps liveout, whose OUT_DIR path is dead")
	}
}

func TestTrapRunDependingOnRemovedUnit(t *testing.T) {
	r := relocateTraps(t, true)
	if !r.removed(t, "bdep", "lib-") {
		t.Error("the plan keeps bdep, which records its manifest dir")
	}
	if !r.removed(t, "cached", "run-") {
		t.Error("the plan keeps cached's build-script run, which depends on the removed bdep")
	}
	if got, want := r.line(t, "cached"), filepath.Join(r.b.src, "bdep"); got != want {
		t.Errorf("cached::dir() at B = %q, want %q (a run rerun over the base's OUT_DIR)", got, want)
	}
}

func TestTrapNestedWorkspace(t *testing.T) {
	r := relocateTraps(t, true)
	if len(r.plan.Nested) != 1 || r.plan.Nested[0] != "ferry-ws/tools" {
		t.Errorf("Plan.Nested = %v, want [ferry-ws/tools]", r.plan.Nested)
	}
	out, err := exec.Command(filepath.Join(r.b.target, "ferry-ws", "tools", "debug", "tool")).Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "tool " + filepath.Join(r.b.src, "tools", "tool") + " 1\n"; string(out) != want {
		t.Errorf("tool at B printed %q, want %q", out, want)
	}
	kept := false
	for _, d := range r.plan.Rebuilds {
		kept = kept || strings.Contains(d, "ferry-ws/tools/debug/.fingerprint/quiet-")
	}
	if kept {
		t.Error("the plan rebuilds quiet, which records nothing")
	}
}

// registryTrap builds a workspace whose one member uses the registry crate
// name (from Fixture's directory source), relocates it with a dead plan,
// and checks that the crate's compilation stays: it includes from its own
// OUT_DIR, which Cargo tracks relative to the target.
func registryTrap(t *testing.T, name, use string) {
	if testing.Short() {
		t.Skip("skipping: builds a Cargo workspace; run without -short")
	}
	fixture.RequireCommands(t)
	dir, version := registryCrate(t, name)
	src, err := os.ReadFile(filepath.Join(dir, "src", "lib.rs"))
	if err != nil || !bytes.Contains(src, []byte(`include!(concat!(env!("OUT_DIR")`)) {
		t.Skipf("skipping: %s %s in %s does not include! from its OUT_DIR (serde does from 1.0.220 on); nothing to exempt", name, version, fixture.Registry())
	}
	root := t.TempDir()
	a, b := siteA(root), siteB(root)
	writeTree(t, a.src, map[string]string{
		"Cargo.toml":  pkg("user", name+` = "=`+version+`"`),
		"src/main.rs": "fn main() { " + use + " }\n",
		".cargo/config.toml": `[source.crates-io]
replace-with = "debian"
[source.debian]
directory = "` + fixture.Registry() + `"
[net]
offline = true
`,
	})
	c := cargo{t: t, home: filepath.Join(root, "home")}
	c.run(a.src, a.target, "build")
	copyTree(t, a.src, b.src)
	copyTree(t, a.target, b.target)
	plan, err := relocate.Compute(a.target, relocate.Roots{Store: a.store, Src: a.src}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range plan.Remove {
		if strings.Contains(r.Path, "/"+name+"-") {
			t.Errorf("a dead plan removes %s (%s): %s", r.Path, name, r.Why)
		}
	}
	if _, err := plan.Apply(b.target); err != nil {
		t.Fatal(err)
	}
	before := fingerprints(t, b.target)
	c.run(b.src, b.target, "build")
	if got := written(t, b.target, before); !equal(got, plan.Rebuilds) {
		t.Errorf("Cargo rebuilt %v, the plan says %v", got, plan.Rebuilds)
	}
}

// registryCrate finds name's sources in the fixture's registry.
func registryCrate(t *testing.T, name string) (dir, version string) {
	t.Helper()
	ents, err := os.ReadDir(fixture.Registry())
	if err != nil {
		t.Skipf("skipping: no crate sources: %v", err)
	}
	for _, e := range ents {
		if v, ok := strings.CutPrefix(e.Name(), name+"-"); ok && v != "" && v[0] >= '0' && v[0] <= '9' {
			dir, version = filepath.Join(fixture.Registry(), e.Name()), v
		}
	}
	if dir == "" {
		t.Skipf("skipping: %s is not in %s (install its librust-*-dev package)", name, fixture.Registry())
	}
	return dir, version
}

func TestTrapRegistryIncludeFromOutDirCrunchy(t *testing.T) {
	registryTrap(t, "crunchy", `use crunchy::unroll; let mut n = 0; unroll! { for i in 0..4 { n += i; } } println!("{n}");`)
}

func TestTrapRegistryIncludeFromOutDirSerde(t *testing.T) {
	registryTrap(t, "serde", `println!("{}", std::any::type_name::<dyn serde::ser::Error>());`)
}

// TestFixtureRelocates relocates the standard fixture (registry crates with
// build scripts and proc macros, a crate embedding its manifest dir, an
// integration test running the binary, a nested workspace): the binary at B
// prints the marker of B's sources and B's manifest dir, and Cargo
// rebuilds exactly what the plan says.
func TestFixtureRelocates(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: builds the fixture (about 30 s); run without -short")
	}
	fixture.RequireTools(t)
	root := t.TempDir()
	a := siteA(root)
	if _, err := fixture.Generate(a.src, fixture.Options{}); err != nil {
		t.Fatal(err)
	}
	c := cargo{t: t, home: filepath.Join(root, "home")}
	build := func(s site) {
		c.run(s.src, s.target, "build", "--workspace", "--all-targets")
		c.run(filepath.Join(s.src, fixture.ToolsDir), filepath.Join(s.target, "ferry-ws", fixture.ToolsDir), "build")
	}
	build(a)
	for _, live := range []bool{true, false} {
		r := relocateTree(t, a, c, live, build)
		want, err := fixture.ExpectedMarker(r.b.src)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(r.app); got != want {
			t.Errorf("live %v: app at B printed %q, want %q", live, got, want)
		}
		out, err := exec.Command(filepath.Join(r.b.target, "debug", fixture.BinName), fixture.ManifestDirFlag).Output()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strings.TrimSpace(string(out)), filepath.Join(r.b.src, fixture.CrateDir(fixture.ManifestCrate)); got != want {
			t.Errorf("live %v: app --manifest-dir at B = %q, want %q", live, got, want)
		}
		out2 := c.run(r.b.src, r.b.target, "test", "-p", fixture.AppCrate, "--test", "markers")
		if !strings.Contains(out2, "test result: ok") {
			t.Errorf("live %v: the integration test at B:\n%s", live, out2)
		}
		t.Logf("live %v: %d of %d units rebuilt", live, len(r.plan.Rebuilds), r.plan.Units)
	}
}

// BenchmarkComputeLarge plans the relocation of the fixture with 100 extra
// crates, built once (a few minutes): what a base without the namespace
// pays before writing base.json, and a spawn for a namespace base.
func BenchmarkComputeLarge(b *testing.B) {
	fixture.RequireTools(b)
	root := b.TempDir()
	a := siteA(root)
	if _, err := fixture.Generate(a.src, fixture.Options{ExtraCrates: 100, ModulesPerCrate: 5}); err != nil {
		b.Fatal(err)
	}
	c := cargo{t: b, home: filepath.Join(root, "home")}
	c.run(a.src, a.target, "build", "--workspace", "--all-targets")
	for _, live := range []bool{true, false} {
		b.Run(fmt.Sprintf("live=%v", live), func(b *testing.B) {
			var p *relocate.Plan
			for b.Loop() {
				var err error
				if p, err = relocate.Compute(a.target, relocate.Roots{Store: a.store, Src: a.src}, live); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(p.Units), "units")
			b.ReportMetric(float64(len(p.Rebuilds)), "rebuilds")
		})
	}
}

// TestTrapsInTheBuildUnitsLayout relocates the trap workspace built in
// Cargo's new build-dir layout (nightly, -Zbuild-dir-new-layout): every
// trap shows B's paths, and Cargo rebuilds exactly what the plan says.
func TestTrapsInTheBuildUnitsLayout(t *testing.T) {
	r := relocateFlavor(t, buildUnits, true)
	for _, name := range []string{"gencode", "rustcenv", "pmuser", "cached"} {
		if got := r.line(t, name); !strings.HasPrefix(got, r.b.src+"/") {
			t.Errorf("%s at B = %q, want a path in %s", name, got, r.b.src)
		}
	}
	if r.plan.Units == 0 || len(r.plan.Rebuilds) == r.plan.Units {
		t.Errorf("the plan rebuilds %d of %d units", len(r.plan.Rebuilds), r.plan.Units)
	}
}

// TestTrapRebuildsOnlyTrappedUnits pins what Cargo rebuilds at B, by
// package: the trapped units and what depends on them, nothing else (the
// other trap tests check each trap's own unit; this one that the plan
// does not remove more than it must, which Cargo would rebuild just the
// same).
func TestTrapRebuildsOnlyTrappedUnits(t *testing.T) {
	r := relocateTraps(t, true)
	got := map[string]int{}
	for _, d := range r.rebuilt {
		name := filepath.Base(d)
		got[name[:len(name)-17]]++
	}
	want := map[string]int{
		"app":      3, // bin, its test, the binexe test (CARGO_BIN_EXE_app)
		"bdep":     2, // lib and its test: CARGO_MANIFEST_DIR
		"cached":   4, // its build script (bdep), the run (removed whole), lib and test
		"gencode":  3, // the run (generated code), lib and test
		"pmuser":   2, // lib and test: R7
		"rustcenv": 3, // the run (rustc-env), lib and test
		"tool":     1, // the nested workspace's binary
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rebuilt by package: %v, want %v", got, want)
	}
}
