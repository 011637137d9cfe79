// Package failure gives Ferry's errors a category and a hint.
//
// Library packages return wrapped errors; where the cause is something a user
// can act on, they wrap it in an *Error carrying a Kind (which decides the
// process exit code) and a Hint (what to do about it). Only the command layer
// prints: it walks the chain with KindOf and HintOf and writes the error:,
// caused by: and hint: lines.
//
// A full filesystem is the one failure recognised by its cause rather than
// by a wrapper: ENOSPC can surface from any write (a warm build, a fork, a
// state file, git), where the code that hit it has no better advice than
// "free some space", so any chain holding syscall.ENOSPC is kind NoSpace,
// and the printer names the filesystem and its free space (see Space).
package failure

import (
	"errors"
	"fmt"
	"syscall"
)

// Kind is the category of a failure. Each kind has one exit code.
type Kind int

const (
	// Internal is an unexpected failure: a bug or an I/O error nobody planned for.
	Internal Kind = iota
	// Usage is bad input: flags, ferry.toml, a revision that names no commit.
	Usage
	// Prereq is a missing prerequisite: not in a git repository, no Cargo.toml,
	// git or cargo not found.
	Prereq
	// Blocked is a host that refuses what Ferry needs (user namespaces, overlay).
	Blocked
	// BuildFailed is a warm command that exited non-zero.
	BuildFailed
	// Refused is an unsafe or conflicting state Ferry will not act on.
	Refused
	// Unimplemented is a command that does not exist yet.
	Unimplemented
	// Interrupted is a run stopped by a signal.
	Interrupted
	// NoSpace is a filesystem that ran full (ENOSPC): the warm build, a
	// fork, a state file or git could not write.
	NoSpace

	// numKinds counts the kinds above: a new kind goes before it.
	numKinds
)

// Kinds returns every kind, in the order they are declared.
func Kinds() []Kind {
	kinds := make([]Kind, numKinds)
	for i := range kinds {
		kinds[i] = Kind(i)
	}
	return kinds
}

// ExitCode returns the documented process exit code for k.
func (k Kind) ExitCode() int {
	switch k {
	case Usage:
		return 2
	case Prereq:
		return 3
	case Blocked:
		return 4
	case BuildFailed:
		return 5
	case Refused:
		return 6
	case Unimplemented:
		return 7
	case NoSpace:
		return 8
	case Interrupted:
		return 130
	}
	return 1
}

// String names the kind as it appears in --json output.
func (k Kind) String() string {
	switch k {
	case Usage:
		return "usage"
	case Prereq:
		return "prerequisite"
	case Blocked:
		return "blocked"
	case BuildFailed:
		return "build-failed"
	case Refused:
		return "refused"
	case Unimplemented:
		return "unimplemented"
	case NoSpace:
		return "no-space"
	case Interrupted:
		return "interrupted"
	}
	return "internal"
}

// ExitCodes documents every exit code, for --help.
const ExitCodes = `Exit codes:
  0    success
  1    internal error
  2    bad input (flags, ferry.toml, a revision that names no commit)
  3    missing prerequisite (git repository, Cargo.toml, git, cargo)
  4    the host blocks what Ferry needs (user namespaces); see the hint
  5    a warm build command failed
  6    refused: an unsafe or conflicting state
  7    not implemented yet
  8    a filesystem is full; the error names it and its free space
  130  interrupted`

// Error is a failure with a category and an optional hint.
type Error struct {
	Kind Kind
	Msg  string // what failed, in the user's terms
	Hint string // what to do about it; may be empty
	Err  error  // the cause; may be nil
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Msg
	}
	if e.Msg == "" {
		return e.Err.Error()
	}
	return e.Msg + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// New returns an *Error without a cause.
func New(kind Kind, hint, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...), Hint: hint}
}

// Wrap returns an *Error with cause err.
func Wrap(kind Kind, err error, hint, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...), Hint: hint, Err: err}
}

// KindOf returns NoSpace when err's chain holds ENOSPC, else the kind of the
// outermost *Error in err's chain, else Refused for a *DamagedError in it,
// or Internal.
func KindOf(err error) Kind {
	if err != nil && errors.Is(err, syscall.ENOSPC) {
		return NoSpace
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	if AsDamaged(err) != nil {
		return Refused
	}
	return Internal
}

// HintOf returns the first non-empty hint in err's chain.
func HintOf(err error) string {
	for err != nil {
		if e, ok := err.(*Error); ok && e.Hint != "" {
			return e.Hint
		}
		if d, ok := err.(*DamagedError); ok {
			return d.Hint()
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, c := range j.Unwrap() {
				if h := HintOf(c); h != "" {
					return h
				}
			}
			return ""
		}
		err = errors.Unwrap(err)
	}
	return ""
}
