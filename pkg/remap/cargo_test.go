package remap_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/remap"
)

// worktree writes a two-member workspace at dir whose target is reached
// through the link, as remap mode lays it out.
func worktree(t *testing.T, dir, target string, main string) {
	t.Helper()
	files := map[string]string{
		"Cargo.toml":         "[workspace]\nmembers = [\"app\", \"util\"]\nresolver = \"2\"\n",
		"app/Cargo.toml":     "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\nutil = { path = \"../util\" }\n",
		"app/src/main.rs":    main,
		"util/Cargo.toml":    "[package]\nname = \"util\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
		"util/src/lib.rs":    "pub fn where_() -> &'static str { file!() }\n",
		"feature/Cargo.toml": "[package]\nname = \"feature\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
		"feature/src/lib.rs": "#![feature(never_type)]\npub fn f() {}\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(target, 0o755)
	if err := os.Symlink(target, filepath.Join(dir, remap.Link)); err != nil {
		t.Fatal(err)
	}
}

const appMain = "fn main() { println!(\"{} {}\", file!(), util::where_()); let v: Vec<u8> = Vec::new(); if std::env::args().count() > 5 { panic!(\"{}\", v[1]); } }\n"

// cargo runs cargo in dir (in the worktree at root) through the wrapper,
// with rustc logged by a script (RUSTC) that records the command line the
// wrapper made.
func cargo(t *testing.T, bin, root, dir, log string, args ...string) (string, error) {
	t.Helper()
	rustc, err := exec.LookPath("rustc")
	if err != nil {
		t.Skip("no rustc on PATH")
	}
	script := filepath.Join(filepath.Dir(log), "rustc-logged")
	os.WriteFile(script, []byte("#!/bin/sh\ncase \"$*\" in *--crate-name\\ app*|*--crate-name\\ util*) echo \"$*\" >> "+log+";; esac\nexec "+rustc+" \"$@\"\n"), 0o755)
	cmd := exec.Command("cargo", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "RUSTC_WORKSPACE_WRAPPER="+filepath.Join(bin, "ferry-rustc"), "RUSTC="+script,
		"CARGO_TARGET_DIR="+filepath.Join(root, remap.Link), "CARGO_INCREMENTAL=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// Through the wrapper, two worktrees at different paths give rustc the
// same command lines, the binary records no path of its worktree, and a
// #![feature] stays an error on a stable toolchain.
func TestWrapperWithCargo(t *testing.T) {
	fixture.RequireTools(t)
	bin := testenv.Binaries(t)
	top := t.TempDir()
	var logs []string
	for _, wt := range []string{"one", "two-longer"} {
		dir := filepath.Join(top, wt)
		worktree(t, dir, filepath.Join(top, wt+"-target"), appMain)
		log := filepath.Join(top, wt+".log")
		if out, err := cargo(t, bin, dir, dir, log, "build", "--offline", "-p", "app"); err != nil {
			t.Fatalf("%s: %v\n%s", wt, err, out)
		}
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, string(b))
		app := filepath.Join(dir, remap.Link, "debug", "app")
		out, err := exec.Command(app).Output()
		if err != nil || strings.TrimSpace(string(out)) != "app/src/main.rs util/src/lib.rs" {
			t.Fatalf("%s: the app prints %q, %v", wt, out, err)
		}
		exe, err := os.ReadFile(app)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(exe, []byte(dir)); n > 0 {
			t.Errorf("%s: the binary names its worktree %s %d times", wt, dir, n)
		}
	}
	if logs[0] != logs[1] || !strings.Contains(logs[0], "-Zremap-cwd-prefix=.") {
		t.Fatalf("the worktrees' rustc command lines differ or are not remapped:\n%s\n%s", logs[0], logs[1])
	}

	v, _ := exec.Command("rustc", "-V").Output()
	if !strings.Contains(string(v), "nightly") {
		out, err := cargo(t, bin, filepath.Join(top, "one"), filepath.Join(top, "one", "feature"), filepath.Join(top, "feature.log"), "build", "--offline")
		if err == nil || !strings.Contains(out, "never_type") {
			t.Fatalf("a #![feature] built on stable in remap mode: %v\n%s", err, out)
		}
	}
}
