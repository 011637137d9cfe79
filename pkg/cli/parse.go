package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/ferrydev/ferry/pkg/cli/complete"
	"github.com/ferrydev/ferry/pkg/failure"
)

// InvokedAs is how the front (ferry) tells a stage binary the command the
// user typed ("ferry base"), so that usage lines and errors say it. (Not
// argv[0]: multi-call binaries, test harnesses among them, dispatch on it.)
const InvokedAs = "FERRY_INVOKED_AS"

// Name is the command's name as the user typed it: what the front passed
// in InvokedAs (which it removes from the environment, so the processes
// the command starts do not inherit it), else the binary's file name.
func Name(argv0 string) string {
	bin := filepath.Base(argv0)
	typed := os.Getenv(InvokedAs)
	os.Unsetenv(InvokedAs)
	if stage, ok := strings.CutPrefix(typed, "ferry "); ok && "ferry-"+stage == bin {
		return typed
	}
	return bin
}

// SeeExitCodes ends every command's description: the table itself is in
// the top help only.
const SeeExitCodes = "Exit codes are listed by `ferry --help`."

// Parse parses args into grammar for the command called name. done is true
// when the command has finished (help printed, or a usage error reported)
// with exit status code. desc is the command's description; examples, one
// per line, follow it under "Examples:". Args of complete.ModelFlag alone
// print the grammar's model for completion scripts instead (done, 0).
// opts are the command's own kong options (its help printer).
func Parse(name, desc string, examples []string, grammar any, args []string, io IO, opts ...kong.Option) (ctx *kong.Context, code int, done bool) {
	exited := false
	text := desc
	if len(examples) > 0 {
		text += "\n\nExamples:\n  " + strings.Join(examples, "\n  ")
	}
	parser, err := kong.New(grammar, append([]kong.Option{
		kong.Name(name),
		kong.Description(text + "\n\n" + SeeExitCodes),
		kong.Writers(io.Stdout, io.Stderr),
		kong.Exit(func(c int) { exited, code = true, c }),
	}, opts...)...)
	if err != nil {
		return nil, Report(io, name, err, false), true
	}
	if len(args) == 1 && args[0] == complete.ModelFlag {
		// The front asks for the model of a stage it runs but does not
		// link, to write completion scripts.
		return nil, Report(io, name, WriteJSON(io.Stdout, complete.FromKong(parser.Model)), false), true
	}
	ctx, err = parser.Parse(args)
	if exited {
		return nil, code, true
	}
	if err != nil {
		return nil, Report(io, name, failure.Wrap(failure.Usage, err, "run `"+name+" --help` for usage", "bad arguments"), WantsJSON(args)), true
	}
	return ctx, 0, false
}

// WantsJSON reports whether args ask for --json before any "--": a usage
// error is reported as JSON too then, though the flags did not parse.
func WantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "--json=true", "--json=1":
			return true
		}
	}
	return false
}

// Run parses args into grammar and runs run, reporting its error under
// name; asJSON points at the command's --json flag (nil: it has none).
func Run(name, desc string, examples []string, grammar any, args []string, io IO, asJSON *bool, run func() error) int {
	_, code, done := Parse(name, desc, examples, grammar, args, io)
	if done {
		return code
	}
	return Report(io, name, run(), asJSON != nil && *asJSON)
}

// WithDefaultHelp is the help of a grammar with a default command (ferry
// base builds without one): its own help, then the default command's, so
// that the flags typed most are on the page `--help` shows.
func WithDefaultHelp(command string) kong.Option {
	return kong.Help(func(options kong.HelpOptions, ctx *kong.Context) error {
		if err := kong.DefaultHelpPrinter(options, ctx); err != nil || ctx.Selected() != nil {
			return err
		}
		sub, err := kong.Trace(ctx.Kong, []string{command})
		if err != nil {
			return err
		}
		fmt.Fprintf(ctx.Stdout, "\nWithout a command, %s runs %s:\n", ctx.Model.Name, command)
		options.NoAppSummary = true
		return kong.DefaultHelpPrinter(options, sub)
	})
}
