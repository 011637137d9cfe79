// Command ferry-watch polls a ref and publishes commit.seen events; it hosts
// the embedded bus unless an external one is configured. `ferry-watch log`
// reads the event log the embedded bus stored.
package main

import (
	"os"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/cli/watchcmd"
)

func main() {
	os.Exit(watchcmd.Main(cli.Name(os.Args[0]), os.Args[1:], cli.StdIO()))
}
