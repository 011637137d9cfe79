package base

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/cargoenv"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/freshness"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/store"
	"github.com/ferrydev/ferry/pkg/units"
)

// Seeding. A new commit's base need not start cold: its warm build may start
// from the target of a ready base of another commit, as an agent's build
// starts from its base's, so it rebuilds only what the commit changed.
// Invariant 1 applies to bases too: a seeded base must equal what a cold
// build of its commit would give. Two things make that hold.
//
// The checkout is stamped as an agent's is: a tracked file gets the stamp
// time only when freshness.Verify proves it identical to the seed's checkout,
// and everything else is made newer than the seed's build, so Cargo rebuilds
// exactly the units whose inputs differ.
//
// And the seed must select the same units: Cargo keeps every unit it ever
// built in a target and never deletes one, so a target seeded across a
// change of manifests, lockfile or Cargo configuration would keep units the
// commit no longer has (a removed dependency, an old version), and a base is
// a target that holds only its own commit's units. So the seed has the same
// unit inputs (UnitInputs: every manifest, lockfile, Cargo configuration and
// toolchain file of the commit, the Cargo configurations above the store,
// Cargo's flag variables, CARGO_INCREMENTAL, whether CI or TF_BUILD is set,
// and the version of this list), under which Cargo selects the same units,
// or its warm build was observed and the new build's unused units are pruned
// (see package units).

// unitInputsVersion versions the list UnitInputs hashes: raising it makes
// every base recorded under an older list match none.
const unitInputsVersion = 1

// unitFile reports whether a tracked path is a unit input: a manifest, a
// lockfile, a Cargo configuration or a toolchain file, at any depth.
func unitFile(p string) bool {
	switch path.Base(p) {
	case "Cargo.toml", "Cargo.lock", "rust-toolchain", "rust-toolchain.toml":
		return true
	case "config", "config.toml":
		return path.Base(path.Dir(p)) == ".cargo"
	}
	return false
}

// unitVariable reports whether an environment variable can change which
// units Cargo builds or how: the flag variables, the profile, build and
// target settings, the compiler and its wrappers, and incremental mode.
// Variables that only move output (CARGO_TARGET_DIR and the build dir,
// which Ferry sets) or change how Cargo talks (terminal, network, logs) are
// not.
func unitVariable(name string) bool {
	switch name {
	case "CARGO_TARGET_DIR", "CARGO_BUILD_TARGET_DIR", "CARGO_BUILD_BUILD_DIR", "CARGO_HOME":
		return false
	case "RUSTFLAGS", "RUSTDOCFLAGS", "RUSTC", "RUSTDOC", "RUSTC_WRAPPER", "RUSTC_WORKSPACE_WRAPPER", "RUSTC_BOOTSTRAP",
		"CARGO_INCREMENTAL", "CARGO_ENCODED_RUSTFLAGS", "CARGO_ENCODED_RUSTDOCFLAGS":
		return true
	}
	for _, p := range []string{"CARGO_BUILD_", "CARGO_PROFILE_", "CARGO_TARGET_", "CARGO_UNSTABLE_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// UnitInputs hashes what decides which units a warm build of commit
// selects (see Seeding). tree is the commit's `git ls-tree -r`; env the warm
// commands' environment; mntSrc the canonical checkout, whose ancestors'
// Cargo configurations Cargo reads; cargoHome the Cargo home the warm build
// reads configuration from.
func UnitInputs(tree []git.Entry, env []string, mntSrc, cargoHome string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "ferry-unit-inputs %d\n", unitInputsVersion)
	for _, e := range tree {
		if unitFile(e.Path) {
			fmt.Fprintf(h, "file %q %o %s\n", e.Path, e.Mode, e.Object)
		}
	}
	// Cargo's configuration discovery: .cargo/config{,.toml} in every
	// ancestor of the working directory, then in Cargo's home.
	var dirs []string
	for d := filepath.Dir(mntSrc); ; d = filepath.Dir(d) {
		dirs = append(dirs, filepath.Join(d, ".cargo")) // not a store path: Cargo's configuration lookup
		if d == filepath.Dir(d) {
			break
		}
	}
	if cargoHome != "" {
		dirs = append(dirs, cargoHome)
	}
	for _, d := range dirs {
		for _, name := range []string{"config", "config.toml"} {
			p := filepath.Join(d, name)
			b, err := os.ReadFile(p)
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				continue
			}
			if err != nil {
				return "", fmt.Errorf("read Cargo configuration %s: %w", p, err)
			}
			sum := sha256.Sum256(b)
			fmt.Fprintf(h, "config %q %x\n", p, sum)
		}
	}
	var vars []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if unitVariable(name) {
			vars = append(vars, kv)
		}
	}
	sort.Strings(vars)
	for _, kv := range vars {
		fmt.Fprintf(h, "env %q\n", kv)
	}
	// Cargo 1.99 turns incremental off under CI or TF_BUILD: whether
	// either is set changes units (the architecture contract's shim rule).
	fmt.Fprintf(h, "ci %t\n", cargoenv.InCI(env))
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// cargoHome is where Cargo reads its home configuration for env.
func cargoHome(env []string) string {
	if h := cargoenv.Get(env, "CARGO_HOME"); h != "" {
		return h
	}
	if h := cargoenv.Get(env, "HOME"); h != "" {
		return filepath.Join(h, ".cargo")
	}
	return ""
}

