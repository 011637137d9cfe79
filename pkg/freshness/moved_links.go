package freshness

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/relocate"
	"github.com/ferrydev/ferry/pkg/units"
)

// LinkReaders is the link_rebuilds rule for links retargeted after a
// build (FreshenMoved's Moved.Links): it returns the Cargo dep-info files
// (as LinkRebuilds returns them, relative to target) of the compile units
// in target whose rustc dep-info names an input at or below one of links
// (checkout-relative paths of the checkout at root), and of each compile
// unit without readable rustc dep-info. Emptied (EmptyDepInfo), they
// rebuild in the next build and read through the link's new text.
//
// LinkRebuilds compares the agent's checkout with the base's; here the
// base says nothing of where the link led when the unit was built (the
// agent may have retargeted it before). It need not: rustc's dep-info
// names each input as rustc opened it, through the link, so the units
// that read through a link are known without its old end. Raising the
// ends' mtimes (FreshenMoved) is enough for mtime mode with an end in the
// checkout; this covers checksum mode, where Cargo compares the content
// of the old end it recorded, and a link whose old and new ends both lie
// outside the checkout, whose mtimes are not Ferry's to raise. store is
// the store's directory ("" for none): an absolute input below its
// mnt/src is one a namespace build read from the checkout.
func LinkReaders(target, store, root string, links []string) ([]string, error) {
	if len(links) == 0 {
		return nil, nil
	}
	canon, err := canonicalDir(root)
	if err != nil {
		return nil, fmt.Errorf("link readers: %w", err)
	}
	listing, err := units.List(target)
	if err != nil {
		return nil, fmt.Errorf("link readers: %w", err)
	}
	r := &rebuilds{target: listing.Target, builtAt: []string{canon, filepath.Clean(root)}}
	if store != "" {
		r.builtAt = append(r.builtAt, mntSrc(filepath.Clean(store)))
	}
	through := func(in string) bool {
		in = path.Clean(in)
		for _, l := range links {
			if in == l || strings.HasPrefix(in, l+"/") {
				return true
			}
		}
		return false
	}
	return compileDepInfo(listing, func(u *units.Unit, ws string) bool {
		return r.readsThrough(u, ws, through)
	}), nil
}

// readsThrough reports whether the compile unit u has no readable rustc
// dep-info or names an input of the checkout for which through holds. ws
// is the nested workspace's target dir holding u (ferry-ws/<path>), or ""
// for the checkout's root.
func (r *rebuilds) readsThrough(u *units.Unit, ws string, through func(string) bool) bool {
	dfiles := rustcDepInfoFiles(r.target, u)
	if len(dfiles) == 0 {
		return true
	}
	wsRel := strings.TrimPrefix(strings.TrimPrefix(ws, "ferry-ws"), "/")
	for _, rel := range dfiles {
		data, err := os.ReadFile(filepath.Join(r.target, filepath.FromSlash(rel)))
		if err != nil {
			return true
		}
		files, err := relocate.RustcDepInfoFiles(data)
		if err != nil {
			return true
		}
		for _, f := range files {
			if in, ok := r.checkoutPath(f, wsRel); ok && through(in) {
				return true
			}
		}
	}
	return false
}
