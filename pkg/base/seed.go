package base

import (
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
	"github.com/ferrydev/ferry/pkg/store"
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
	fmt.Fprintf(h, "ci %t\n", cargoenv.Get(env, "CI") != "" || cargoenv.Get(env, "TF_BUILD") != "")
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
// unit inputs, whose checkout and target are there and unchanged since it
// was built. why says what was chosen or why nothing was.
func chooseSeed(s *store.Store, p *Plan) (seed *Record, why string) {
	list, err := List(s)
	if err != nil {
		return nil, "the bases could not be listed: " + err.Error()
	}
	skipped := 0
	for _, e := range list { // newest first
		r := e.Record
		if r == nil || r.ID == p.ID || r.Fingerprint != p.Fingerprint() || r.Commit == p.Commit {
			continue
		}
		if r.UnitInputs == "" || r.UnitInputs != p.UnitInputs {
			skipped++
			continue
		}
		if fi, err := os.Stat(r.Src); err != nil || !fi.IsDir() {
			continue
		}
		if Verify(r) != nil {
			continue // a changed base seeds nothing
		}
		return r, fmt.Sprintf("seeded from base %s (%s, same unit inputs)", r.ID, short(r.Commit))
	}
	if skipped > 0 {
		return nil, fmt.Sprintf("cold: %d base(s) with this fingerprint have other unit inputs (manifests, lockfile, Cargo configuration or flags)", skipped)
	}
	return nil, "cold: no ready base with this fingerprint to seed from"
}

// seedFrom gives the new base r the seed's target and stamps r's fresh
// checkout against the seed's (see Seeding). The clone is a reflink where
// the store clones files, else a copy; either keeps every mtime. What the
// verifier cannot prove identical to the seed's checkout gets an mtime no
// older than now, after the seed's build.
func seedFrom(o Options, r, seed *Record) (StampCount, error) {
	b := fork.Copy()
	if ok, _ := fork.CanReflink(r.Dir); ok {
		b = fork.Reflink()
	}
	// The fork backends make AgentDir/target, which is the base's target.
	if _, err := b.Fork(fork.Paths{BaseTarget: seed.Target, AgentDir: r.Dir}); err != nil {
		return StampCount{}, fmt.Errorf("clone the seed's target: %w", err)
	}
	index, err := o.Repo.LsFiles(r.Src)
	if err != nil {
		return StampCount{}, err
	}
	tree, err := o.Repo.LsTree(seed.Commit)
	if err != nil {
		return StampCount{}, err
	}
	plan, err := freshness.Verify(freshness.Input{AgentDir: r.Src, AgentIndex: index, BaseDir: seed.Src, BaseTree: tree})
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
	return StampCount{Files: st.Files, Dirs: st.Dirs}, nil
}
