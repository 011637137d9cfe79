// Command ferry-rustc is the rustc wrapper of remap mode (builds without the
// namespace sandbox). It runs on every rustc call, so it imports nothing
// heavy. Not implemented yet.
package main

import (
	"fmt"
	"os"

	"github.com/ferrydev/ferry/pkg/failure"
)

func main() {
	fmt.Fprintln(os.Stderr, "ferry-rustc: error: remap mode is not implemented yet\n  hint: Ferry builds in the namespace sandbox; see the README")
	os.Exit(failure.Unimplemented.ExitCode())
}