// chooseSeed returns the base a build of p starts from, or nil (cold): the
// newest ready base with p's fingerprint at another commit, with the same
// unit inputs or, with prune, whose warm build was observed, and whose
// checkout and target are there and unchanged since it was built. why says
// what was chosen or why nothing was. The seed's base lock comes with it,
// held shared until the build ends (release it), so that neither gc nor a
// rebuild removes the target the build clones or lays its layer over; a
// base whose lock is held exclusively (being deleted or rebuilt) is passed
// over.
func chooseSeed(s *store.Store, p *Plan, prune bool, known verified) (seed *Record, held *lock.Lock, why string) {
	list, err := List(s)
	if err != nil {
		return nil, nil, "the bases could not be listed: " + err.Error()
	}
	skipped := 0
	for _, e := range list { // newest first
		r := e.Record
		if r == nil || r.ID == p.ID {
			continue
		}
		// The base of p's first command at p's commit (a progressive
		// build's first step) is the best seed there is; other seeds
		// are other commits' bases of p's fingerprint.
		first := r.Commit == p.Commit && len(p.Warm) > 1 && r.Fingerprint == p.firstFingerprint()
		if !first && (r.Fingerprint != p.Fingerprint() || r.Commit == p.Commit) {
			continue
		}
		same := r.UnitInputs != "" && r.UnitInputs == p.UnitInputs
		if !same && !(prune && r.Observed) {
			skipped++
			continue
		}
		// Try-locked shared below the build's own base lock: it never
		// waits, so it cannot deadlock (see package lock).
		l, err := lock.TryShared(s.BaseLock(r.ID))
		if err != nil {
			continue
		}
		if _, err := os.Stat(s.Base(r.ID).Record); err != nil {
			l.Release() // deleted since the listing
			continue
		}
		if fi, err := os.Stat(r.Src); err != nil || !fi.IsDir() {
			l.Release()
			continue
		}
		if !known.of(r) && Verify(r) != nil {
			l.Release()
			continue // a changed base seeds nothing
		}
		if first && same {
			return r, l, fmt.Sprintf("seeded from base %s (this commit, warm for its first command)", r.ID)
		}
		if same {
			return r, l, fmt.Sprintf("seeded from base %s (%s, same unit inputs)", r.ID, short(r.Commit))
		}
		return r, l, fmt.Sprintf("seeded from base %s (%s, other unit inputs: what the build does not use will be pruned)", r.ID, short(r.Commit))
	}
	if skipped > 0 && !prune {
		return nil, nil, fmt.Sprintf("cold: %d base(s) with this fingerprint have other unit inputs (manifests, lockfile, Cargo configuration or flags), and [base] prune is off", skipped)
	}
	if skipped > 0 {
		return nil, nil, fmt.Sprintf("cold: %d base(s) with this fingerprint have other unit inputs (manifests, lockfile, Cargo configuration or flags) and were not observed", skipped)
	}
	return nil, nil, "cold: no ready base with this fingerprint to seed from"
}

// verified names a ready base whose target matched its seal when it was
// checked (Verify).
type verified struct {
	id      string
	created time.Time
	seal    TargetSeal
}

