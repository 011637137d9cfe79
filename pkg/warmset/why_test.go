package warmset

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/record/demand"
)

func write(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fp is a fingerprint file's JSON with the fields Explain compares.
func fp(features string, profile int, deps string) string {
	return `{"rustc":1,"features":"` + features + `","declared_features":"[]","target":7,"profile":` + strconv.Itoa(profile) +
		`,"path":9,"deps":[` + deps + `],"local":[],"rustflags":[],"config":3,"compile_kind":0}`
}

// A unit the base does not hold is explained by the closest unit of the
// same package and target the base does: another feature set, another
// profile; a unit whose recorded fields all agree (clippy's, built by its
// driver) is passed over for one that differs by what is recorded.
func TestExplainNewUnits(t *testing.T) {
	root := t.TempDir()
	tr := Trees{Fork: filepath.Join(root, "fork"), Base: filepath.Join(root, "base")}
	// manifest: the base built it with the feature on.
	write(t, tr.Base, "debug/.fingerprint/manifest-1111111111111111/lib-manifest.json", fp(`[\"tested\"]`, 5, ""))
	write(t, tr.Fork, "debug/.fingerprint/manifest-2222222222222222/lib-manifest.json", fp(`[]`, 5, ""))
	// a proc macro: the base's clippy unit agrees in every recorded field,
	// its rustc unit was built with the members' profile.
	write(t, tr.Base, "debug/.fingerprint/derive-3333333333333333/lib-derive.json", fp(`[]`, 6, ""))
	write(t, tr.Base, "debug/.fingerprint/derive-4444444444444444/lib-derive.json", fp(`[]`, 5, ""))
	write(t, tr.Fork, "debug/.fingerprint/derive-5555555555555555/lib-derive.json", fp(`[]`, 6, ""))
	// app: only its dependency differs.
	write(t, tr.Base, "debug/.fingerprint/app-6666666666666666/bin-app.json", fp(`[]`, 5, `[1,"manifest",false,10]`))
	write(t, tr.Fork, "debug/.fingerprint/app-7777777777777777/bin-app.json", fp(`[]`, 5, `[1,"manifest",false,11]`))
	// release: a profile the base never built.
	write(t, tr.Fork, "release/.fingerprint/app-8888888888888888/bin-app.json", fp(`[]`, 8, ""))

	b := &demand.LastBuild{Units: []demand.Unit{
		{Name: "manifest", Kind: "lib", Target: "manifest", Dir: "debug/.fingerprint/manifest-2222222222222222", New: true},
		{Name: "derive", Kind: "proc-macro", Target: "derive", Dir: "debug/.fingerprint/derive-5555555555555555", New: true},
		{Name: "app", Kind: "bin", Target: "app", Dir: "debug/.fingerprint/app-7777777777777777", New: true},
		{Name: "app", Kind: "bin", Target: "app", Dir: "release/.fingerprint/app-8888888888888888", New: true, Opt: "3"},
		{Name: "app", Kind: "bin", Target: "app"},
	}}
	got := Explain(b, tr)
	for i, want := range []struct{ kind, detail string }{
		{ReasonFeatures, "features differ: the base built it with [tested], this build with none"},
		{ReasonProfile, "profile settings differ"},
		{ReasonDependency, "dependencies differ from the base's: manifest"},
		{ReasonProfile, "the base holds no build in release"},
		{ReasonUnknown, "uplifted file only"},
	} {
		if got[i].Kind != want.kind || !strings.Contains(got[i].Detail, want.detail) {
			t.Errorf("unit %d (%s): %s %q, want %s containing %q", i, got[i].Unit, got[i].Kind, got[i].Detail, want.kind, want.detail)
		}
	}
}

// A unit the base holds that Cargo compiled again: a source file the
// agent changed, else an environment variable rustc recorded, else a
// dependency compiled again in the same build, whatever the order Cargo
// reported them in (with pipelining a dependent can be done first).
func TestExplainRebuiltUnits(t *testing.T) {
	root := t.TempDir()
	tr := Trees{Fork: filepath.Join(root, "fork"), Base: filepath.Join(root, "base"),
		Worktree: filepath.Join(root, "wt"), BaseSrc: filepath.Join(root, "src"), BuildSrc: "/store/mnt/src", Workspace: "."}
	for _, tree := range []string{tr.Worktree, tr.BaseSrc} {
		write(t, tree, "crates/c/src/lib.rs", "pub fn c() {}\n")
		write(t, tree, "crates/b/src/lib.rs", "pub fn b() {}\n")
		write(t, tree, "crates/e/src/lib.rs", "pub fn e() {}\n")
	}
	write(t, tr.Worktree, "crates/c/src/lib.rs", "pub fn c() { /* edited */ }\n")
	dep := func(tree, crate, hash, src, env string) {
		write(t, tree, "debug/deps/"+crate+"-"+hash+".d",
			"/store/mnt/target/debug/deps/"+crate+"-"+hash+".d: "+src+" /usr/share/cargo/registry/x/src/lib.rs\n\n"+src+":\n"+env)
	}
	dep(tr.Fork, "c", "1111111111111111", "crates/c/src/lib.rs", "")
	dep(tr.Fork, "e", "3333333333333333", "crates/e/src/lib.rs", "# env-dep:GREETING=hello\n")
	dep(tr.Base, "e", "3333333333333333", "crates/e/src/lib.rs", "# env-dep:GREETING=hi\n")
	dep(tr.Fork, "b", "2222222222222222", "/store/mnt/src/crates/b/src/lib.rs", "")
	write(t, tr.Fork, "debug/.fingerprint/b-2222222222222222/lib-b.json", fp(`[]`, 5, `[1,"c",false,12]`))

	b := &demand.LastBuild{Units: []demand.Unit{
		{Name: "b", Kind: "lib", Target: "b", Dir: "debug/.fingerprint/b-2222222222222222"},
		{Name: "c", Kind: "lib", Target: "c", Dir: "debug/.fingerprint/c-1111111111111111"},
		{Name: "e", Kind: "lib", Target: "e", Dir: "debug/.fingerprint/e-3333333333333333"},
	}}
	got := Explain(b, tr)
	if r := got[1]; r.Kind != ReasonEdit || len(r.Files) != 1 || r.Files[0] != "crates/c/src/lib.rs" {
		t.Errorf("c: %+v", r)
	}
	if r := got[2]; r.Kind != ReasonEnv || !strings.Contains(r.Detail, `GREETING it reads differs: the base built it with "hi", this build with "hello"`) {
		t.Errorf("e: %+v", r)
	}
	if r := got[0]; r.Kind != ReasonDependency || !strings.Contains(r.Detail, "its dependency c was compiled again in this build") {
		t.Errorf("b: %+v", r)
	}
}
