// Command ferry is the human front of Ferry: `ferry base`, `ferry spawn` …
// run the stage binaries, git style.
package main

import (
	"os"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/sandbox"
)

func main() {
	sandbox.Init()
	os.Exit(cli.Front(os.Args[1:], cli.StdIO()))
}
