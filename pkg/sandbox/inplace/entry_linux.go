//go:build cgo

package inplace

// #include "enter_linux.h"
import "C"

import "github.com/ferrydev/ferry/pkg/sandbox"

// The markers are the constructor's own (enter_linux.h), so the two sides
// cannot drift apart.
const (
	marker       = C.FERRY_INPLACE
	joinMarker   = C.FERRY_INPLACE_JOIN
	failedMarker = C.FERRY_INPLACE_FAILED
	stepCreate   = C.FERRY_STEP_CREATE
	childArg     = C.FERRY_CHILD
	joinArg      = C.FERRY_JOIN
	stepJoin     = C.FERRY_STEP_JOIN
)

// The constructor joins sandbox children to live namespaces (an overlay
// agent's) in place of nsenter.
func init() { sandbox.JoinInConstructor = true }

// Linked reports whether this binary enters in place: built with cgo, so
// the constructor runs.
const Linked = true
