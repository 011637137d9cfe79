// Command ferry-base builds, lists and verifies immutable warm bases; with
// --follow it builds every commit ferry-watch announces.
package main

import (
	"os"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/cli/basecmd"
	"github.com/ferrydev/ferry/pkg/sandbox"
)

func main() {
	sandbox.Init()
	os.Exit(basecmd.Main(cli.Name(os.Args[0]), os.Args[1:], cli.StdIO()))
}
