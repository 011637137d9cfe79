// Package cli is the small kit every Ferry binary's command layer shares,
// the way cmd/go's commands share cmd/go/internal/base: the one error
// printer (error:, caused by: and hint: lines, a documented exit code, and
// an {"error": ...} object with --json), parsing with kong under the name
// the user typed, loading the repository with its settings and store,
// signals, versions and the formatting of sizes, durations and ids for
// people. Library packages never print; the command packages below this
// one (basecmd, spawncmd, gccmd, watchcmd, ferrycmd: one per binary)
// print through it, and the per-call binaries (the shim, ferry-rustc)
// through its printer alone, package report.
//
// The kit links no NATS code: what a binary links is its own command
// package's choice (a test checks each binary's dependencies).
package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ferrydev/ferry/pkg/cli/report"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/store"
)

// IO is where a command writes.
type IO = report.IO

// StdIO is the process's own streams.
func StdIO() IO { return report.StdIO() }

// Report prints err for a user and returns its exit code (report.Print:
// the printer lives in its own package for the per-call binaries).
func Report(io IO, prog string, err error, asJSON bool) int {
	return report.Print(io, prog, err, asJSON)
}

// Messages splits err's chain into one message per layer (report.Messages).
func Messages(err error) []string { return report.Messages(err) }

// WriteJSON writes v as indented JSON: a command's answer with --json.
func WriteJSON(w io.Writer, v any) error { return report.WriteJSON(w, v) }

// Context is what most commands need: the repository, its settings and store.
type Context struct {
	Repo     *git.Repo
	Settings *config.Settings
	Store    *store.Store
}

// Load opens the repository containing dir, its ferry.toml and its store.
// Every command goes through it, so this is where a store someone else
// could change is refused (store.CheckOwner), before any command reads,
// writes or publishes anything: the shim on the user's PATH and the bus
// token live there. In an agent's worktree ferry.toml is read as
// committed (Settings), and a working file that differs is said on
// standard error, as a warning of the program running.
func Load(dir string) (*Context, error) {
	repo, err := git.Open(dir)
	if err != nil {
		return nil, err
	}
	settings, note, err := Settings(repo)
	if err != nil {
		return nil, err
	}
	if note != "" {
		fmt.Fprintf(os.Stderr, "%s: warning: %s\n", filepath.Base(os.Args[0]), note)
	}
	common, err := repo.CommonDir()
	if err != nil {
		return nil, err
	}
	s, err := store.Open(settings.StoreParent, common, repo.Top)
	if err != nil {
		return nil, err
	}
	if err := s.CheckOwner(); err != nil {
		return nil, err
	}
	return &Context{Repo: repo, Settings: settings, Store: s}, nil
}
