package toolchain

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/failure"
)

// Remap mode (package remap) pays off only with a rustc that leaves the
// working directory out of its incremental key under -Zremap-cwd-prefix.
// Older ones resolve the prefix into an absolute --remap-path-prefix that
// the key includes, so a build from another worktree prints "completely
// ignoring cache because of differing commandline arguments" and compiles
// from scratch (rust-lang/rust#132132, fixed by #157348 for Rust 1.98).
// The version number cannot tell a nightly from before the fix from one
// after it, so ProbeRemap asks the compiler itself.

// RemapVersion is the first Rust release whose rustc keeps its incremental
// cache across working directories under -Zremap-cwd-prefix.
const RemapVersion = "1.98"

// ignoringCache is what rustc's -Zincremental-info prints when it drops the
// incremental state because the command line differs.
const ignoringCache = "ignoring cache because of differing commandline arguments"

// ProbeRemap compiles a one-line library twice, from two directories, with
// one incremental dir and -Zremap-cwd-prefix=., as remap mode's wrapper
// does, and returns nil when the second compile kept the first one's
// state. Otherwise the error (failure.Prereq) says what rustc did and how
// to get a rustc that can: it costs two small compiles (about 0.3 s).
// The compiles run below dir, so that rustup's rustc proxy picks the
// toolchain dir's rust-toolchain files select, as Detect's calls do.
func (t *Toolchain) ProbeRemap(dir string, env []string) error {
	if env == nil {
		env = os.Environ()
	}
	rustc, err := findRustc(dir, env, func() string { p, _ := lookupEnv(env, "PATH"); return p }())
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(dir, "ferry-remap-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var second string
	for _, wt := range []string{"a", "b"} {
		src := filepath.Join(tmp, wt)
		if err := os.Mkdir(src, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(src, "lib.rs"), []byte("pub fn probe() -> u32 { 1 }\n"), 0o644); err != nil {
			return err
		}
		cmd := exec.Command(rustc, "--crate-type", "lib", "--crate-name", "ferry_remap_probe", "--edition", "2021", "lib.rs",
			"-Zremap-cwd-prefix=.", "-Zincremental-info", "-C", "incremental=../incremental", "--out-dir", "../out")
		cmd.Dir = src
		cmd.Env = append(env[:len(env):len(env)], "RUSTC_BOOTSTRAP=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("probe remap mode: rustc in %s: %w: %s", src, err, strings.TrimSpace(string(out)))
		}
		second = string(out)
	}
	if strings.Contains(second, ignoringCache) {
		return failure.New(failure.Prereq,
			fmt.Sprintf("use a toolchain from Rust %s on (a nightly with rust-lang/rust#157348, or stable %s once released: pin it in rust-toolchain.toml), or leave [sandbox] remap-paths off", RemapVersion, RemapVersion),
			"rustc %s drops its incremental state when the working directory changes under -Zremap-cwd-prefix (it printed %q), so remap mode would recompile every edited crate from scratch", t.RustcVersion, ignoringCache)
	}
	return nil
}
