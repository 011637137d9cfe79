// Package confine decides what an agent's or a base's sandbox makes of the
// rest of the host: which host paths stay writable, which become private
// (layers over $HOME and $CARGO_HOME, whose writes land in the agent's
// store dir while the host's files still show through, and a $TMPDIR of
// the sandbox's own), and which stay the host's and read-only inside
// those. Package sandbox makes the mounts (its confine.go says how); this
// package says which, from what the agent (or base) recorded when it was
// made and from the command's environment.
//
// The rule is an allowlist: everything is read-only but the writable roots
// (the agent's worktree, its target, /tmp, [sandbox] writable) and the
// private ones. So a build script can plant nothing that runs later outside a
// sandbox (a git hook, a shell startup file, ~/.cargo/config.toml, Ferry's
// shim, cargo, a toolchain), and cannot change an extracted registry
// source that another build then compiles: its writes to $HOME and
// $CARGO_HOME land in its own layer, which `ferry rm` removes with the
// agent. Inside the private roots the repository's git dirs, the other
// agents' worktrees, the toolchains ($RUSTUP_HOME, $CARGO_HOME/bin) and
// Ferry's own binaries are kept the host's, read-only.
//
// What a host allows is probed once, when the agent (or base) is made
// (Decide), and recorded with what it leaves unconfined and why (Gaps);
// every later session follows the record. A host that cannot mount a
// private layer keeps $HOME and $CARGO_HOME writable rather than break the
// builds that write there; one without mount_setattr (Linux before 5.12)
// seals only the store, as Ferry did before it confined the host.
package confine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

// Record is what an agent or a base records of its confinement when it is
// made, and every session of it follows; its format is package record's,
// with the rest of agent.json and base.json.
type Record = record.Confinement

// Gap is one thing a sandbox leaves unconfined.
type Gap = record.Gap

// probe builds a sandbox from p and exits; a variable so tests can block
// it.
var probe = func(p sandbox.Plan) error {
	c, err := sandbox.Command(p)
	if err != nil {
		return err
	}
	return c.Run()
}

// Decide probes what this host lets a sandbox of the store parent storeParent
// confine, with scratch (a directory on the store's filesystem, where
// agents' private layers will live) for the probe's layer and env the
// environment builds will have ($HOME). writable and readOnly are recorded
// as they are.
func Decide(storeParent, scratch string, env []string, writable, readOnly []string) Record {
	r := Record{Writable: clean(writable), ReadOnly: clean(readOnly)}
	world := sandbox.Plan{World: true, Store: storeParent, Dir: "/"}
	if err := probe(world); err != nil {
		r.Gaps = append(r.Gaps, Gap{
			What: "the host outside the store is writable from builds",
			Why:  "Ferry could not make it read-only in the sandbox: " + reason(err),
			Fix:  "Linux 5.12 or later has mount_setattr, which it needs",
		})
		return r
	}
	r.World = true
	lower := home(env)
	if lower == "" {
		lower = scratch
	}
	dir, err := os.MkdirTemp(scratch, "confine-probe-")
	if err != nil {
		r.Gaps = append(r.Gaps, layerGap(err))
		return r
	}
	defer removeTree(dir)
	up, work := store.PrivateFiles(dir).Slot(0).Layer(lower)
	if err := errors.Join(os.MkdirAll(up, 0o755), os.MkdirAll(work, 0o755)); err != nil {
		r.Gaps = append(r.Gaps, layerGap(err))
		return r
	}
	layered := world
	layered.Private = []sandbox.Layer{{Root: lower, Upper: up, Work: work}}
	if err := probe(layered); err != nil {
		r.Gaps = append(r.Gaps, layerGap(err))
		return r
	}
	r.Layers = true
	return r
}

func layerGap(err error) Gap {
	return Gap{
		What: "builds can write $HOME and $CARGO_HOME on the host (toolchains, git dirs and Ferry's binaries stay read-only)",
		Why:  "Ferry could not mount a private layer over them: " + reason(err),
		Fix:  "an unprivileged overlay needs Linux 5.11 or later and a store on a filesystem with user extended attributes (ext4, xfs, btrfs); see `ferry doctor`",
	}
}

func reason(err error) string {
	var se *sandbox.SetupError
	if errors.As(err, &se) {
		return se.Error()
	}
	return err.Error()
}

// Unconfined is the gap of an agent that builds at host paths: no
// sandbox at all.
var Unconfined = Gap{
	What: "everything the user can write",
	Why:  "the agent builds at host paths, without the namespace sandbox",
	Fix:  "`ferry doctor` shows what blocks the sandbox",
}

// Legacy is the gap of an agent recorded before Ferry confined the host.
var Legacy = Gap{
	What: "the host outside the store is writable from builds",
	Why:  "the agent was made by a Ferry that confined only the store",
	Fix:  "spawn it again (`ferry rm`, then `ferry spawn`) to confine it",
}

// Session is one command's confinement: its writable, private and
// read-only roots, from its environment.
type Session struct {
	rec      *Record
	private  store.Private
	writable []string
	readOnly []string
	layers   []string // the roots of its private layers
	cargo    string   // $CARGO_HOME, resolved
}

