package freshness

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ferrydev/ferry/pkg/store"
	"github.com/ferrydev/ferry/pkg/units"
)

// link_rebuilds (the Freshness modes of the architecture contract).
//
// Leaving a file unstamped cannot show checksum freshness that a symlink
// leads elsewhere than in the base: Cargo compares the content of the file
// it recorded, and it records an input read through a link by its
// canonical path whenever that lies in the input's package or the target
// dir, a path whose content the agent shares with the base. So the
// compile units that read through such a link must be rebuilt some other
// way: their Cargo dep-info (dep-<name> in the fingerprint dir) is
// emptied, which Cargo cannot parse, so it rebuilds the unit and its
// dependents in the same build.
//
// Which units: Cargo's dep-info cannot tell, for the same reason (it holds
// the canonical path, the link's old end), so the rule reads rustc's
// (deps/<crate>-<hash>.d, a build script's in its build/<pkg>-<hash>/),
// which names each input as rustc opened it, through the link. Checked on
// Cargo 1.95 and the 1.97 nightly: for src/data.txt -> real.txt, rustc's
// .d names src/data.txt and dep-lib-p names src/real.txt. A compile unit
// whose rustc dep-info cannot be read or is missing is emptied too;
// rustdoc's units compare mtimes (they have no dep-info in 1.95), and a
// build script's run compares mtimes as well, so unstamped inputs are
// enough for both.
//
// mtime mode needs the rule for one case: a link that leads from one place
// outside the checkout to another. Cargo takes the mtime of the file a
// link leads to, and Ferry freshens only the checkout, so such a retarget
// to an old file compiles nothing (Cargo 1.95). Every other retarget has
// an end in the checkout, which stamping leaves unstamped and freshens.

// LinkRebuilds returns the Cargo dep-info files the link_rebuilds rule
// empties in target (a base's or a seed's target, or an agent's fork), as
// paths relative to target with forward slashes:
// <profile>/.fingerprint/<pkg>-<hash>/dep-<name>, one per compile
// fingerprint of each unit the rule names, sorted. Nested workspaces'
// target dirs (ferry-ws/<path>/) count, their relative inputs taken from
// the workspace at <path>.
//
// The rule applies only when a symlink resolves differently in the two
// checkouts of the input p was verified from (LinkRetargeted); otherwise
// the list is empty. Then it names each compile unit whose rustc dep-info
// names an input in the checkout that resolves differently in the agent's
// checkout and in the base's, unless both lead out of the checkouts into
// store (remap mode's .ferry-target, below which Cargo tracks paths
// relative to the target dir), and each compile unit without readable
// rustc dep-info. store is the store's directory (store.Store.Dir), or ""
// for none: an absolute input below its mnt/src is one a namespace build
// read from the checkout.
//
// It takes the retargeted symlinks from what Verify found: the checkouts
// are not walked again (two lstats per tracked path: about 8 ms of a
// refresh or a spawn on the benchmark's large workspace), and the rule and
// the stamping rest on the same look at them.
func (p *StampPlan) LinkRebuilds(target, store string) ([]string, error) {
	return linkRebuilds(p.in, p.links, target, store)
}

// linkRebuilds is StampPlan.LinkRebuilds given in and its retargeted
// symlinks.
func linkRebuilds(in Input, links []linkCheck, target, store string) ([]string, error) {
	if len(links) == 0 {
		return nil, nil
	}
	agentRoot, baseRoot, err := roots(in)
	if err != nil {
		return nil, err
	}
	listing, err := units.List(target)
	if err != nil {
		return nil, fmt.Errorf("link rebuilds: %w", err)
	}
	r := &rebuilds{
		target:    listing.Target,
		agentRoot: agentRoot,
		baseRoot:  baseRoot,
		differs:   map[string]bool{},
	}
	// The spellings of the checkout an absolute input may carry: where a
	// build at host paths ran (either checkout), and the namespace's mount.
	for _, p := range []string{agentRoot, baseRoot, in.AgentDir, in.BaseDir} {
		r.builtAt = append(r.builtAt, filepath.Clean(p))
	}
	if store != "" {
		store = filepath.Clean(store)
		r.builtAt = append(r.builtAt, mntSrc(store))
		r.stores = append(r.stores, store)
		if c, err := filepath.EvalSymlinks(store); err == nil && c != store {
			r.builtAt = append(r.builtAt, mntSrc(c))
			r.stores = append(r.stores, c)
		}
	}
	return compileDepInfo(listing, r.unitReadsRetargeted), nil
}

