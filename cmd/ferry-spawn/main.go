// Command ferry-spawn creates an agent: a worktree with a fork of the base.
package main

import (
	"os"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/sandbox"
)

func main() {
	sandbox.Init()
	os.Exit(cli.Spawn(os.Args[1:], cli.StdIO()))
}
