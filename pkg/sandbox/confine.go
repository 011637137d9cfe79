package sandbox

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Confinement: a read-only host with named writable roots.
//
// The namespace sandbox shows every agent its checkout and target at the
// canonical paths; confinement is what it makes of the rest of the host,
// so that nothing a build runs can change what runs outside it later (a
// git hook, a shell startup file, Ferry's shim, cargo, a toolchain, an
// extracted registry source another build compiles). A plan with World
// gets, in its mount namespace only:
//
//   - the whole host read-only (one recursive mount_setattr of /), except
//     /proc (a process's own knobs, and the maps a nested user namespace
//     writes) and what the plan names;
//   - Writable: real directories that stay writable (the agent's worktree,
//     the warm build's records, [sandbox] writable); each is bound onto
//     itself so that it is a mount of its own, made writable again;
//   - Private: private layers, overlays whose lower is a host directory
//     ($HOME, $CARGO_HOME) and whose upper is the agent's, in its store
//     dir: the sandbox reads the host's files and its writes land in the
//     upper, seen by this agent only;
//   - ReadOnly: paths inside a writable root or a private layer that stay
//     the host's and read-only: the repository's git dirs (hooks, config,
//     refs), toolchains, Ferry's binaries, other agents' worktrees;
//   - /dev/shm: a tmpfs of its own.
//
// A private layer covers everything below its root,
// the store and worktrees under $HOME included. So the sandbox child
// covers one root at a time, deepest first, and puts back on top, from
// descriptors opened just before, what must stay the host's there (the
// store, writable and read-only paths, deeper roots already covered, the
// host's own mounts below the root), before it makes the canonical mounts
// and turns the host read-only. An overlay whose upper lies inside its own
// lower (the store under $HOME) mounts: the kernel refuses only a lookup of
// the upper through the overlay, and the store put back on top means no
// lookup gets there.
//
// Without World (an agent spawned before confinement, a kernel without
// mount_setattr) a plan with Store only seals the store parent, as before:
// read-only but for Writable and the canonical mounts.
//
// Both the Go sandbox child and the shim's C constructor (package inplace)
// make the mounts from the same list of steps, compiled here once, in the
// caller, so that the two cannot drift apart.

// Layer is a private layer: an overlay on Root with Root itself as the
// lower layer and the agent's Upper and Work (on one filesystem, outside
// Root or inside it) taking the writes. It is mounted volatile (see
// Overlay.Volatile): whoever plans it clears the marker first.
type Layer struct {
	Root  string `json:"root"`
	Upper string `json:"upper"`
	Work  string `json:"work"`
}

// Overlay is the overlay that makes l.
func (l Layer) Overlay() Overlay {
	return Overlay{Lower: l.Root, Upper: l.Upper, Work: l.Work, Target: l.Root, Volatile: true}
}

// Step operations, as both the Go child and the C constructor read them.
const (
	opRoot     = "root"     // A: (re)open the store as the root paths below it resolve beneath
	opPin      = "pin"      // A: path, B: slot; open A now, for a later bind from @slot
	opCheck    = "check"    // A: a path below the store that must resolve without a link
	opBind     = "bind"     // A: source (@slot or a path), B: target, C: flags (r recursive, ? skip a missing source)
	opCover    = "cover"    // A: a root just covered: what is put back on it resolves beneath it, without a link
	opKeep     = "keep"     // A: @slot, B: a path below the root just covered: put the pinned host path back there
	opOverlay  = "overlay"  // A: target, B: options, C: options without volatile (the fallback), or ""
	opTmpfs    = "tmpfs"    // A: target, B: options; skipped where A is not a directory
	opMask     = "mask"     // A: a path below the store to hide
	opReadOnly = "ro"       // A: path, B: r for the whole tree below it
	opWritable = "rw"       // A: path, C: ? to skip a missing one
	opDropCaps = "dropcaps" // the command may not mount: drop CAP_SYS_ADMIN from its bounding set
)

// Step is one step of a sandbox's setup (see Compile).
type Step struct {
	Op   string `json:"op"`
	A    string `json:"a,omitempty"`
	B    string `json:"b,omitempty"`
	C    string `json:"c,omitempty"`
	Name string `json:"name"` // the setup step a failure names
}

