// Command ferry-watch polls a ref and publishes commit.seen events; it hosts
// the embedded bus unless an external one is configured.
package main

import (
	"os"

	"github.com/ferrydev/ferry/pkg/cli"
)

func main() {
	os.Exit(cli.Watch(os.Args[1:], cli.StdIO()))
}
