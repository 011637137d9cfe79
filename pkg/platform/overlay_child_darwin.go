package platform

import "errors"

// runOverlayChild stands for the overlay probe's child, which needs a user
// and mount namespace: creating them is the step that fails on macOS.
// OverlayBlocker stops at UsernsBlocker before it gets here.
func runOverlayChild(string) (step string, cause, err error) {
	return StepCreate, errors.ErrUnsupported, nil
}
