//go:build ferrytest

package knobs

import (
	"os"
	"strings"
)

// Enabled reports whether this build reads the knobs (the ferrytest tag).
const Enabled = true

// OverlayHoldValue is the OverlayHold knob's value, "" when unset.
func OverlayHoldValue() string { return os.Getenv(OverlayHold) }

// SkipRemapProbe reports whether the RemapNoProbe knob is set.
func SkipRemapProbe() bool { return os.Getenv(RemapNoProbe) == "1" }

// NoDemandIn reports whether the NoDemand knob is set to 1 in env.
func NoDemandIn(env []string) bool {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], NoDemand+"="); ok {
			return v == "1"
		}
	}
	return false
}

// FailpointArmed is the Failpoint knob's value, "" when unset.
func FailpointArmed() string { return os.Getenv(Failpoint) }

// SkipConfine reports whether the NoConfine knob is set.
func SkipConfine() bool { return os.Getenv(NoConfine) == "1" }
