// Command ferry-rustc is the rustc wrapper of remap mode ([sandbox]
// remap-paths): Cargo runs it as RUSTC_WORKSPACE_WRAPPER, with rustc and
// its arguments after it, and it execs rustc with the arguments package
// remap makes of them. It runs on every rustc call Cargo makes for a
// workspace member, so it imports almost nothing.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ferrydev/ferry/pkg/remap"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "ferry-rustc: error: no rustc to run\n  hint: Cargo runs ferry-rustc as RUSTC_WORKSPACE_WRAPPER (Ferry sets it in remap mode); it is not run by hand")
		os.Exit(2)
	}
	cwd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ferry-rustc: error:", err)
		os.Exit(1)
	}
	argv, env := remap.Command(os.Args[1:], cwd, os.Environ())
	path := lookPath(argv[0], env)
	err = syscall.Exec(path, argv, env)
	fmt.Fprintf(os.Stderr, "ferry-rustc: error: exec %s: %v\n", path, err)
	os.Exit(127)
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
