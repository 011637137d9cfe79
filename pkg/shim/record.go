package shim

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/units"
)

// Recording a base's warm build (the architecture's `ferry base`, step 5).
// Inside the warm commands FERRY_WARM_UNITS names the base's warm-units
// directory, and the shim records each build-type cargo call there in a
// file of its own (the format is package units'): it asks cargo for JSON
// messages (--message-format=json-render-diagnostics, so diagnostics are
// still rendered on stderr) unless the call asked for JSON itself, reads
// cargo's stdout line by line, records every compiler-artifact and
// build-script-executed message with the files it names stat'ed as it
// arrives, and passes every other line through. The messages the added
// flag makes Cargo print reach stdout only when the call asked for JSON
// itself. After build-finished, Cargo
// builds nothing more (what follows is the output of the tests or the
// program it runs), so the rest is copied through unread. How the call
// ended is recorded last; a call killed midway leaves a record without it.
//
// A call asking for human or short messages, or a subcommand the shim does
// not know (an alias, nextest, install), cannot be observed: its record
// says so and it runs unchanged. A call that builds nothing (metadata,
// tree, …) runs unchanged and unrecorded. Calls outside a warm build never
// reach this file: recording costs them nothing (the shim still execs
// cargo, about 3 ms on the machines measured, as before).

// buildCommands are Cargo's subcommands that build units and take
// --message-format (cargo clippy passes it on to the cargo check it runs).
var buildCommands = map[string]bool{
	"build": true, "check": true, "test": true, "bench": true, "run": true,
	"doc": true, "rustc": true, "rustdoc": true, "clippy": true, "fix": true,
}

// quietCommands are subcommands that build no unit: they run unrecorded.
// `clean` removes units, which the analysis then does not find.
var quietCommands = map[string]bool{
	"metadata": true, "locate-project": true, "tree": true, "fetch": true,
	"generate-lockfile": true, "update": true, "version": true, "help": true,
	"pkgid": true, "search": true, "verify-project": true, "read-manifest": true,
	"config": true, "report": true, "new": true, "init": true, "add": true,
	"remove": true, "info": true, "owner": true, "yank": true, "login": true,
	"logout": true, "vendor": true, "clean": true, "uninstall": true, "fmt": true,
}

// Cargo's global options before the subcommand: those without a value and
// those taking one (as the next argument, or attached).
var (
	globalFlags = map[string]bool{
		"-v": true, "--verbose": true, "-q": true, "--quiet": true, "--frozen": true,
		"--locked": true, "--offline": true,
	}
	globalValues = map[string]bool{"--color": true, "--config": true, "-Z": true, "-C": true}
)

// jsonFormat is the message format the shim asks for: JSON messages on
// stdout, diagnostics rendered by Cargo on stderr as usual.
const jsonFormat = "--message-format=json-render-diagnostics"

// warmPlan is what the shim does with a call inside a warm build.
type warmPlan struct {
	record       bool     // a build-type call: record it
	unobservable string   // record it as unobservable, for this reason, and run it unchanged
	json         bool     // it asked for JSON messages itself
	args         []string // cargo's arguments
}

// planWarm decides how a call with args (cargo's arguments) is recorded.
func planWarm(args []string) warmPlan {
	i := 0
	if i < len(args) && strings.HasPrefix(args[i], "+") { // rustup's +toolchain
		i++
	}
	for ; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			break
		}
		switch {
		case globalFlags[a] || isVerbose(a):
		case globalValues[a]:
			i++
		case strings.HasPrefix(a, "--color=") || strings.HasPrefix(a, "--config=") ||
			(strings.HasPrefix(a, "-Z") && len(a) > 2) || (strings.HasPrefix(a, "-C") && len(a) > 2):
		default:
			// --version, --list, --help, --explain …: nothing is built.
			// An option the shim does not know hides the subcommand.
			if noBuild[a] || strings.HasPrefix(a, "--explain=") {
				return warmPlan{args: args}
			}
			return warmPlan{record: true, unobservable: fmt.Sprintf("cargo option %q before the subcommand is not one the shim knows", a), args: args}
		}
	}
	if i >= len(args) {
		return warmPlan{args: args} // no subcommand: cargo prints its help
	}
	sub := args[i]
	if quietCommands[sub] {
		return warmPlan{args: args}
	}
	if !buildCommands[sub] {
		return warmPlan{record: true, unobservable: fmt.Sprintf("subcommand %q is not one the shim can observe (an alias, an external subcommand, or one that builds elsewhere)", sub), args: args}
	}
	formats, asked := messageFormats(args[i+1:])
	if asked {
		for _, f := range formats {
			if strings.HasPrefix(f, "json") {
				return warmPlan{record: true, json: true, args: args}
			}
		}
		return warmPlan{record: true, unobservable: fmt.Sprintf("it asks for %s messages", strings.Join(formats, ",")), args: args}
	}
	out := make([]string, 0, len(args)+1)
	out = append(out, args[:i+1]...)
	out = append(out, jsonFormat)
	out = append(out, args[i+1:]...)
	return warmPlan{record: true, args: out}
}

// noBuild are global options that make cargo build nothing.
var noBuild = map[string]bool{"-V": true, "--version": true, "--list": true, "-h": true, "--help": true, "--explain": true}

// isVerbose reports whether a is -v, -vv, … or -q, -qq, ….
func isVerbose(a string) bool {
	if len(a) < 2 || a[0] != '-' {
		return false
	}
	return strings.Trim(a[1:], "v") == "" || strings.Trim(a[1:], "q") == ""
}

