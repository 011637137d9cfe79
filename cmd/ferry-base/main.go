// Command ferry-base builds and lists immutable warm bases.
package main

import (
	"os"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/sandbox"
)

func main() {
	sandbox.Init()
	os.Exit(cli.Base(os.Args[1:], cli.StdIO()))
}
