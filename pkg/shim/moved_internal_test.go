package shim

import (
	"strings"
	"testing"
)

// The calls that pay the check of files whose mtime did not move: those
// that may build, aliases and external subcommands included; cargo -V and
// the calls that build nothing do not.
func TestMayBuild(t *testing.T) {
	for args, want := range map[string]bool{
		"build": true, "+nightly check --workspace": true, "-q test --no-run": true, "run -p app": true,
		"bench": true, "clippy --all-targets": true, "doc": true, "install --path .": true, "rustc": true,
		"b": true, "xtask dist": true, "nextest run": true, "--locked build": true,
		"-V": false, "--version": false, "-vV": false, "version": false, "metadata --format-version 1": false,
		"locate-project --workspace": false, "tree": false, "fetch": false, "--list": false, "help build": false,
		"clean": false, "fmt": false, "": false,
	} {
		if got := mayBuild(strings.Fields(args)); got != want {
			t.Errorf("cargo %s: may build %v, want %v", args, got, want)
		}
	}
}
