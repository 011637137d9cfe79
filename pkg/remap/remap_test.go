package remap

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root makes a source root with the target link, and a workspace dir below.
func root(t *testing.T) (string, string) {
	t.Helper()
	r := t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(r, Link)); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(r, "nested")
	os.Mkdir(ws, 0o755)
	return r, ws
}

// A compile's paths below the root become relative to the working
// directory, whether they are whole arguments or values after '=';
// everything else is kept, and the remap flags come last.
func TestCommandRewritesCompile(t *testing.T) {
	r, ws := root(t)
	tgt := filepath.Join(r, Link)
	in := []string{"/usr/bin/rustc", "--crate-name", "app", "src/main.rs",
		"--out-dir", tgt + "/debug/deps", "-C", "incremental=" + tgt + "/debug/incremental",
		"-L", "dependency=" + tgt + "/debug/deps", "--extern", "lib=" + tgt + "/debug/deps/liblib-1.rlib",
		"-L", "native=/usr/lib", r + "/shared/x.rs", "/elsewhere/y.rs"}
	got, env := Command(in, ws, []string{"PATH=/bin"})
	want := []string{"/usr/bin/rustc", "--crate-name", "app", "src/main.rs",
		"--out-dir", "../" + Link + "/debug/deps", "-C", "incremental=../" + Link + "/debug/incremental",
		"-L", "dependency=../" + Link + "/debug/deps", "--extern", "lib=../" + Link + "/debug/deps/liblib-1.rlib",
		"-L", "native=/usr/lib", "../shared/x.rs", "/elsewhere/y.rs", "-Zremap-cwd-prefix=.", "-Zallow-features="}
	if !slices.Equal(got, want) {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
	if !slices.Contains(env, "RUSTC_BOOTSTRAP=1") {
		t.Fatalf("env %q lacks RUSTC_BOOTSTRAP=1", env)
	}
}

// On a nightly, features stay allowed; a caller that set RUSTC_BOOTSTRAP
// keeps its own value and its features.
func TestCommandFeatures(t *testing.T) {
	r, _ := root(t)
	args := []string{"rustc", "src/lib.rs"}
	got, env := Command(args, r, []string{EnvChannel + "=nightly"})
	if slices.Contains(got, "-Zallow-features=") || !slices.Contains(env, "RUSTC_BOOTSTRAP=1") {
		t.Errorf("nightly: %q %q", got, env)
	}
	got, env = Command(args, r, []string{"RUSTC_BOOTSTRAP=mycrate"})
	if slices.Contains(got, "-Zallow-features=") || slices.Contains(env, "RUSTC_BOOTSTRAP=1") {
		t.Errorf("caller's RUSTC_BOOTSTRAP: %q %q", got, env)
	}
	if !slices.Contains(got, "-Zremap-cwd-prefix=.") {
		t.Errorf("no remap flag: %q", got)
	}
}

// Queries, Cargo's probe on standard input and compiles outside a remapped
// root run exactly as Cargo asked.
func TestCommandPassesOtherCalls(t *testing.T) {
	r, _ := root(t)
	outside := t.TempDir()
	for _, c := range []struct {
		args []string
		cwd  string
	}{
		{[]string{"rustc", "-vV"}, r},
		{[]string{"rustc", "-", "--crate-name", "___", "--print=file-names"}, r},
		{[]string{"rustc", "--print", "sysroot"}, r},
		{[]string{"rustc", "src/lib.rs", "--out-dir", outside}, outside},
		{[]string{"rustc"}, r},
	} {
		env := []string{"A=1"}
		got, gotEnv := Command(c.args, c.cwd, env)
		if !slices.Equal(got, c.args) || !slices.Equal(gotEnv, env) {
			t.Errorf("%q in %s became %q %q", c.args, c.cwd, got, gotEnv)
		}
	}
}

// Only a link counts as the root's marker: a directory of that name (a
// workspace that happens to use it) does not.
func TestRootIsTheLink(t *testing.T) {
	d := t.TempDir()
	os.Mkdir(filepath.Join(d, Link), 0o755)
	if got := findRoot(filepath.Join(d, Link)); got != "" {
		t.Fatalf("root %q from a directory named %s", got, Link)
	}
	r, ws := root(t)
	if got := findRoot(ws); got != r {
		t.Fatalf("root %q, want %q", got, r)
	}
}

func TestRelative(t *testing.T) {
	for _, c := range []struct{ arg, want string }{
		{"/w/a", "a"},
		{"/w", "."},
		{"/wx/a", "/wx/a"},
		{"k=/w/a", "k=a"},
		{"/w/a=b", "a=b"},
		{"k=/v/a", "k=/v/a"},
		{"plain", "plain"},
	} {
		if got := Relative(c.arg, "/w", "/w"); got != c.want {
			t.Errorf("Relative(%q) = %q, want %q", c.arg, got, c.want)
		}
	}
	if got := Relative("/w/t/x", "/w", "/w/sub/dir"); got != strings.Join([]string{"..", "..", "t", "x"}, "/") {
		t.Errorf("from below: %q", got)
	}
}
