//go:build cgo

package inplace

// #include "enter_linux.h"
import "C"

// The markers are the constructor's own (enter_linux.h), so the two sides
// cannot drift apart.
const (
	marker       = C.FERRY_INPLACE
	failedMarker = C.FERRY_INPLACE_FAILED
	stepCreate   = C.FERRY_STEP_CREATE
)

// Linked reports whether this binary enters in place: built with cgo, so
// the constructor runs.
const Linked = true