// verifyCurrent checks the current base's seal, and returns it when it
// holds. The current base is almost always the seed of the next build, or
// the base a build of the same commit reuses, so Build checks it while the
// plan resolves: the check (about 20 ms on the benchmark's large target)
// then leaves the seed's choice and the reuse.
func verifyCurrent(s *store.Store) verified {
	id, err := s.Current()
	if err != nil || id == "" {
		return verified{}
	}
	r, err := Read(s, id)
	if err != nil || Verify(r) != nil {
		return verified{}
	}
	return verified{id: r.ID, created: r.Created, seal: r.TargetSeal}
}

// of reports whether v is ready base r as it was checked: the same base,
// built at the same time, with the same seal. A target changed since the
// check is caught by the next check, as one changed just after it would
// be.
func (v verified) of(r *Record) bool {
	return v.id != "" && v.id == r.ID && v.created.Equal(r.Created) && sameSeal(v.seal, r.TargetSeal)
}

// cloneSeed gives r its seed's target the way r.SeedBy says: a clone
// (reflink), a copy, or an empty layer over it (startLayer). It needs
// nothing of r's checkout, so build runs it while git checks the commit
// out.
func cloneSeed(r, seed *Record) error {
	if r.SeedBy == SeedByLayer {
		return startLayer(r, seed)
	}
	b := fork.Copy()
	if r.SeedBy == SeedByReflink {
		b = fork.Reflink()
	}
	// The fork backends make AgentDir/target, which is the base's target.
	if _, err := b.Fork(fork.Paths{BaseTarget: seed.Target, AgentDir: r.Dir}); err != nil {
		return fmt.Errorf("clone the seed's target: %w", err)
	}
	if seed.UnitInputs != r.UnitInputs {
		// Nested workspaces' target dirs are not observed, so nothing
		// could prune them: they start empty.
		if err := platform.RemoveTree(store.NestedTargets(r.Target)); err != nil {
			return err
		}
	}
	return nil
}

// seedFrom stamps r's fresh checkout of p's commit (whose index is p's
// tree) against the seed's, whose tree seedTree lists (see Seeding), for
// the seed's target cloneSeed gave r (a reflink or a copy: either keeps
// every mtime). What the verifier cannot prove identical to the seed's
// checkout gets an mtime no older than now, after the seed's build. The
// units the link_rebuilds rule names get their Cargo dep-info emptied
// (package freshness; r.LinkRebuilds lists them), in both modes, as at
// spawn (agent's create says why mtime mode needs it too).
func seedFrom(o Options, p *Plan, r, seed *Record, seedTree task[[]git.Entry]) (StampCount, error) {
	tree, err := seedTree()
	if err != nil {
		return StampCount{}, err
	}
	in := freshness.Input{AgentDir: r.Src, AgentIndex: p.tree, BaseDir: seed.Src, BaseTree: tree}
	plan, err := freshness.Verify(in)
	if err != nil {
		return StampCount{}, err
	}
	st, err := plan.Apply()
	if err != nil {
		return StampCount{}, err
	}
	if _, err := freshness.FreshenSkipped(r.Src, plan, time.Now()); err != nil {
		return StampCount{}, err
	}
	// Before the warm build, a layer over the seed's target shows the
	// seed's target, and takes writes in its upper.
	read, write := r.Target, r.Target
	if r.layer != nil {
		read, write = r.layer.Lower, r.layer.Upper
	}
	if r.LinkRebuilds, err = plan.LinkRebuilds(read, o.Store.Dir); err != nil {
		return StampCount{}, err
	}
	if err := freshness.EmptyDepInfo(write, r.LinkRebuilds); err != nil {
		return StampCount{}, err
	}
	return StampCount{Files: st.Files, Dirs: st.Dirs}, nil
}

