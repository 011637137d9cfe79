package demand

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Units from Cargo 1.95's compiler-artifact messages: a library, whose
// hashed output names its fingerprint directory; a binary, named by its
// uplifted file only; a build script; a registry crate; and what is not an
// artifact message.
func TestArtifactUnits(t *testing.T) {
	const target = "/s/mnt/target"
	for _, tt := range []struct {
		line                string
		name, kind, version string
		dir                 string
		fresh, test         bool
		features            []string
	}{
		{`{"reason":"compiler-artifact","package_id":"path+file:///s/mnt/src/crates/manifest#0.1.0","manifest_path":"/s/mnt/src/crates/manifest/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"manifest","src_path":"/s/mnt/src/crates/manifest/src/lib.rs","edition":"2021","doc":true,"doctest":true,"test":true},"profile":{"opt_level":"0","debuginfo":2,"debug_assertions":true,"overflow_checks":true,"test":false},"features":["tested"],"filenames":["/s/mnt/target/debug/deps/libmanifest-aee573093d9831f6.rlib","/s/mnt/target/debug/deps/libmanifest-aee573093d9831f6.rmeta"],"executable":null,"fresh":false}`,
			"manifest", "lib", "0.1.0", "debug/.fingerprint/manifest-aee573093d9831f6", false, false, []string{"tested"}},
		{`{"reason":"compiler-artifact","package_id":"path+file:///s/mnt/src/crates/app#0.1.0","target":{"kind":["bin"],"name":"app"},"profile":{"opt_level":"3","debuginfo":0,"test":false},"features":[],"filenames":["/s/mnt/target/release/app"],"executable":"/s/mnt/target/release/app","fresh":true}`,
			"app", "bin", "0.1.0", "", true, false, []string{}},
		{`{"reason":"compiler-artifact","package_id":"path+file:///s/mnt/src/crates/app#0.1.0","target":{"kind":["bin"],"name":"app"},"profile":{"opt_level":"0","debuginfo":2,"test":true},"features":[],"filenames":["/s/mnt/target/debug/deps/app-05f005b2cbc47e91"],"fresh":false}`,
			"app", "bin", "0.1.0", "debug/.fingerprint/app-05f005b2cbc47e91", false, true, []string{}},
		{`{"reason":"compiler-artifact","package_id":"path+file:///s/mnt/src/crates/codegen#0.1.0","target":{"kind":["custom-build"],"name":"build-script-build"},"profile":{"opt_level":"0","debuginfo":0,"test":false},"features":[],"filenames":["/s/mnt/target/debug/build/codegen-0123456789abcdef/build-script-build","/s/mnt/target/debug/build/codegen-0123456789abcdef/build_script_build-0123456789abcdef"],"fresh":false}`,
			"codegen", "custom-build", "0.1.0", "debug/.fingerprint/codegen-0123456789abcdef", false, false, []string{}},
		{`{"reason":"compiler-artifact","package_id":"registry+https://example.invalid/index#serde@1.0.188","target":{"kind":["lib"],"name":"serde"},"profile":{"opt_level":"0","debuginfo":2,"test":false},"features":["default","std"],"filenames":["/s/mnt/target/x86_64-unknown-linux-gnu/debug/deps/libserde-fedcba9876543210.rmeta"],"fresh":true}`,
			"serde", "lib", "1.0.188", "x86_64-unknown-linux-gnu/debug/.fingerprint/serde-fedcba9876543210", true, false, []string{"default", "std"}},
	} {
		a, ok := ParseArtifact([]byte(tt.line))
		if !ok {
			t.Fatalf("not an artifact: %s", tt.line)
		}
		u := a.Unit(target)
		if u.Name != tt.name || u.Kind != tt.kind || u.Package != tt.name+" "+tt.version || u.Dir != tt.dir || a.Fresh != tt.fresh || u.Test != tt.test || len(u.Feature) != len(tt.features) {
			t.Errorf("%s: unit %+v (fresh %t)", tt.name, u, a.Fresh)
		}
	}
	for _, l := range []string{`{"reason":"build-finished","success":true}`, `{"reason":"compiler-message"}`, "   Compiling app", ""} {
		if _, ok := ParseArtifact([]byte(l)); ok {
			t.Errorf("%q read as an artifact", l)
		}
	}
}

// A unit named by uplifted files only is found in the fork by its
// fingerprint written during the build, and, among several (a proc macro
// built as a root and for the host), by the hashed output the uplifted
// file is a hard link of.
func TestFindDir(t *testing.T) {
	fork := t.TempDir()
	mk := func(rel string) string {
		p := filepath.Join(fork, filepath.FromSlash(rel))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	since := time.Now().Add(-time.Second)
	old := time.Now().Add(-time.Hour)
	// app: two units of the package, one written long before the build.
	mk("release/.fingerprint/app-1111111111111111/bin-app")
	os.Chtimes(filepath.Join(fork, "release/.fingerprint/app-1111111111111111/bin-app"), old, old)
	mk("release/.fingerprint/app-2222222222222222/bin-app")
	u := Unit{Name: "app", Target: "app"}
	if got := FindDir(fork, []string{"release/app"}, u, since); got != "release/.fingerprint/app-2222222222222222" {
		t.Errorf("app: %q", got)
	}
	// macros: both written in the build; the uplifted file names one.
	mk("release/.fingerprint/macros-3333333333333333/lib-macros")
	mk("release/.fingerprint/macros-4444444444444444/lib-macros")
	mk("release/deps/libmacros-3333333333333333.so")
	root := mk("release/deps/libmacros-4444444444444444.so")
	if err := os.Link(root, filepath.Join(fork, "release/libmacros.so")); err != nil {
		t.Fatal(err)
	}
	m := Unit{Name: "macros", Target: "macros"}
	if got := FindDir(fork, []string{"release/libmacros.so"}, m, since); got != "release/.fingerprint/macros-4444444444444444" {
		t.Errorf("macros: %q", got)
	}
	// Nothing written since: no telling.
	if got := FindDir(fork, []string{"release/app"}, u, time.Now().Add(time.Hour)); got != "" {
		t.Errorf("nothing written since: %q", got)
	}
}