// messageFormats returns the values of every --message-format among a
// subcommand's arguments (before a "--"), split at commas.
func messageFormats(args []string) (formats []string, asked bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		v, ok := strings.CutPrefix(a, "--message-format=")
		if !ok && a == "--message-format" && i+1 < len(args) {
			v, ok = args[i+1], true
			i++
		}
		if ok {
			asked = true
			for _, f := range strings.Split(v, ",") {
				formats = append(formats, strings.TrimSpace(f))
			}
		}
	}
	return formats, asked
}

// recordWarm runs a call inside a warm build that FERRY_WARM_UNITS asks to
// record in unitsDir. warmTarget is the base's target (FERRY_WARM_TARGET),
// target the one this call builds in, env cargo's environment. It returns
// cargo's exit status.
func (c *Call) recordWarm(cargo, unitsDir, warmTarget, target string, env []string) (int, error) {
	p := planWarm(c.Args)
	if !p.record {
		return 0, c.exec(cargo, c.Dir, c.Args, env)
	}
	head := units.Call{Dir: c.Dir, Args: c.Args, Target: warmTarget, CargoTarget: target, JSON: p.json, Unobservable: p.unobservable}
	if p.unobservable != "" {
		rec, err := units.NewRecord(unitsDir, head)
		if err != nil {
			return 0, recordFailure(err)
		}
		if err := rec.Close(); err != nil {
			return 0, recordFailure(err)
		}
		return 0, c.exec(cargo, c.Dir, c.Args, env)
	}
	head.Ran = p.args
	rec, err := units.NewRecord(unitsDir, head)
	if err != nil {
		return 0, recordFailure(err)
	}
	defer rec.Close()

	cmd := exec.Command(cargo, p.args...)
	cmd.Args[0] = "cargo" // rustup's proxy dispatches on it
	cmd.Dir = c.Dir
	// cargo is a child: only the depth marks the call (see checkRecursion).
	cmd.Env = c.marked(env, "", cargo, c.Dir, p.args)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	// Signals meant for the call go to cargo; the shim stays to record
	// how it ends. SIGPIPE is caught so that a closed stdout is an error
	// to handle (below), not the shim's death.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	defer func() { signal.Stop(sigs); close(sigs) }()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", cargo, err)
	}
	go func() {
		for s := range sigs {
			if s != syscall.SIGPIPE {
				cmd.Process.Signal(s)
			}
		}
	}()
	recErr := relay(stdout, os.Stdout, p.json, func(body []byte, reason string, keep bool, paths []string) error {
		if !keep {
			return nil
		}
		return rec.Message(body, units.Stat(paths))
	})
	werr := cmd.Wait()
	exit := units.Exit{}
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		exit.Code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			exit.Code, exit.Signal = 128+int(ws.Signal()), ws.Signal().String()
		}
	default:
		return 0, werr
	}
	if recErr != nil {
		// The record misses messages: leave it unfinished, so it reads as
		// a call that did not finish, and say why.
		return 0, recordFailure(recErr)
	}
	if err := rec.Exit(exit); err != nil {
		return 0, recordFailure(err)
	}
	return exit.Code, nil
}

// addedReasons are the messages Cargo prints only because the shim asked
// for JSON: a call that did not ask for JSON does not see them. Others (a
// --timings=json report) it asked for, and gets.
var addedReasons = map[string]bool{
	units.ReasonArtifact: true, units.ReasonBuildScript: true, units.ReasonBuildFinished: true,
	"compiler-message": true,
}

// relay copies cargo's stdout to out, handing each of Cargo's messages to
// message (with its reason, whether a units record keeps it, and the
// paths it names); it drops the messages the call did not ask for (json
// false). It returns the first error message returned. A failing out (a
// closed pipe) is not an error: cargo's stdout is closed in turn, so cargo
// sees what it would have seen writing there itself.
func relay(in io.ReadCloser, out io.Writer, json bool, message func(body []byte, reason string, keep bool, paths []string) error) error {
	br := bufio.NewReaderSize(in, 64<<10)
	var recErr error
	outOK := true
	write := func(b []byte) {
		if !outOK {
			return
		}
		if _, err := out.Write(b); err != nil {
			outOK = false
			in.Close()
		}
	}
	for {
		l, err := readLine(br)
		if len(l) > 0 {
			body := bytes.TrimSuffix(l, []byte{'\n'})
			reason, keep, paths, ok := units.ParseMessage(body)
			if ok && recErr == nil {
				recErr = message(body, reason, keep, paths)
			}
			if json || !ok || !addedReasons[reason] {
				write(l)
			}
			if reason == units.ReasonBuildFinished {
				// Nothing more is built: what follows is not Cargo's.
				if outOK {
					if _, err := io.Copy(out, br); err != nil {
						in.Close()
					}
				}
				io.Copy(io.Discard, br)
				return recErr
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && outOK {
				return errors.Join(recErr, err)
			}
			return recErr
		}
	}
}

// readLine reads one line, however long, with its newline (absent at the
// end of the stream).
func readLine(br *bufio.Reader) ([]byte, error) {
	l, err := br.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		return l, err
	}
	buf := append([]byte(nil), l...)
	for err == bufio.ErrBufferFull {
		l, err = br.ReadSlice('\n')
		buf = append(buf, l...)
	}
	return buf, err
}

// recordFailure is a warm call the shim could not record: the base's
// observation would miss it, so the call fails rather than run unseen.
func recordFailure(err error) error {
	return failure.Wrap(failure.Internal, err, "the base's warm-units directory must stay writable while its warm commands run",
		"cannot record this cargo call of a base's warm build")
}
