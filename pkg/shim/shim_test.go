package shim_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

// layout is a store parent's bin/cargo (the shim, as Ferry installs it)
// and a working directory outside any git worktree, where the shim runs
// the real cargo unchanged.
type layout struct {
	shim string // the ferry-shim binary
	bin  string // <store parent>/bin, holding cargo -> ferry-shim
	work string
}

func newLayout(t *testing.T) *layout {
	t.Helper()
	if _, err := exec.LookPath("cargo"); err != nil {
		t.Skip("skipping: needs cargo on PATH")
	}
	root := t.TempDir()
	l := &layout{shim: filepath.Join(testenv.Binaries(t), "ferry-shim"),
		bin: filepath.Join(root, "home", "bin"), work: filepath.Join(root, "work")}
	for _, d := range []string{l.bin, l.work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(l.shim, filepath.Join(l.bin, "cargo")); err != nil {
		t.Fatal(err)
	}
	return l
}

// loopCap is a wrapper's first line: it counts the wrapper's runs in a
// file and gives up (exit 99) after 200, so that a shim that loops fails the
// test quickly instead of spinning or forking until the timeout.
func loopCap(t *testing.T) string {
	count := filepath.Join(t.TempDir(), "runs")
	return `echo >>` + count + `; if [ $(wc -l <` + count + `) -gt 200 ]; then echo "wrapper ran 200 times" >&2; exit 99; fi
`
}

// script writes an executable sh script name in a new PATH directory and
// returns the directory.
func script(t *testing.T, name, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// cargo runs `cargo args...` in dir with the given directories first on
// PATH, as a user would, and gives up after a minute (a loop would not end).
func cargo(t *testing.T, dir string, path []string, args ...string) (stdout, stderr string, code int, took time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "cargo", args...)
	// Its own process group, so a timeout ends whatever it started too.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.Dir = dir
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "FERRY_") {
			env = append(env, kv)
		}
	}
	c.Env = append(env, "PATH="+strings.Join(append(path, os.Getenv("PATH")), string(filepath.ListSeparator)))
	c.Path = filepath.Join(path[0], "cargo")
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	start := time.Now()
	err := c.Run()
	took = time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("cargo %s did not end within a minute (the shim loops?)\nstderr (end):\n%s", strings.Join(args, " "), tail(errb.String()))
	}
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code, took
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}

// A cargo after the shim on PATH that runs the shim again (a wrapper in
// another directory) is refused at once, naming both PATH entries, whether
// the wrapper execs the shim or starts it as a child.
func TestShimRefusesToRecurse(t *testing.T) {
	l := newLayout(t)
	for _, c := range []struct {
		name, body, want string
	}{
		{"exec", `exec ` + l.shim + ` "$@"`, "Ferry's shim re-entered itself"},
		{"child", l.shim + ` "$@"`, "cargo calls nest 16 deep through Ferry's shim"},
		// A wrapper that means well but finds the shim first on PATH again.
		{"cargo from PATH", `exec cargo "$@"`, "Ferry's shim re-entered itself"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wrap := script(t, "cargo", loopCap(t)+c.body)
			_, stderr, code, took := cargo(t, l.work, []string{l.bin, wrap}, "--version")
			if code != 3 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, want 3 and %q; stderr:\n%s", code, c.want, tail(stderr))
			}
			for _, entry := range []string{"PATH entry " + wrap, "PATH entry " + l.bin, "hint: take " + wrap + " off PATH"} {
				if !strings.Contains(stderr, entry) {
					t.Errorf("the error does not name %q:\n%s", entry, stderr)
				}
			}
			if n := strings.Count(stderr, "ferry-shim: error:"); n != 1 {
				t.Errorf("%d errors printed, want 1:\n%s", n, stderr)
			}
			t.Logf("refused in %v", took)
		})
	}
}

// Legitimate nesting still goes through the shim: an external subcommand
// that execs cargo (the same process the shim turned into cargo), and a
// build script calling cargo metadata, each one shim level deeper.
func TestShimNestsThroughCargo(t *testing.T) {
	l := newLayout(t)
	// cargo nested: cargo execs cargo-nested, which execs cargo again with
	// other arguments; cargo-depth prints the depth the shim gave it.
	sub := script(t, "cargo-nested", `exec cargo depth`)
	if err := os.WriteFile(filepath.Join(sub, "cargo-depth"), []byte("#!/bin/sh\necho depth=$FERRY_SHIM_DEPTH\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code, _ := cargo(t, l.work, []string{l.bin, sub}, "nested")
	if code != 0 || strings.TrimSpace(stdout) != "depth=2" {
		t.Fatalf("cargo nested: exit %d, stdout %q (want depth=2: two shim calls); stderr:\n%s", code, stdout, tail(stderr))
	}

	// A package whose build script runs cargo metadata through PATH.
	pkg := filepath.Join(l.work, "nest")
	files := map[string]string{
		"Cargo.toml": "[package]\nname = \"nest\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
		"src/lib.rs": "pub const DEPTH: &str = env!(\"NEST_DEPTH\");\n",
		"build.rs": `use std::process::Command;
fn main() {
    let out = Command::new("cargo")
        .args(["depth"])
        .output()
        .expect("run cargo from PATH");
    assert!(out.status.success(), "cargo depth: {}", String::from_utf8_lossy(&out.stderr));
    let meta = Command::new("cargo")
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .output()
        .expect("run cargo metadata from PATH");
    assert!(meta.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&meta.stderr));
    assert!(String::from_utf8_lossy(&meta.stdout).contains("\"nest\""));
    println!("cargo:rustc-env=NEST_DEPTH={}", String::from_utf8_lossy(&out.stdout).trim());
}
`,
	}
	for name, body := range files {
		p := filepath.Join(pkg, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, stderr, code, _ = cargo(t, pkg, []string{l.bin, sub}, "build", "--offline", "-vv")
	if code != 0 {
		t.Fatalf("cargo build with a build script calling cargo: exit %d\n%s", code, tail(stderr))
	}
	// The build script's cargo went through the shim: the outer call is
	// depth 1 for cargo and its build script, the nested one depth 2 (-vv
	// shows the build script's directives).
	if !strings.Contains(stderr, "NEST_DEPTH=depth=2") {
		t.Fatalf("the build script's cargo did not run through the shim one level deeper:\n%s", tail(stderr))
	}
}
