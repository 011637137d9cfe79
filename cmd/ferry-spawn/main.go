// Command ferry-spawn creates an agent: a worktree with a fork of the base.
package main

import (
	"os"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/cli/spawncmd"
	"github.com/ferrydev/ferry/pkg/sandbox"
)

func main() {
	sandbox.Init()
	os.Exit(spawncmd.Main(cli.Name(os.Args[0]), os.Args[1:], cli.StdIO()))
}
