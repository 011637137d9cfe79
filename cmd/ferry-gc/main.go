// Command ferry-gc is a stage of Ferry's pipeline; see the README.
package main

import (
	"os"

	"github.com/ferrydev/ferry/pkg/cli"
)

func main() {
	os.Exit(cli.NotYet("ferry-gc", cli.StdIO()))
}
