package sandbox

import (
	"errors"

	"github.com/ferrydev/ferry/pkg/platform"
)

// noNamespaces is Command's error on goos, an operating system without
// user and mount namespaces (macOS): the step that creates them cannot be
// taken, and the blocker, platform.NoNamespaces, says so and what Ferry
// does instead. It unwraps to errors.ErrUnsupported and, through the
// blocker, to a failure.Blocked error whose hint is the remedy.
func noNamespaces(goos string) *SetupError {
	return &SetupError{Step: platform.StepCreate, Err: errors.ErrUnsupported, Blocker: platform.NoNamespaces(goos)}
}