// Steps is a plan's setup, compiled for a created namespace.
func (c *Cmd) Steps() []Step { return c.steps }

// Layers are the private layers a created command's namespace mounts.
func (c *Cmd) Layers() []Layer {
	if c.created == nil {
		return nil
	}
	return c.created.Private
}

// exists reports whether a host path exists; a variable for tests.
type exists func(path string) bool

// compile turns p into the steps that make its namespace. mounts are the
// mount points the caller sees (its mountinfo): a host mount below a
// covered root is put back on top of it. exist tells which host paths
// exist. p's paths are clean and absolute (checkPaths).
func compile(p Plan, mounts []string, exist exists) []Step {
	var s []Step
	add := func(op, a, b, c, name string) { s = append(s, Step{Op: op, A: a, B: b, C: c, Name: name}) }
	if p.Store != "" {
		add(opRoot, p.Store, "", "", "open the store")
	}

	covers := append([]Layer{}, p.Private...)
	sort.SliceStable(covers, func(i, j int) bool {
		di, dj := depth(covers[i].Root), depth(covers[j].Root)
		if di != dj {
			return di > dj
		}
		return covers[i].Root < covers[j].Root
	})
	// What must stay the host's wherever a cover falls on it.
	var keep []string
	if p.Store != "" {
		keep = append(keep, p.Store)
	}
	keep = append(keep, p.Writable...)
	keep = append(keep, p.ReadOnly...)
	keep = append(keep, mounts...)
	var done []string
	slot := 0
	for _, c := range covers {
		var under []string
		for _, q := range append(append([]string{}, keep...), done...) {
			if below(q, c.Root) && q != c.Root && (exist(q) || contains(done, q)) {
				under = append(under, q)
			}
		}
		under = outermost(under)
		for i, q := range under {
			add(opPin, q, strconv.Itoa(slot+i), "", "open "+q)
		}
		ov := c.Overlay()
		add(opCheck, ov.Upper, "", "", "open "+ov.Upper)
		add(opCheck, ov.Work, "", "", "open "+ov.Work)
		plain := ov
		plain.Volatile = false
		add(opOverlay, c.Root, ov.Options(), plain.Options(), "mount the private layer on "+c.Root)
		if len(under) > 0 {
			add(opCover, c.Root, "", "", "open "+c.Root)
		}
		for i, q := range under {
			add(opKeep, "@"+strconv.Itoa(slot+i), q, "", "keep "+q+" as the host has it")
		}
		slot += len(under)
		done = append(done, c.Root)
	}
	if len(covers) > 0 && p.Store != "" {
		// Paths below the store resolve in the store now seen at its path.
		add(opRoot, p.Store, "", "", "open the store")
	}

	writable := sortedByDepth(p.Writable)
	// A store inside a writable root (below /tmp, say) is a mount of its
	// own, read-only, made among the writable roots by depth: the ones
	// below it (the warm build's records, worktrees kept in the store
	// parent) are writable again on top of it.
	selfBinds := writable
	storeInside := p.World && p.Store != "" && inAny(p.Store, writable) && !contains(writable, p.Store)
	if storeInside {
		selfBinds = sortedByDepth(append(append([]string{}, writable...), p.Store))
	}
	for _, w := range selfBinds {
		if storeInside && w == p.Store {
			add(opBind, w, w, "r", "keep the store "+w+" read-only")
		} else {
			add(opBind, w, w, "r?", "keep "+w+" writable")
		}
		if p.Store != "" && below(p.Store, w) {
			// The store is seen in this new mount now (a copy of the
			// one the root was opened in).
			add(opRoot, p.Store, "", "", "open the store")
		}
	}
	if p.World {
		for _, r := range sortedByDepth(p.ReadOnly) {
			if inAny(r, writable) {
				add(opBind, r, r, "r?", "keep "+r+" read-only")
			}
		}
	}
	for _, b := range p.Binds {
		add(opBind, b.Source, b.Target, "r", "bind-mount "+b.Source+" on "+b.Target)
	}
	for _, o := range p.Overlays {
		dirs := []string{o.Lower, o.Upper, o.Work, o.Target}
		if o.View != "" {
			dirs = append(dirs, o.View)
		}
		for _, d := range dirs {
			add(opCheck, d, "", "", "open "+d)
		}
		fallback := ""
		if o.Volatile {
			plain := o
			plain.Volatile = false
			fallback = plain.Options()
		}
		add(opOverlay, o.Target, o.Options(), fallback, "mount an overlay on "+o.Target)
		if o.View != "" {
			add(opBind, o.Target, o.View, "", "bind the overlay on "+o.Target+" onto "+o.View)
		}
	}

	if p.World {
		add(opReadOnly, "/", "r", "", "make the host read-only")
		for _, w := range writable {
			add(opWritable, w, "", "?", "keep "+w+" writable")
		}
		for _, b := range p.Binds {
			add(opWritable, b.Target, "", "", "keep "+b.Target+" writable")
		}
		for _, o := range p.Overlays {
			add(opWritable, o.Target, "", "", "keep "+o.Target+" writable")
			if o.View != "" {
				add(opWritable, o.View, "", "", "keep "+o.View+" writable")
			}
		}
		for _, c := range covers {
			add(opWritable, c.Root, "", "", "keep "+c.Root+" writable")
		}
		add(opWritable, "/proc", "", "?", "keep /proc writable")
	} else if p.Store != "" {
		add(opBind, p.Store, p.Store, "r", "bind the store "+p.Store+" onto itself")
		add(opReadOnly, p.Store, "", "", "make the store "+p.Store+" read-only")
		// Paths below the store resolve in the sealed store now.
		add(opRoot, p.Store, "", "", "open the store")
	}
	for _, m := range p.Masked {
		add(opMask, m, "", "", "mask "+m)
	}
	if p.World {
		add(opTmpfs, "/dev/shm", "mode=1777", "", "give the sandbox a /dev/shm of its own")
	}
	if p.World || p.Store != "" {
		add(opDropCaps, "", "", "", "drop the capability to mount")
	}
	return s
}

