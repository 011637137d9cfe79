//go:build !ferrytest

package knobs

// Enabled reports whether this build reads the knobs: not without the
// ferrytest tag.
const Enabled = false

// OverlayHoldValue is "" without the ferrytest tag.
func OverlayHoldValue() string { return "" }

// SkipRemapProbe is false without the ferrytest tag.
func SkipRemapProbe() bool { return false }

// NoDemandIn is false without the ferrytest tag.
func NoDemandIn([]string) bool { return false }

// FailpointArmed is "" without the ferrytest tag.
func FailpointArmed() string { return "" }

// SkipConfine is false without the ferrytest tag.
func SkipConfine() bool { return false }
