// Package report is the one error printer of Ferry's binaries: error:,
// caused by: and hint: lines on stderr, a documented exit code, and an
// {"error": ...} object on stdout with --json. It is package cli's printer,
// kept apart so that the per-call binaries (ferry-shim, ferry-rustc) print
// through it without linking the rest of the command kit: they run on
// every cargo and rustc call, and each package they link is start-up time.
package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/ferrydev/ferry/pkg/failure"
)

// IO is where a command writes.
type IO struct {
	Stdout io.Writer
	Stderr io.Writer
}

// StdIO is the process's own streams.
func StdIO() IO { return IO{Stdout: os.Stdout, Stderr: os.Stderr} }

// Print prints err for a user and returns its exit code. With asJSON it
// also prints {"error": ...} on stdout, so scripts get an answer either way.
func Print(io IO, prog string, err error, asJSON bool) int {
	if err == nil {
		return 0
	}
	kind := failure.KindOf(err)
	chain := Messages(err)
	hint := failure.HintOf(err)
	full, noSpace := failure.Space(err)
	if noSpace {
		// Name the full filesystem and its free space in place of the bare
		// errno text, and say first what frees it; the error's own hint
		// (what is left to finish, say) follows.
		if last := len(chain) - 1; last > 0 && chain[last] == syscall.ENOSPC.Error() {
			chain = chain[:last]
		}
		chain = append(chain, full.String())
		if hint == "" {
			hint = full.Hint()
		} else {
			hint = full.Hint() + "\n" + hint
		}
	}
	fmt.Fprintf(io.Stderr, "%s: error: %s\n", prog, chain[0])
	for _, c := range chain[1:] {
		fmt.Fprintf(io.Stderr, "  caused by: %s\n", c)
	}
	if hint != "" {
		for i, line := range strings.Split(hint, "\n") {
			if i == 0 {
				fmt.Fprintf(io.Stderr, "  hint: %s\n", line)
			} else {
				fmt.Fprintf(io.Stderr, "        %s\n", line)
			}
		}
	}
	if asJSON {
		e := map[string]any{
			"kind": kind.String(), "message": chain[0], "causes": chain[1:], "hint": hint,
			"exit_code": kind.ExitCode(),
		}
		if noSpace {
			e["no_space"] = map[string]any{"path": full.Path, "mount_point": full.MountPoint,
				"free_bytes": full.Free, "size_bytes": full.Size}
		}
		WriteJSON(io.Stdout, map[string]any{"error": e})
	}
	return kind.ExitCode()
}

// Messages splits err's chain into one message per layer, each without the
// text of its cause.
func Messages(err error) []string {
	var layers []error
	for e := err; e != nil; {
		layers = append(layers, e)
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			// A joined error: report its parts as causes, flattened.
			for _, c := range j.Unwrap() {
				layers = append(layers, c)
			}
			break
		}
		e = errors.Unwrap(e)
	}
	var out []string
	for i, e := range layers {
		if _, ok := e.(interface{ Unwrap() []error }); ok && i+1 < len(layers) {
			continue // a joined error's text is its parts', which follow
		}
		msg := e.Error()
		if fe, ok := e.(*failure.Error); ok && fe.Msg != "" {
			msg = fe.Msg
		} else if i+1 < len(layers) && msg == layers[i+1].Error() {
			continue // a layer that adds data, not words
		} else if i+1 < len(layers) {
			msg = strings.TrimSuffix(msg, ": "+layers[i+1].Error())
		}
		if msg == "" || (len(out) > 0 && out[len(out)-1] == msg) {
			continue
		}
		out = append(out, msg)
	}
	if len(out) == 0 {
		out = []string{err.Error()}
	}
	return out
}

// WriteJSON writes v as indented JSON: a command's answer with --json.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
