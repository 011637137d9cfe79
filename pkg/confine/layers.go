package confine

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

// Private layers are mounted volatile, as overlay forks are (package
// lifecycle says why: without it the end of every namespace would sync the whole
// filesystem of the store, hundreds of milliseconds under load). The
// kernel then marks each work dir and refuses to mount it again, and after
// a crash an upper may hold torn files with fresh mtimes: a registry source
// cut short, which Cargo would compile. So before each mount readySlot
// clears the marks when the slot's layers were last mounted in this boot
// (the page cache still holds what was written), and otherwise empties the
// uppers: the agent's $HOME is the host's again, and Cargo downloads what
// it needs anew.

// readySlot readies the layers of slot for a mount; the caller holds the
// slot.
func readySlot(slot store.PrivateSlot, layers []sandbox.Layer) error {
	boot := platform.BootID()
	last, err := os.ReadFile(slot.Boot)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	same := boot != "" && string(bytes.TrimSpace(last)) == boot
	for _, l := range layers {
		// The kernel leaves work/work at mode 0, which hides the mark
		// from a process without CAP_DAC_OVERRIDE: open it up first.
		inner := filepath.Join(l.Work, "work") // overlayfs's own layout: not a store path
		if _, err := os.Lstat(inner); err == nil {
			if err := os.Chmod(inner, 0o700); err != nil {
				return err
			}
			_, err := os.Lstat(l.Overlay().VolatileMarker())
			if marked := err == nil; marked && !same {
				if err := removeTree(l.Upper); err != nil {
					return err
				}
			}
			// The overlay makes work/work again at the mount.
			if err := removeTree(inner); err != nil {
				return err
			}
		}
		for _, d := range []string{l.Upper, l.Work} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
	}
	if !same && boot != "" {
		return atomicfile.WriteFile(slot.Boot, []byte(boot+"\n"), 0o644)
	}
	return nil
}

func removeTree(dir string) error { return platform.RemoveTree(dir) }
