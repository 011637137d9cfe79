// Command ferry is the human front of Ferry: `ferry base`, `ferry spawn` …
// run the stage binaries, git style; the rest (run, shell, env, list, rm,
// doctor, up, hook, completion, …: see ferrycmd's own) are its own.
package main

import (
	"os"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/cli/ferrycmd"
	"github.com/ferrydev/ferry/pkg/sandbox"
)

func main() {
	sandbox.Init()
	os.Exit(ferrycmd.Main(os.Args[1:], cli.StdIO()))
}