// warmObserved runs the warm commands into r's target while the shim
// records their cargo calls (package units), then works out which units
// they used. A seed with other unit inputs leaves units the new commit no
// longer has: with a complete observation they are pruned; otherwise the
// target is emptied, the checkout stamped as for a cold build, and the warm
// commands run again from nothing (invariant 2's third route never
// publishes an unchecked unit). Either way r records whether its own warm
// build was observed, which decides whether it may seed across unit inputs
// later; without a seed across unit inputs the observation runs in the
// background (finishing.observe), and build takes it before the record.
func warmObserved(ctx context.Context, o Options, p *Plan, r, seed *Record, shimDir string, fin *finishing) error {
	wu := store.BaseFiles(r.Dir).WarmUnits
	across := seed != nil && seed.UnitInputs != p.UnitInputs
	incomplete := len(r.Incomplete) // what was noted before the warm commands
	for {
		if err := os.RemoveAll(wu); err != nil {
			return err
		}
		if err := os.Mkdir(wu, 0o755); err != nil {
			return err
		}
		if _, err := units.TakeThreshold(wu); err != nil {
			return err
		}
		r.Warm, r.Incomplete = r.Warm[:0], r.Incomplete[:incomplete]
		fin.prefold()
		fin.spared()
		for i, w := range p.Warm {
			if w.Demanded > 0 {
				o.say("[%d/%d] %s (%s)", i+1, len(p.Warm), w.Command, w.Why)
			} else {
				o.say("[%d/%d] %s", i+1, len(p.Warm), w.Command)
			}
			if err := warmOne(ctx, o, p, r, w, shimDir); err != nil {
				return err
			}
		}
		fin.warmed()
		if err := foldLayer(o, r, fin.laid); err != nil {
			return err
		}
		fin.folded()
		if !across {
			// Nothing changes the target from here on, and nothing
			// but the record needs the observation: it runs beside
			// the seal and the writeback.
			fin.final()
			fin.observe(wu)
			return nil
		}
		obs, err := units.Observe(r.Target, wu)
		r.observed(obs, err)
		if r.Observed {
			var pr units.Pruned
			err := r.relinking(o.Store, func() (err error) { pr, err = units.Prune(obs); return err })
			if err != nil {
				return fmt.Errorf("prune the units the warm build did not use: %w", err)
			}
			r.Pruned = PruneCount{Units: pr.Units + pr.Orphans, Fingerprints: pr.Fingerprints, Files: pr.Files, Bytes: pr.Bytes}
			o.say("pruned %d unit(s) the commit no longer uses and %d incremental dir(s) they left (%d files, %.1f MB)", r.Pruned.Units, pr.Incremental, pr.Files, float64(pr.Bytes)/1e6)
			fin.final()
			break
		}
		msg := fmt.Sprintf("the warm build seeded from %s could not be fully observed (%s); building again without a seed", short(seed.ID), strings.Join(r.Unobserved, "; "))
		r.Warnings = append(r.Warnings, msg)
		o.say("warning: %s", msg)
		fin.wait() // nothing reads the checkout or the target while they are reset
		if err := unseed(o, r); err != nil {
			return err
		}
		r.Seed, r.SeedBy, r.Layer, r.reuse, across = "", "", nil, nil, false
	}
	return os.RemoveAll(wu)
}

// observed records in r whether its warm build was observed completely,
// and if not why.
func (r *Record) observed(obs *units.Observation, err error) {
	if err != nil {
		r.Observed, r.Unobserved = false, []string{err.Error()}
		return
	}
	r.Observed, r.Unobserved = obs.Complete(), nil
	for _, why := range obs.Incomplete {
		r.Unobserved = append(r.Unobserved, why.String())
	}
}

// relinking runs f, which removes entries of r's target, in a link window
// when r's target holds its seed's inodes (a layered refresh's, folded).
func (r *Record) relinking(s *store.Store, f func() error) error {
	if r.SeedBy != SeedByLayer {
		return f()
	}
	return linking(s, r.ID, f)
}

// unseed empties r's target and stamps its checkout as a cold build's.
func unseed(o Options, r *Record) error {
	if err := r.relinking(o.Store, func() error { return platform.RemoveTree(r.Target) }); err != nil {
		return err
	}
	if err := os.Mkdir(r.Target, 0o755); err != nil {
		return err
	}
	entries, err := o.Repo.LsFiles(r.Src)
	if err != nil {
		return err
	}
	st, err := freshness.StampBaseCheckout(r.Src, entries)
	if err != nil {
		return err
	}
	r.Stamped = StampCount{Files: st.Files, Dirs: st.Dirs}
	return nil
}
