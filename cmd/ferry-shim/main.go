// Command ferry-shim is installed as <store parent>/bin/cargo: it runs the
// real cargo in the sandbox of the agent whose worktree holds the working
// directory, with that agent's target dirs.
package main

import (
	"os"

	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/shim"
)

func main() {
	sandbox.Init()
	os.Exit(shim.Main(os.Args[1:]))
}
