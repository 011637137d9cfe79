// Command ferry-gc deletes bases nothing references and rolls back dead spawns.
package main

import (
	"os"

	"github.com/ferrydev/ferry/pkg/cli"
)

func main() {
	os.Exit(cli.GC(os.Args[1:], cli.StdIO()))
}
