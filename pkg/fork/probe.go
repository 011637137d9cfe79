package fork

import (
	"os/exec"

	"github.com/ferrydev/ferry/pkg/platform"
)

// What a backend needs, and whether a store has it, are answered here and
// only here: Select (spawn) and ferry doctor ask the same probes and apply
// the same rule (Auto), so doctor never reports a backend spawn would not
// use. Each probe tries the operation in the store, never reading a kernel
// version or a filesystem name to decide.

// Needs is what a backend needs of the host and the store beyond a
// directory it may write in. As a set of facts about a store ("have"), the
// same fields say what is there.
type Needs struct {
	// Clones: files clone in the store (FICLONE; clonefile on macOS), see
	// ReflinkBlocker.
	Clones bool
	// Overlay: an unprivileged overlay mounts with its layers in the store,
	// and nsenter is there to join the namespace it lives in, see
	// OverlayBlocker.
	Overlay bool
	// Sandbox: builds run in the namespace sandbox. A fork that exists
	// only where it is mounted (the overlay) cannot be used without it.
	Sandbox bool
}

// MetBy reports whether have provides everything n asks for.
func (n Needs) MetBy(have Needs) bool {
	return (!n.Clones || have.Clones) && (!n.Overlay || have.Overlay) && (!n.Sandbox || have.Sandbox)
}

// Auto is the backend auto means where the store and host have what have
// says: the first backend, in the order they are registered (backends),
// whose needs it meets, else the last. Select probes lazily and applies
// it; ferry doctor applies it to its own checks.
func Auto(have Needs) Backend {
	for _, b := range backends {
		if b.Needs().MetBy(have) {
			return b
		}
	}
	return backends[len(backends)-1]
}

// ReflinkBlocker reports what keeps files from cloning in dir: nil when a
// clone works there, a Blocker naming the filesystem when it refuses, an
// error when the probe itself could not be made (dir missing or not
// writable). The probe is platform.ReflinkBlocker, the only one: it clones a
// temporary file into another in dir and removes both.
func ReflinkBlocker(dir string) (*platform.Blocker, error) { return platform.ReflinkBlocker(dir) }

// CanReflink reports whether files in dir can be cloned (ReflinkBlocker
// finds nothing in the way). An error means the probe itself failed.
func CanReflink(dir string) (bool, error) {
	b, err := ReflinkBlocker(dir)
	return err == nil && b == nil, err
}

// OverlayBlocker reports what keeps an overlay agent from working with its
// layers in dir on host h: nil when it works, a Blocker naming the setting
// when not, an error when the probe could not be made. Every process of an
// overlay agent after the first joins its namespace through util-linux
// nsenter (package sandbox), so nsenter is needed as much as the mount
// itself, which h.OverlayBlocker tries in a new user and mount namespace.
// Where there are no namespaces at all (macOS) the blocker says so, not
// that nsenter is missing.
func OverlayBlocker(h platform.Host, dir string) (*platform.Blocker, error) {
	if !h.Namespaces() {
		return h.OverlayBlocker(dir)
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		return &platform.Blocker{
			Check: platform.CheckOverlay, Setting: "nsenter", Value: "not found",
			Problem: "util-linux nsenter, which joins an overlay agent's namespace, is not on PATH.",
			Remedy:  "Install util-linux (apt-get install util-linux, dnf install util-linux), or use backend copy.",
		}, nil
	}
	return h.OverlayBlocker(dir)
}

// overlayBlocker is OverlayBlocker on this machine; a variable so tests can
// make it refuse.
var overlayBlocker = func(dir string) (*platform.Blocker, error) { return OverlayBlocker(platform.Real(), dir) }
