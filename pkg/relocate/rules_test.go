package relocate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A synthetic target in Cargo 1.95's legacy layout, for the rules that
// read clearest on a few files. The trap tests (traps_test.go) check the
// same rules against real cargo.
type synth struct {
	t                  *testing.T
	store, src, target string
	next               uint64
}

func newSynth(t *testing.T) *synth {
	root := t.TempDir()
	s := &synth{t: t, store: filepath.Join(root, "store")}
	s.src = filepath.Join(s.store, "bases", "b1", "src")
	s.target = filepath.Join(s.store, "bases", "b1", "target")
	s.write("debug/.cargo-lock", "")
	return s
}

func (s *synth) write(rel, body string) {
	s.t.Helper()
	p := filepath.Join(s.target, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// unit is one synthetic unit.
type unit struct {
	pkg, name, hash string
	fp              uint64
}

func (u unit) dir() string { return "debug/.fingerprint/" + u.pkg + "-" + u.hash }

// unit adds a fingerprint dir holding fingerprint name (lib-x, run-build-script-build-script-build, …)
// that depends on deps.
func (s *synth) unit(pkg, name string, deps ...unit) unit {
	s.next++
	u := unit{pkg: pkg, name: name, hash: fmt.Sprintf("%016x", 0xa0000+s.next), fp: 0x1234567800000000 + s.next*7919}
	var ds []string
	for _, d := range deps {
		ds = append(ds, fmt.Sprintf(`[1,%q,false,%d]`, d.pkg, d.fp))
	}
	s.write(u.dir()+"/"+name, hashHex(u.fp))
	s.write(u.dir()+"/"+name+".json", `{"rustc":1,"deps":[`+strings.Join(ds, ",")+`],"local":[]}`)
	if !strings.HasPrefix(name, "run-") {
		s.write(u.dir()+"/dep-"+name, string(encodeDepInfo(nil, nil)))
	}
	return u
}

// compile adds a compilation with a rustc dep-info naming inputs and env.
func (s *synth) compile(pkg string, inputs []string, env []string, deps ...unit) unit {
	u := s.unit(pkg, "lib-"+pkg, deps...)
	var b strings.Builder
	out := filepath.Join(s.target, "debug", "deps", pkg+"-"+u.hash+".d")
	fmt.Fprintf(&b, "%s: %s\n\n", out, strings.Join(inputs, " "))
	for _, in := range inputs {
		fmt.Fprintf(&b, "%s:\n", in)
	}
	for _, e := range env {
		fmt.Fprintf(&b, "# env-dep:%s\n", e)
	}
	s.write("debug/deps/"+pkg+"-"+u.hash+".d", b.String())
	return u
}

// run adds a build script's run whose output is directives, with files
// written into its OUT_DIR.
func (s *synth) run(pkg string, directives string, out map[string]string, deps ...unit) unit {
	u := s.unit(pkg, "run-build-script-build-script-build", deps...)
	dir := "debug/build/" + pkg + "-" + u.hash
	s.write(dir+"/root-output", s.outDir(u))
	s.write(dir+"/output", directives)
	s.write(dir+"/out/.keep", "")
	for name, body := range out {
		s.write(dir+"/out/"+name, body)
	}
	return u
}

// outDir is run u's OUT_DIR as the base's build saw it.
func (s *synth) outDir(u unit) string {
	return filepath.Join(s.target, "debug", "build", u.pkg+"-"+u.hash, "out")
}

func (s *synth) plan(live bool) *Plan {
	s.t.Helper()
	p, err := Compute(s.target, Roots{Store: s.store, GitDir: filepath.Join(s.t.TempDir(), "repo", ".git", "worktrees", "b1"), Src: s.src}, live)
	if err != nil {
		s.t.Fatal(err)
	}
	return p
}

func removes(p *Plan, u unit) bool {
	for _, r := range p.Remove {
		if r.Path == u.dir() {
			return true
		}
	}
	return false
}

func encodeDepInfo(paths []string, env []string) []byte {
	var b bytes.Buffer
	u32 := func(v int) { binary.Write(&b, binary.LittleEndian, uint32(v)) }
	str := func(s string) { u32(len(s)); b.WriteString(s) }
	u32(1)
	b.WriteByte(0xff)
	b.WriteByte(encodedDepInfoVersion)
	u32(len(paths))
	for _, p := range paths {
		b.WriteByte(1)
		str(p)
		b.WriteByte(0)
	}
	u32(len(env))
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		str(k)
		b.WriteByte(1)
		str(v)
	}
	return b.Bytes()
}

func TestNeedleIsTheLongestPlainSuffix(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/home/u/.cache/ferry/repo-1a2b", "/home/u/.cache/ferry/repo-1a2b"},
		{"/Users/Jane Doe/Library/Application Support/ferry/r-1", "Support/ferry/r-1"},
		{"/data/åsa/store", "sa/store"},
	} {
		if got := plainSuffix(c.in); got != c.want {
			t.Errorf("plainSuffix(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestStoreWithoutPlainSuffixEmptiesTheFork(t *testing.T) {
	fork := t.TempDir()
	os.MkdirAll(filepath.Join(fork, "debug", "deps"), 0o755)
	os.WriteFile(filepath.Join(fork, "CACHEDIR.TAG"), nil, 0o644)
	p, err := Compute(fork, Roots{Store: "/srv/ä/st"}, true) // plain suffix "/st": 3 bytes
	if err != nil {
		t.Fatal(err)
	}
	if !p.Empty || p.EmptyWhy == "" {
		t.Fatalf("plan for a store without an 8-byte plain suffix: Empty %v (%q)", p.Empty, p.EmptyWhy)
	}
	a, err := p.Apply(fork)
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(fork); len(ents) != 0 || !a.Emptied {
		t.Errorf("after Apply the fork holds %d entries (Emptied %v)", len(ents), a.Emptied)
	}
	// Eight plain bytes are enough.
	if p, _ := Compute(fork, Roots{Store: "/srv/ä/12345678"}, true); p.Empty {
		t.Errorf("a store with an 8-byte plain suffix empties the fork: %s", p.EmptyWhy)
	}
}

func TestNeedleSpanningChunkBoundaryIsFound(t *testing.T) {
	for _, at := range []int{chunk - 3, chunk - restMax + 1, 2*chunk - 40, chunk} {
		s := newSynth(t)
		path := filepath.Join(s.src, "x", "build.rs")
		data := bytes.Repeat([]byte{'a'}, 3*chunk)
		copy(data[at-1:], " "+path+" ")
		r := s.run("big", "", map[string]string{"blob.bin": string(data)})
		if p := s.plan(true); !removes(p, r) {
			t.Errorf("a checkout path at byte %d (chunk %d) of an OUT_DIR file: not found", at, chunk)
		}
	}
	// And the same file without it is kept.
	s := newSynth(t)
	r := s.run("big", "", map[string]string{"blob.bin": strings.Repeat("a", 3*chunk)})
	if p := s.plan(true); removes(p, r) {
		t.Error("a run whose OUT_DIR holds no path is removed")
	}
}

func TestScannerHoldsAChunkAtATime(t *testing.T) {
	s := newScanner()
	n := needle{text: []byte("/some/store/dir")}
	data := strings.Repeat("x", 5*chunk) + "/some/store/dir/bases/b/src/f"
	found := 0
	if err := s.hits(strings.NewReader(data), []needle{n}, func(h hit) bool { found++; return h.rest == "/bases/b/src/f" }); err != nil {
		t.Fatal(err)
	}
	if found != 1 || len(s.buf) > chunk+2*restMax {
		t.Errorf("found %d, buffer %d bytes for a %d-byte input", found, len(s.buf), len(data))
	}
}

func TestCheckoutAndTargetAreToldByWhatFollows(t *testing.T) {
	s := newSynth(t)
	run := s.run("gen", "", map[string]string{"n.rs": "pub const N: u32 = 1;"})
	viaLink := filepath.Join(s.src, ".ferry-target", "debug", "build", "gen-"+run.hash, "out")
	inOut := s.compile("gen", []string{"src/lib.rs", filepath.Join(viaLink, "n.rs")}, []string{"OUT_DIR=" + viaLink}, run)
	inSrc := s.compile("src", []string{"src/lib.rs"}, []string{"HERE=" + filepath.Join(s.src, "src")})
	bin := s.compile("bins", []string{"tests/t.rs"}, []string{"CARGO_BIN_EXE_app=" + filepath.Join(s.target, "debug", "app")})
	storeFile := s.compile("sf", []string{"src/lib.rs"}, []string{"X=" + filepath.Join(s.store, "store.json")})
	other := s.compile("other", []string{"src/lib.rs"}, []string{"X=" + s.store + "x/bases/b1/src"})
	p := s.plan(true)
	if removes(p, inOut) {
		t.Error("a path through <src>/.ferry-target into a live OUT_DIR the unit depends on is removed: .ferry-target is the target")
	}
	for _, u := range []unit{inSrc, bin, storeFile} {
		if !removes(p, u) {
			t.Errorf("%s is kept", u.pkg)
		}
	}
	if removes(p, other) {
		t.Error("a path that only starts like the store dir (its name goes on) is taken for it")
	}
}

func TestGitDirPathsAreOld(t *testing.T) {
	s := newSynth(t)
	gitDir := filepath.Join(t.TempDir(), "repo", ".git", "worktrees", "b1")
	run := s.run("ver", "cargo:rerun-if-changed="+filepath.Join(gitDir, "HEAD")+"\n", nil)
	p, err := Compute(s.target, Roots{Store: s.store, GitDir: gitDir, Src: s.src}, true)
	if err != nil {
		t.Fatal(err)
	}
	if !removes(p, run) {
		t.Error("a run watching the base checkout's git dir is kept")
	}
}

func TestDeadPaths(t *testing.T) {
	s := newSynth(t)
	run := s.run("gen", "cargo:rustc-env=GEN={ROOT}/x\n", nil)
	// the directive names the exact root-output string: exempt.
	s.write("debug/build/gen-"+run.hash+"/output", "cargo:rustc-env=GEN="+s.outDir(run)+"/x\ncargo:rustc-link-search=native="+s.outDir(run)+"\n")
	linked := s.run("linked", "", nil)
	s.write("debug/build/linked-"+linked.hash+"/output", "cargo:rustc-link-arg=-Wl,-rpath,"+s.outDir(linked)+"\n")
	local := s.compile("gen", []string{"src/lib.rs", filepath.Join(s.outDir(run), "g.rs")}, []string{"OUT_DIR=" + s.outDir(run)}, run)
	registryRun := s.run("reg", "", nil)
	registry := s.compile("reg", []string{"/registry/reg-1.0.0/src/lib.rs", filepath.Join(s.outDir(registryRun), "g.rs")},
		[]string{"OUT_DIR=" + s.outDir(registryRun)}, registryRun)
	otherOut := s.compile("reg2", []string{"/registry/reg2-1.0.0/src/lib.rs", filepath.Join(s.outDir(run), "g.rs")}, nil, run)
	nsTarget := s.compile("ns", []string{"/registry/ns-1.0.0/src/lib.rs"}, []string{"P=" + filepath.Join(s.store, "mnt", "target", "debug", "x")})

	p := s.plan(false)
	if removes(p, run) {
		t.Error("a run whose directives name only its own root-output (not as link arguments) is removed")
	}
	if !removes(p, linked) {
		t.Error("a run passing its OUT_DIR as a link argument is kept")
	}
	if !removes(p, local) {
		t.Error("a dead plan keeps a local crate recording its OUT_DIR")
	}
	if removes(p, registry) {
		t.Error("a dead plan removes a registry crate including from its own OUT_DIR")
	}
	if !removes(p, otherOut) {
		t.Error("a dead plan keeps a registry crate including from another package's OUT_DIR")
	}
	if !removes(p, nsTarget) {
		t.Error("a path into a namespace base's mnt/target is kept")
	}
	if live := s.plan(true); live.Own != "bases/b1/target" || removes(live, local) || !removes(live, nsTarget) {
		t.Errorf("live: local crate removed %v (want kept), mnt/target path removed %v (want removed)", removes(live, local), removes(live, nsTarget))
	}
}

func TestRemovedUnitTakesItsDependentsAndRunsWhole(t *testing.T) {
	s := newSynth(t)
	old := s.compile("bdep", []string{"src/lib.rs"}, []string{"D=" + s.src})
	script := s.compile("cached", []string{"build.rs"}, nil, old)
	run := s.run("cached", "", map[string]string{"x.hex": "abcd"}, script)
	lib := s.compile("cached", []string{"src/lib.rs"}, nil, run)
	clean := s.compile("clean", []string{"src/lib.rs"}, nil)
	p := s.plan(true)
	if !removes(p, old) || removes(p, script) || removes(p, lib) || removes(p, clean) {
		t.Errorf("removed: old %v (want true), build script %v, lib %v, clean %v (want false)", removes(p, old), removes(p, script), removes(p, lib), removes(p, clean))
	}
	whole := 0
	for _, r := range p.Remove {
		if r.Path == run.dir() || r.Path == "debug/build/cached-"+run.hash {
			whole++
		}
	}
	if whole != 2 {
		t.Errorf("the run depending on a removed unit is removed with %d of its 2 paths: %v", whole, p.Remove)
	}
	want := []string{old.dir(), script.dir(), run.dir(), lib.dir()}
	if got := strings.Join(p.Rebuilds, " "); len(p.Rebuilds) != 4 || strings.Contains(got, clean.dir()) {
		t.Errorf("Rebuilds = %v, want %v", p.Rebuilds, want)
	}
	if _, err := p.Apply(s.target); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{old.dir(), run.dir(), "debug/build/cached-" + run.hash} {
		if _, err := os.Lstat(filepath.Join(s.target, rel)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there after Apply", rel)
		}
	}
	for _, rel := range []string{script.dir(), lib.dir(), clean.dir(), "debug/deps/bdep-" + old.hash + ".d"} {
		if _, err := os.Lstat(filepath.Join(s.target, rel)); err != nil {
			t.Errorf("%s is gone after Apply", rel)
		}
	}
}

func TestWhatCannotBeReadOrParsedIsRemoved(t *testing.T) {
	s := newSynth(t)
	badJSON := s.compile("j", []string{"src/lib.rs"}, nil)
	s.write(badJSON.dir()+"/lib-j.json", `{"deps":[[1,"x",false]]}`)
	badDep := s.compile("d", []string{"src/lib.rs"}, nil)
	s.write(badDep.dir()+"/dep-lib-d", "\x01\x00\x00\x00\x00src/lib.rs") // the format before 1.95's marker
	noD := s.compile("n", []string{"src/lib.rs"}, nil)
	os.Remove(filepath.Join(s.target, "debug", "deps", "n-"+noD.hash+".d"))
	badHash := s.compile("h", []string{"src/lib.rs"}, nil)
	s.write(badHash.dir()+"/lib-h", "not a hash")
	noRoot := s.run("r", "", nil)
	os.Remove(filepath.Join(s.target, "debug", "build", "r-"+noRoot.hash, "root-output"))
	good := s.compile("g", []string{"src/lib.rs"}, nil)
	p := s.plan(true)
	for _, u := range []unit{badJSON, badDep, noD, badHash, noRoot} {
		if !removes(p, u) {
			t.Errorf("%s is kept", u.pkg)
		}
	}
	if removes(p, good) {
		t.Error("a readable unit recording nothing is removed")
	}
}

func TestEncodedDepInfoPathsAreRead(t *testing.T) {
	s := newSynth(t)
	u := s.compile("shared", []string{"src/lib.rs"}, nil)
	s.write(u.dir()+"/dep-lib-shared", string(encodeDepInfo([]string{"src/lib.rs", filepath.Join(s.src, "shared", "data.txt")}, nil)))
	if p := s.plan(true); !removes(p, u) {
		t.Error("a unit whose Cargo dep-info names a file of the base checkout by absolute path is kept")
	}
}

// procMacro adds a proc macro whose library holds lib and whose sources
// are sources (relative to the base checkout, or absolute), and a user.
func (s *synth) procMacro(pkg string, sources map[string]string, lib string) (macro, user unit) {
	var inputs []string
	for name, body := range sources {
		inputs = append(inputs, name)
		if !filepath.IsAbs(name) {
			name = filepath.Join(s.src, name)
		}
		os.MkdirAll(filepath.Dir(name), 0o755)
		os.WriteFile(name, []byte(body), 0o644)
	}
	macro = s.compile(pkg, inputs, nil)
	s.write("debug/deps/lib"+strings.ReplaceAll(pkg, "-", "_")+"-"+macro.hash+".so", "\x7fELF"+lib)
	user = s.compile(pkg+"-user", []string{"src/lib.rs"}, nil, macro)
	return macro, user
}

func TestRegistryProcMacroRule(t *testing.T) {
	s := newSynth(t)
	reg := t.TempDir()
	src := func(name string) map[string]string {
		return map[string]string{filepath.Join(reg, name, "src", "lib.rs"): "pub fn m() {}"}
	}
	_, embeds := s.procMacro("embed", src("embed-8.0.0"), "\x00CARGO_MANIFEST_DIR\x00")
	_, plain := s.procMacro("derive", src("derive-1.0.0"), "\x00RUST_BACKTRACE\x00")
	_, checked := s.procMacro("document-features", src("document-features-0.2.12"), "CARGO_MANIFEST_DIR")
	_, unchecked := s.procMacro("xflags-macros", src("xflags-macros-0.3.3"), "CARGO_MANIFEST_DIR")
	_, dynamic := s.procMacro("dyn", map[string]string{filepath.Join(reg, "dyn-1.0.0", "src", "lib.rs"): `std::env::current_dir()`}, "")
	p := s.plan(true)
	if !removes(p, embeds) || !removes(p, unchecked) {
		t.Errorf("users of registry proc macros naming CARGO_MANIFEST_DIR kept: embed %v, xflags-macros 0.3.3 %v", !removes(p, embeds), !removes(p, unchecked))
	}
	if removes(p, plain) || removes(p, checked) || removes(p, dynamic) {
		t.Errorf("removed: users of a registry proc macro naming no path variable %v, of document-features 0.2.12 %v, of a registry macro using only the working directory %v (R7 reads registry macros' names only)",
			removes(p, plain), removes(p, checked), removes(p, dynamic))
	}
}

func TestLocalProcMacroRule(t *testing.T) {
	for _, c := range []struct {
		src   string
		reads bool
	}{
		{`fn f() -> String { std::env::var("CARGO_MANIFEST_DIR").unwrap() }`, true},
		{`fn f() { let _ = std::env::current_dir(); }`, true},
		{`fn f() { std::process::Command::new("git").arg("rev-parse").output().unwrap(); }`, true},
		{`fn f(k: &str) -> String { std::env::var(k).unwrap() }`, true},
		{`fn f() -> Vec<(String, String)> { std::env::vars().collect() }`, true},
		{`fn f() -> String { std::env::var("NAME_OF_A_FLAG").unwrap_or_default() }`, false},
		{`fn f() -> String { std::env::var(r"LEVEL").unwrap_or_default() }`, false},
		{`fn f() -> u32 { 1 }`, false},
	} {
		s := newSynth(t)
		_, user := s.procMacro("m", map[string]string{"m/src/lib.rs": c.src}, "")
		if got := removes(s.plan(true), user); got != c.reads {
			t.Errorf("a local proc macro with %s: its user removed %v, want %v", c.src, got, c.reads)
		}
	}
	// Sources that cannot be read count.
	s := newSynth(t)
	_, user := s.procMacro("m", map[string]string{"m/src/lib.rs": "fn f() {}"}, "")
	os.Remove(filepath.Join(s.src, "m", "src", "lib.rs"))
	if !removes(s.plan(true), user) {
		t.Error("the user of a local proc macro whose sources cannot be read is kept")
	}
}

func TestSaveLoad(t *testing.T) {
	s := newSynth(t)
	s.compile("bdep", []string{"src/lib.rs"}, []string{"D=" + s.src})
	p := s.plan(true)
	file := filepath.Join(t.TempDir(), "relocation.json")
	if err := Save(file, p); err != nil {
		t.Fatal(err)
	}
	q, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Remove) != 1 || q.Remove[0] != p.Remove[0] || q.Roots != p.Roots || !q.Live {
		t.Errorf("loaded %+v, saved %+v", q, p)
	}
	p.Version = Version + 1
	Save(file, p)
	if _, err := Load(file); !errors.Is(err, ErrStale) {
		t.Errorf("Load of another version's plan: %v, want ErrStale", err)
	}
}

func TestApplyStaysInsideTheFork(t *testing.T) {
	fork := t.TempDir()
	outside := t.TempDir()
	os.MkdirAll(filepath.Join(outside, ".fingerprint", "x-0000000000000001"), 0o755)
	os.MkdirAll(filepath.Join(fork, "keep"), 0o755)
	os.Symlink(outside, filepath.Join(fork, "debug"))
	p := &Plan{Version: Version, Remove: []Removal{{Path: "debug/.fingerprint/x-0000000000000001"}, {Path: "../keep"}}}
	if _, err := p.Apply(fork); err == nil {
		t.Error("Apply removed through a symlink or out of the fork without an error")
	}
	if _, err := os.Stat(filepath.Join(outside, ".fingerprint", "x-0000000000000001")); err != nil {
		t.Errorf("Apply removed a path outside the fork: %v", err)
	}
}

func TestEveryHitCounts(t *testing.T) {
	s := newSynth(t)
	r := s.run("gen", "", nil)
	// A generated file naming its own (live) OUT_DIR thousands of times,
	// then the checkout once.
	body := strings.Repeat("include!(\""+s.outDir(r)+"/part.rs\");\n", 5000) + "const SRC: &str = \"" + s.src + "\";\n"
	s.write("debug/build/gen-"+r.hash+"/out/gen.rs", body)
	if p := s.plan(true); !removes(p, r) {
		t.Error("a checkout path after thousands of allowed OUT_DIR paths is not seen")
	}
}

func TestLocalProcMacroHelperCrateCounts(t *testing.T) {
	s := newSynth(t)
	os.MkdirAll(filepath.Join(s.src, "helper", "src"), 0o755)
	os.WriteFile(filepath.Join(s.src, "helper", "src", "lib.rs"), []byte("pub fn root() -> std::path::PathBuf { std::env::current_dir().unwrap() }"), 0o644)
	helper := s.compile("helper", []string{"helper/src/lib.rs"}, nil)
	os.MkdirAll(filepath.Join(s.src, "m", "src"), 0o755)
	os.WriteFile(filepath.Join(s.src, "m", "src", "lib.rs"), []byte("fn f() { helper::root(); }"), 0o644)
	macro := s.compile("m", []string{"m/src/lib.rs"}, nil, helper)
	s.write("debug/deps/libm-"+macro.hash+".so", "\x7fELF")
	user := s.compile("user", []string{"src/lib.rs"}, nil, macro)
	if !removes(s.plan(true), user) {
		t.Error("the user of a local proc macro whose local helper crate uses the working directory is kept")
	}
}

func TestTargetBuiltElsewhereEmptiesTheFork(t *testing.T) {
	s := newSynth(t)
	r := s.run("gen", "", nil)
	s.write("debug/build/gen-"+r.hash+"/root-output", "/elsewhere/target/debug/build/gen-"+r.hash+"/out")
	if p := s.plan(true); !p.Empty || !strings.Contains(p.EmptyWhy, "/elsewhere/") {
		t.Errorf("a target whose runs' OUT_DIRs lie outside Roots.Store: Empty %v (%q)", p.Empty, p.EmptyWhy)
	}
	s2 := newSynth(t)
	s2.run("gen", "", nil)
	if p := s2.plan(true); p.Empty {
		t.Errorf("a target built under Roots.Store is emptied: %s", p.EmptyWhy)
	}
}
