package base

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/toolchain"
)

// Plan is what a build of Rev would produce, resolved before any lock.
type Plan struct {
	Commit     string
	ID         string
	Toolchain  Toolchain
	Warm       []WarmCommand
	Modes      Modes
	UnitInputs string // see UnitInputs: a seed must have the same
	// Seed is the base the build starts from, "" for a cold build; Build
	// chooses it once the base lock is held (SeedWhy says why).
	Seed    string
	SeedWhy string
	// Fallback is the warning of sandbox mode auto on a host that blocks
	// user namespaces (the build runs at host paths), "" otherwise. Build
	// prints it once.
	Fallback string
	// Learned is what the plan learned from demand (demand.go), nil when
	// the settings do not learn; the commands it picked end Warm.
	Learned *Learned
}

// Fingerprint is the fingerprint part of the plan's base id.
func (p *Plan) Fingerprint() string { return strings.TrimPrefix(p.ID, p.Commit+"-") }

// Resolve works out the base id of o.Rev: the commit, the toolchain, the warm
// commands and the modes. It changes nothing but scratch files.
func Resolve(o Options) (*Plan, error) {
	rev := o.Rev
	if rev == "" {
		rev = "HEAD"
	}
	commit, err := o.Repo.ResolveCommit(rev)
	if err != nil {
		return nil, err
	}
	if _, err := o.Repo.Run(o.Repo.Top, "cat-file", "-e", commit+":Cargo.toml"); err != nil {
		return nil, failure.New(failure.Prereq,
			"Ferry builds the Cargo workspace at the repository root: add a Cargo.toml there, or pick a commit that has one with --rev",
			"commit %s has no Cargo.toml at the repository root", short(commit))
	}
	iso, err := sandbox.Decide(o.Settings.SandboxMode)
	if err != nil {
		return nil, err
	}
	// Remap mode applies to builds without the namespace: in it every
	// build already runs at the same canonical paths.
	remapMode := o.Settings.RemapPaths && iso.Isolation == sandbox.IsolationOff
	fresh := o.Settings.Freshness
	if fresh == "" {
		fresh = config.FreshnessMtime
	}
	tc, err := detectToolchain(o, commit, remapMode, fresh == config.FreshnessChecksum)
	if err != nil {
		return nil, err
	}
	cmds := o.Settings.Warm
	if o.Settings.WarmIsDefault {
		cmds = config.DefaultWarm(tc.Clippy, o.Settings.KeepGoing && tc.AtLeast(config.KeepGoingSince[0], config.KeepGoingSince[1]),
			plainSelectsLess(o, commit))
	}
	p := &Plan{
		Commit: commit,
		Toolchain: Toolchain{
			Rustc: tc.RustcVerbose, RustcVersion: tc.RustcVersion, Host: tc.Host,
			Cargo: tc.Cargo, CargoVersion: tc.CargoVersion,
		},
		Modes:    Modes{Freshness: fresh, Isolation: iso.Isolation, Remap: remapMode},
		Fallback: iso.Warning(),
	}
	why := "configured"
	if o.Settings.WarmIsDefault {
		why = "default"
	}
	for _, c := range cmds {
		p.Warm = append(p.Warm, WarmCommand{Command: c, Generated: o.Settings.IsGeneratedLint(c), KeepGoing: o.Settings.KeepGoing, Why: why})
	}
	p.ID = ID(commit, Fingerprint(p.Toolchain, p.Warm, p.Modes))
	tree, err := o.Repo.LsTree(commit)
	if err != nil {
		return nil, err
	}
	// Cargo reads the configurations above the directory it builds in:
	// the canonical checkout in the sandbox, the base's own without it.
	src := o.Store.MntSrc()
	if p.Modes.Isolation == sandbox.IsolationOff {
		src = o.Store.Base(p.ID).Src
	}
	if p.UnitInputs, err = UnitInputs(tree, o.env(), src, cargoHome(o.env())); err != nil {
		return nil, err
	}
	learn(o, p)
	return p, nil
}

// plainSelectsLess reports whether a cargo call at the root of commit's
// checkout without --workspace selects less than the whole workspace: its
// root manifest is a package's, or names default members. A manifest that
// cannot be read says no: cargo will say what is wrong with it.
func plainSelectsLess(o Options, commit string) bool {
	out, err := o.Repo.Run(o.Repo.Top, "cat-file", "-p", commit+":Cargo.toml")
	if err != nil {
		return false
	}
	var m struct {
		Package   map[string]any `toml:"package"`
		Workspace struct {
			DefaultMembers []string `toml:"default-members"`
		} `toml:"workspace"`
	}
	if toml.Unmarshal([]byte(out), &m) != nil {
		return false
	}
	return m.Package != nil || len(m.Workspace.DefaultMembers) > 0
}

// detectToolchain runs the toolchain in a scratch directory holding the
// commit's rust-toolchain files, so rustup resolves what the build will get
// (the warm build runs at <store>/mnt/src, a path no rustup override names).
// With remap, it also asks that toolchain's rustc whether remap mode pays
// off (toolchain.ProbeRemap), and refuses the build when it does not. With
// checksum, a toolchain that cannot do checksum freshness is refused.
func detectToolchain(o Options, commit string, remap, checksum bool) (*toolchain.Toolchain, error) {
	dir, err := os.MkdirTemp("", "ferry-toolchain-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	for _, name := range []string{"rust-toolchain", "rust-toolchain.toml"} {
		if out, err := o.Repo.Run(o.Repo.Top, "cat-file", "-p", commit+":"+name); err == nil {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(out), 0o644); err != nil {
				return nil, err
			}
		}
	}
	tc, err := toolchain.Detect(dir, o.env())
	if err != nil {
		return nil, err
	}
	if checksum {
		if err := tc.ProbeChecksum(dir, o.env()); err != nil {
			return nil, err
		}
	}
	if !remap || knobs.SkipRemapProbe() {
		return tc, nil
	}
	if err := tc.ProbeRemap(dir, o.env()); err != nil {
		hint := failure.HintOf(err)
		if hint == "" {
			hint = fmt.Sprintf("use a toolchain from Rust %s on, or leave [sandbox] remap-paths off", toolchain.RemapVersion)
		}
		return nil, failure.Wrap(failure.Prereq, err, hint,
			"remap mode ([sandbox] remap-paths) needs Rust %s or later, and this commit's toolchain is rustc %s", toolchain.RemapVersion, tc.RustcVersion)
	}
	return tc, nil
}