// checkPaths refuses a plan whose paths are not clean and absolute: the
// steps compare and nest them as strings.
func checkPaths(p Plan) error {
	paths := append([]string{}, p.Writable...)
	paths = append(paths, p.ReadOnly...)
	paths = append(paths, p.Masked...)
	if p.Store != "" {
		paths = append(paths, p.Store)
	}
	for _, b := range p.Binds {
		paths = append(paths, b.Source, b.Target)
	}
	for _, l := range p.Private {
		paths = append(paths, l.Root, l.Upper, l.Work)
	}
	for _, q := range paths {
		if !filepath.IsAbs(q) || filepath.Clean(q) != q {
			return fmt.Errorf("sandbox: %q is not a clean absolute path", q)
		}
	}
	for _, l := range p.Private {
		if l.Root == "/" {
			return fmt.Errorf("sandbox: a private layer cannot cover /")
		}
	}
	return nil
}

// covered reports whether p covers any root, so that the host's mounts below
// the roots matter.
func (p Plan) covered() bool { return len(p.Private) > 0 }

// below reports whether p is dir or lies below it.
func below(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// inAny reports whether p lies strictly below one of dirs.
func inAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if p != d && below(p, d) {
			return true
		}
	}
	return false
}

// outermost returns the paths of ps that lie below no other of them, once
// each, sorted: putting one back brings the ones below it along.
func outermost(ps []string) []string {
	var out []string
	for _, p := range ps {
		inner := false
		for _, q := range ps {
			if q != p && below(p, q) {
				inner = true
				break
			}
		}
		if !inner && !contains(out, p) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func contains(ps []string, p string) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// sortedByDepth returns ps with the shallowest first (a root before what
// lies below it), ties by name.
func sortedByDepth(ps []string) []string {
	out := append([]string{}, ps...)
	sort.SliceStable(out, func(i, j int) bool {
		if di, dj := depth(out[i]), depth(out[j]); di != dj {
			return di < dj
		}
		return out[i] < out[j]
	})
	return out
}

func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}