// compileDepInfo returns the Cargo dep-info files (dep-*, relative to the
// target) of the compile units of listing for which rebuild reports true,
// given the unit and its workspace's target dir; sorted.
func compileDepInfo(listing *units.Listing, rebuild func(u *units.Unit, ws string) bool) []string {
	var out []string
	for _, u := range listing.Units {
		var compile []string
		for _, f := range u.Fingerprints {
			if units.Kind(f.Name) == "compile" {
				compile = append(compile, path.Join(u.Dir, "dep-"+f.Name))
			}
		}
		if len(compile) > 0 && rebuild(u, listing.Workspace(u.Profile)) {
			out = append(out, compile...)
		}
	}
	sort.Strings(out)
	return out
}

// rebuilds is one LinkRebuilds computation.
type rebuilds struct {
	target              string
	agentRoot, baseRoot string
	builtAt             []string // absolute spellings of the checkout root at build time
	stores              []string
	differs             map[string]bool // by checkout-relative input path
}

// unitReadsRetargeted reports whether the compile unit u must be rebuilt:
// its rustc dep-info is missing or unreadable, or names an input of the
// checkout that resolves differently. ws is the nested workspace's target
// dir holding u (ferry-ws/<path>), or "" for the checkout's root.
func (r *rebuilds) unitReadsRetargeted(u *units.Unit, ws string) bool {
	return r.readsThrough(u, ws, r.resolvesDifferently)
}

// checkoutPath returns the checkout-relative path of the input f as rustc
// named it (relative to the workspace at wsRel, where Cargo runs rustc for
// a path package, or absolute), not cleaned, so that resolve follows a
// ".." after a link as the kernel would; ok is false for an input outside
// the checkout.
func (r *rebuilds) checkoutPath(f, wsRel string) (string, bool) {
	var rel string
	if filepath.IsAbs(f) {
		found := false
		for _, root := range r.builtAt {
			if p, ok := within(root, f); ok {
				rel, found = p, true
				break
			}
		}
		if !found {
			return "", false
		}
	} else {
		rel = filepath.ToSlash(f)
		if wsRel != "" {
			rel = wsRel + "/" + rel
		}
	}
	if c := path.Clean(rel); c == ".." || strings.HasPrefix(c, "../") || path.IsAbs(c) {
		return "", false
	}
	return rel, true
}

// resolvesDifferently reports whether rel leads to different places in the
// two checkouts, unless both lead out of them into the store.
func (r *rebuilds) resolvesDifferently(rel string) bool {
	if d, ok := r.differs[rel]; ok {
		return d
	}
	a, b := resolve(r.agentRoot, rel), resolve(r.baseRoot, rel)
	ka, kb := a.key(r.agentRoot), b.key(r.baseRoot)
	d := ka != kb
	if d && strings.HasPrefix(ka, "out:") && strings.HasPrefix(kb, "out:") && r.inStore(a.end) && r.inStore(b.end) {
		d = false
	}
	r.differs[rel] = d
	return d
}

func (r *rebuilds) inStore(p string) bool {
	for _, s := range r.stores {
		if _, ok := within(s, p); ok {
			return true
		}
	}
	return false
}

// rustcDepInfoFiles lists the rustc dep-info files of the compile unit u
// (relative to target): its outputs named *.d, and those in its build dir
// (a build script's) or, in the build-units layout, its out/.
func rustcDepInfoFiles(target string, u *units.Unit) []string {
	var out []string
	list := func(dir string) {
		ents, _ := os.ReadDir(filepath.Join(target, filepath.FromSlash(dir)))
		for _, e := range ents {
			if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".d") {
				out = append(out, path.Join(dir, e.Name()))
			}
		}
	}
	if u.Layout == units.BuildUnits {
		list(path.Join(u.Paths[0], "out"))
		return out
	}
	for _, p := range u.Paths[1:] {
		switch {
		case strings.HasSuffix(p, ".d"):
			out = append(out, p)
		case path.Dir(p) == path.Join(u.Profile, "build"):
			list(p)
		}
	}
	return out
}

// EmptyDepInfo empties each Cargo dep-info file of files (as LinkRebuilds
// returns them, relative to a target) in dir: a fork's target, or an
// overlay fork's upper dir, where the file and its directories are created
// (over a whiteout, too) so that the overlay shows the empty one. Cargo
// cannot parse an empty dep-info, so it rebuilds the unit, and what
// depends on it, in the next build.
func EmptyDepInfo(dir string, files []string) error {
	for _, rel := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("empty dep-info: %w", err)
		}
		if fi, err := os.Lstat(p); err == nil && !fi.Mode().IsRegular() {
			// A whiteout (or anything else) in an upper dir.
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("empty dep-info: %w", err)
			}
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("empty dep-info: %w", err)
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return fmt.Errorf("empty dep-info: %w", err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("empty dep-info: %w", err)
		}
	}
	return nil
}

// mntSrc is where the namespace sandbox shows a checkout, in the store at
// dir: a unit built there named its inputs below it.
func mntSrc(dir string) string { return (&store.Store{Dir: dir}).MntSrc() }