// For is the confinement of a command with environment env under rec,
// whose private layers and directories live in private, and whose own
// writable roots (the worktree, the warm build's records) are writable and
// read-only paths inside them (the worktree's git link) readOnly.
func For(rec *Record, env []string, private store.Private, writable, readOnly []string) *Session {
	x := &Session{rec: rec, private: private}
	x.writable = clean(append(append([]string{}, writable...), rec.Writable...))
	ro := append(append([]string{}, readOnly...), rec.ReadOnly...)
	h := home(env)
	cargo := dir(lookup(env, "CARGO_HOME"))
	if cargo == "" && h != "" {
		cargo = filepath.Join(h, ".cargo")
	}
	cargo = resolved(cargo)
	x.cargo = cargo
	rustup := dir(lookup(env, "RUSTUP_HOME"))
	if rustup == "" && h != "" {
		rustup = filepath.Join(h, ".rustup")
	}
	if cargo != "" {
		ro = append(ro, filepath.Join(cargo, "bin")) // $CARGO_HOME's: not a store path
	}
	ro = append(ro, resolved(rustup), ferryBin())
	for _, root := range []string{h, cargo} {
		if root == "" || root == "/" || isDir(root) != nil || inAny(root, x.writable) {
			continue
		}
		if inAny(root, x.layers) {
			continue // $CARGO_HOME in $HOME: $HOME's layer covers it
		}
		x.layers = append(x.layers, root)
	}
	if !rec.Layers {
		// Writable rather than read-only: Ferry never breaks a build
		// that writes $HOME when it cannot give it a layer (a Gap says
		// so).
		x.writable = append(x.writable, x.layers...)
		x.layers = nil
	}
	// /tmp is where agent tools and builds hand each other files
	// (`cargo run -- --out /tmp/x`): it stays the host's, writable. What
	// the build's own tools make there (rustc's link files, a build
	// script's scratch) goes to $TMPDIR, the sandbox's own.
	for _, root := range []string{"/tmp", "/var/tmp"} {
		if root = resolved(root); isDir(root) == nil && root != "/" {
			x.writable = append(x.writable, root)
		}
	}
	x.readOnly = clean(ro)
	return x
}

// Apply gives p (a plan with Store set, for a store whose canonical
// $TMPDIR mountpoint is tmp) the session's roots; its private layers come
// from Layers, for the slot the session holds. $TMPDIR is the sandbox's
// own directory, at the same canonical path for every agent and base (a
// build script that reads it sees the same value everywhere), bound there
// from the private dir's tmp/.
func (x *Session) Apply(p *sandbox.Plan, tmp string) error {
	p.World = true
	p.Writable = append(p.Writable, x.writable...)
	p.ReadOnly = append(p.ReadOnly, x.readOnly...)
	if err := os.MkdirAll(x.private.Tmp(), 0o700); err != nil {
		return err
	}
	p.Binds = append(p.Binds, sandbox.Bind{Source: x.private.Tmp(), Target: tmp})
	env := make([]string, 0, len(p.Env)+1)
	for _, kv := range p.Env {
		if !strings.HasPrefix(kv, "TMPDIR=") {
			env = append(env, kv)
		}
	}
	p.Env = append(env, "TMPDIR="+tmp)
	return nil
}

// PrivateCargoHome reports whether the session's $CARGO_HOME is in a
// private layer, and names it.
func (x *Session) PrivateCargoHome() (string, bool) {
	return x.cargo, x.cargo != "" && inAny(x.cargo, x.layers)
}

// HasLayers reports whether the session mounts private layers.
func (x *Session) HasLayers() bool { return len(x.layers) > 0 }

// Layers returns the session's private layers in slot n. With ready, it
// readies them for a mount first; the caller holds the slot (its lock, or
// the only namespace that mounts them). Without, it only names them, as a
// joined namespace must show them.
func (x *Session) Layers(n int, ready bool) ([]sandbox.Layer, error) {
	slot := x.private.Slot(n)
	var out []sandbox.Layer
	for _, root := range x.layers {
		up, work := slot.Layer(root)
		out = append(out, sandbox.Layer{Root: root, Upper: up, Work: work})
	}
	if ready && len(out) > 0 {
		if err := readySlot(slot, out); err != nil {
			return nil, fmt.Errorf("ready the private layers in %s: %w", slot.Dir, err)
		}
	}
	return out, nil
}

// home is $HOME as a resolved directory, or "".
func home(env []string) string {
	h := resolved(dir(lookup(env, "HOME")))
	if h == "/" || isDir(h) != nil {
		return ""
	}
	return h
}

// ferryBin is the directory of this binary, resolved: where Ferry's
// binaries are installed side by side.
func ferryBin() string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Dir(resolved(self))
}

func lookup(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

// dir is p when it is an absolute path, cleaned; "" otherwise.
func dir(p string) string {
	if !filepath.IsAbs(p) {
		return ""
	}
	return filepath.Clean(p)
}

// resolved is p with its links resolved, or p when it does not resolve.
func resolved(p string) string {
	if p == "" {
		return ""
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

func isDir(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return errors.New(p + " is not a directory")
	}
	return nil
}

// clean returns the absolute paths of ps, cleaned, once each.
func clean(ps []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range ps {
		if p = dir(p); p == "" || seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	return out
}

func inside(p, root string) bool {
	return p == root || strings.HasPrefix(p, root+"/")
}

func inAny(p string, roots []string) bool {
	for _, r := range roots {
		if inside(p, r) {
			return true
		}
	}
	return false
}

// Repository returns the paths of repo a sandbox keeps the host's and
// read-only inside its private layers: the main checkout and the common
// git dir (its hooks, config and refs), whatever the worktree is.
func Repository(repo *git.Repo) []string {
	var out []string
	if wts, err := repo.Worktrees(); err == nil && len(wts) > 0 && !wts[0].Bare {
		out = append(out, resolved(wts[0].Path))
	}
	if common, err := repo.CommonDir(); err == nil {
		out = append(out, resolved(common))
	}
	return out
}
