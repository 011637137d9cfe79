//go:build !linux || !cgo

package inplace

// Without cgo (or off Linux) the constructor is not linked: Exec refuses,
// and the caller starts a sandbox child instead.
const (
	marker       = ""
	joinMarker   = ""
	failedMarker = ""
	stepCreate   = ""
	Linked       = false
)
