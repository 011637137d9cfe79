package failure

import (
	"errors"
	"fmt"
)

// DamagedError is a state file Ferry wrote and cannot read back: truncated,
// not what its name holds (base.json, agent.json, current, a key, an
// event). Nothing Ferry writes can be left so by a crash (every state file
// is replaced atomically), so a damaged file was changed by something
// else: a disk that lost blocks, a hand edit, another program. It is kind
// Refused wherever it surfaces, unless a wrapper says otherwise: a command
// that needs the file names it and Fix (what repairs it) and changes
// nothing, and a command that does not need it goes on without it.
type DamagedError struct {
	Path string // the file
	Err  error  // why it cannot be read
	// Fix says what repairs it, as a hint: a command that rebuilds or
	// removes what the file describes. Empty: the printer says to
	// remove it.
	Fix string
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("%s is damaged: %v", e.Path, e.Err)
}

func (e *DamagedError) Unwrap() error { return e.Err }

// Hint is the fix, or what to do without one.
func (e *DamagedError) Hint() string {
	if e.Fix != "" {
		return e.Fix
	}
	return "something other than Ferry changed it; move it aside (`mv " + e.Path + " " + e.Path + ".damaged`) and run the command again"
}

// Damaged wraps err, the reason path cannot be read, as a *DamagedError
// whose fix is fix.
func Damaged(path string, err error, fix string) *DamagedError {
	return &DamagedError{Path: path, Err: err, Fix: fix}
}

// AsDamaged returns the *DamagedError in err's chain, or nil.
func AsDamaged(err error) *DamagedError {
	var d *DamagedError
	if errors.As(err, &d) {
		return d
	}
	return nil
}
