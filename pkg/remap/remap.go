// Package remap is the rustc wrapper of remap mode ([sandbox] remap-paths),
// Ferry's experimental way to keep rustc's incremental state usable across
// worktrees without the namespace sandbox.
//
// Without the namespace every worktree builds at its own host path, and
// rustc keys its incremental state on its command line, which then names
// the worktree and the target dir absolutely: an agent's first edit
// recompiles the edited crate from scratch. In remap mode builds reach the
// target dir through a link inside the source root (<root>/.ferry-target),
// and Cargo runs this wrapper (as RUSTC_WORKSPACE_WRAPPER, so for workspace
// members only) around rustc. For a compile it
//
//   - rewrites every absolute path below the source root in rustc's
//     arguments (the out dir, -C incremental, -L, --extern, a source path)
//     to one relative to the working directory, which Cargo sets to the
//     workspace root;
//   - adds -Zremap-cwd-prefix=., so the paths rustc records below the
//     working directory (debuginfo, file!(), panics) are relative too;
//   - sets RUSTC_BOOTSTRAP=1 for that compile alone, since -Z flags need
//     it on a stable toolchain, and there adds -Zallow-features= so that a
//     #![feature] stays the error it is on stable (unless the caller set
//     RUSTC_BOOTSTRAP itself, and so opted into features already).
//
// Two worktrees then give rustc the same command line, and a rustc that
// leaves the working directory out of its incremental key (Rust 1.98 and
// later; older ones drop the cache, see toolchain.ProbeRemap) reuses the
// state a base left. Any other call (rustc -vV, Cargo's target probe on
// standard input, a compile outside a remapped root) runs unchanged.
//
// It runs on every rustc call Cargo makes for a workspace member, so it
// imports almost nothing and finds the root with one lstat per directory
// level.
package remap

import (
	"os"
	"path/filepath"
	"strings"
)

// Link is the name of the link to the target dir inside the source root.
const Link = ".ferry-target"

// EnvChannel tells the wrapper the toolchain's channel ("nightly" or
// another); Ferry sets it from the toolchain it detected for the base.
const EnvChannel = "FERRY_REMAP_CHANNEL"

// EnvWrapper is Cargo's variable for a rustc wrapper run for workspace
// members only.
const EnvWrapper = "RUSTC_WORKSPACE_WRAPPER"

// Env is what a cargo call in remap mode adds to its environment: Cargo
// runs wrapper (the installed ferry-rustc) around rustc for workspace
// members, and the wrapper learns the toolchain's channel ("nightly", or
// another: see Command). The target dir, reached through Link, is the
// caller's to set, and so is dropping inherited values of both variables
// first.
func Env(wrapper, channel string) []string {
	return []string{EnvWrapper + "=" + wrapper, EnvChannel + "=" + channel}
}

// Command is the rustc command line and environment for one call: rustc
// and its arguments as Cargo passed them to the wrapper (rustc first), in
// working directory cwd, with environment env.
func Command(rustcArgs []string, cwd string, env []string) ([]string, []string) {
	if len(rustcArgs) < 2 || !isCompile(rustcArgs[1:]) {
		return rustcArgs, env
	}
	root := findRoot(cwd)
	if root == "" {
		return rustcArgs, env
	}
	out := make([]string, 0, len(rustcArgs)+2)
	out = append(out, rustcArgs[0])
	for _, a := range rustcArgs[1:] {
		out = append(out, Relative(a, root, cwd))
	}
	out = append(out, "-Zremap-cwd-prefix=.")
	if _, set := lookup(env, "RUSTC_BOOTSTRAP"); !set {
		if ch, _ := lookup(env, EnvChannel); ch != "nightly" {
			out = append(out, "-Zallow-features=")
		}
		env = append(env[:len(env):len(env)], "RUSTC_BOOTSTRAP=1")
	}
	return out, env
}

// isCompile reports whether rustc's arguments compile a crate from a file:
// not a query (-vV, --version, --print) and not Cargo's probe, which reads
// its source from standard input.
func isCompile(args []string) bool {
	for _, a := range args {
		switch {
		case a == "-" || a == "-vV" || a == "-V" || a == "--version":
			return false
		case a == "--print" || strings.HasPrefix(a, "--print="):
			return false
		}
	}
	return true
}

// Relative rewrites an argument naming a path below root (the whole
// argument, or the value after its first '=': dependency=, incremental=,
// an --extern name=) to that path relative to cwd.
func Relative(arg, root, cwd string) string {
	prefix, p := "", arg
	if i := strings.IndexByte(arg, '='); i >= 0 && !below(arg, root) {
		prefix, p = arg[:i+1], arg[i+1:]
	}
	if !below(p, root) {
		return arg
	}
	rel, err := filepath.Rel(cwd, p)
	if err != nil {
		return arg
	}
	return prefix + rel
}

// below reports whether p is root or a path below it.
func below(p, root string) bool {
	return p == root || (strings.HasPrefix(p, root) && p[len(root)] == '/')
}

// findRoot is the nearest directory from cwd upward that holds the link to
// the target dir, or "".
func findRoot(cwd string) string {
	for d := cwd; ; {
		if fi, err := os.Lstat(filepath.Join(d, Link)); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			return d
		}
		parent := filepath.Dir(d)
		if parent == d {
			return ""
		}
		d = parent
	}
}

// lookup is cargoenv.Lookup, kept here so that the wrapper links no TOML
// parser (package cargoenv reads Cargo configuration).
func lookup(env []string, name string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v, true
		}
	}
	return "", false
}
