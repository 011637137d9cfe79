// Command ferry-gc deletes bases nothing references and rolls back dead
// spawns; with --follow it keeps doing so on base.ready and agent.removed.
package main

import (
	"os"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/cli/gccmd"
)

func main() {
	os.Exit(gccmd.Main(cli.Name(os.Args[0]), os.Args[1:], cli.StdIO()))
}
