// Command ferry-gc deletes bases nothing references and rolls back dead
// spawns; with --follow it keeps doing so on base.ready and agent.removed.
package main

import (
	"os"

	"github.com/ferrydev/ferry/pkg/cli"
)

func main() {
	os.Exit(cli.GC(os.Args[1:], cli.StdIO()))
}
