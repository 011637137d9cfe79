//go:build !linux

package fold

import (
	"errors"
	"time"
)

// Stats counts what Fold did.
type Stats struct {
	Own, Linked, Symlinks, Dirs, Whiteouts int
	OwnBytes                               int64
	Duration                               time.Duration
}

// Fold needs overlayfs's layers, which only Linux makes.
func Fold(lower, upper string) (Stats, error) {
	return Stats{}, errors.New("folding an overlay's layers needs Linux")
}

// Layers is an overlay of one lower dir and its upper, unmounted.
type Layers struct{ Lower, Upper string }

// Show finds nothing where overlays do not exist.
func (l Layers) Show(rel string) (string, bool) { return "", false }

// Hide needs overlayfs.
func (l Layers) Hide(rel string) error { return errors.New("overlay layers need Linux") }

// Prefold needs overlayfs's layers, which only Linux makes.
func Prefold(lower, next string) (Stats, error) {
	return Stats{}, errors.New("folding an overlay's layers needs Linux")
}

// Merge needs overlayfs's layers, which only Linux makes.
func Merge(upper, next string, laid Stats) (Stats, error) {
	return Stats{}, errors.New("folding an overlay's layers needs Linux")
}
