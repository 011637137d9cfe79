// Command ferry-rustc is the rustc wrapper of remap mode ([sandbox]
// remap-paths): Cargo runs it as RUSTC_WORKSPACE_WRAPPER, with rustc and
// its arguments after it, and it execs rustc with the arguments package
// remap makes of them. It runs on every rustc call Cargo makes for a
// workspace member, so it imports almost nothing: its errors print through
// report, the error printer alone, not the command kit.
package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ferrydev/ferry/pkg/cli/report"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/remap"
)

const prog = "ferry-rustc"

func main() {
	os.Exit(report.Print(report.StdIO(), prog, run(os.Args[1:]), false))
}

// run execs rustc as remap rewrites its call; it returns only on failure.
func run(args []string) error {
	if len(args) < 1 {
		return failure.New(failure.Usage,
			"Cargo runs ferry-rustc as RUSTC_WORKSPACE_WRAPPER (Ferry sets it in remap mode); it is not run by hand",
			"no rustc to run")
	}
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	argv, env := remap.Command(args, cwd, os.Environ())
	path := lookPath(argv[0], env)
	err = syscall.Exec(path, argv, env)
	return failure.Wrap(failure.Prereq, err, "Cargo named this rustc; check that the toolchain is installed", "exec %s", path)
}

// lookPath finds a rustc named without a slash on the environment's PATH,
// as Cargo would have; a name with a slash is used as it is.
func lookPath(name string, env []string) string {
	if strings.Contains(name, "/") {
		return name
	}
	for _, kv := range env {
		if path, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, dir := range filepath.SplitList(path) {
				p := filepath.Join(dir, name)
				if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
					return p
				}
			}
		}
	}
	return name
}
