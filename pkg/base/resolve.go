package base

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
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
	// first is the index in Warm of the command a progressive build warms
	// first (firstCommand); 0 unless Build chose another.
	first int
	// tree is the commit's tree (`git ls-tree -r`): what the index of a
	// checkout of it holds, so the build need not list the index.
	tree []git.Entry
}

// Fingerprint is the fingerprint part of the plan's base id.
func (p *Plan) Fingerprint() string { return strings.TrimPrefix(p.ID, p.Commit+"-") }

// Resolve works out the base id of o.Rev: the commit, the toolchain, the warm
// commands and the modes. It changes nothing but scratch files.
func Resolve(o Options) (*Plan, error) {
	commit, err := resolveCommit(o)
	if err != nil {
		return nil, err
	}
	return resolveAt(o, commit)
}

// resolveCommit is the commit o.Rev names.
func resolveCommit(o Options) (string, error) {
	rev := o.Rev
	if rev == "" {
		rev = "HEAD"
	}
	return o.Repo.ResolveCommit(rev)
}

// resolveAt is Resolve once the commit is known. The commit's tree, the
// sandbox probe and the toolchain's calls need nothing from each other, so
// they run at once; the toolchain's, through rustup's proxies, take longest.
// On the benchmark's large workspace resolving took 60-70 ms one after the
// other, 35-50 ms at once.
func resolveAt(o Options, commit string) (*Plan, error) {
	fresh := o.Settings.Freshness
	if fresh == "" {
		fresh = config.FreshnessMtime
	}
	treeOf := begin(func() ([]git.Entry, error) { return o.Repo.LsTree(commit) })
	decided := begin(func() (sandbox.Decision, error) { return sandbox.Decide(o.Settings.SandboxMode) })
	detected := begin(func() (*toolchain.Toolchain, error) {
		// Whether clippy runs decides only the default warm commands.
		return detectToolchain(o, commit, toolchain.Probe{Clippy: o.Settings.WarmIsDefault}, fresh == config.FreshnessChecksum)
	})
	selectsLess := begin(func() (bool, error) { return o.Settings.WarmIsDefault && plainSelectsLess(o, commit), nil })
	tree, treeErr := treeOf()
	iso, isoErr := decided()
	tc, tcErr := detected()
	less, _ := selectsLess()
	switch {
	case treeErr != nil:
		return nil, treeErr
	case !slices.ContainsFunc(tree, func(e git.Entry) bool { return e.Path == "Cargo.toml" }):
		return nil, failure.New(failure.Prereq,
			"Ferry builds the Cargo workspace at the repository root: add a Cargo.toml there, or pick a commit that has one with --rev",
			"commit %s has no Cargo.toml at the repository root", short(commit))
	case isoErr != nil:
		return nil, isoErr
	case tcErr != nil:
		return nil, tcErr
	}
	// Remap mode applies to builds without the namespace: in it every
	// build already runs at the same canonical paths.
	remapMode := o.Settings.RemapPaths && iso.Isolation == sandbox.IsolationOff
	if remapMode {
		if err := probeRemap(o, commit, tc); err != nil {
			return nil, err
		}
	}
	cmds := o.Settings.Warm
	if o.Settings.WarmIsDefault {
		cmds = config.DefaultWarm(tc.Clippy, o.Settings.KeepGoing && tc.AtLeast(config.KeepGoingSince[0], config.KeepGoingSince[1]), less)
	}
	p := &Plan{
		Commit: commit,
		Toolchain: Toolchain{
			Rustc: tc.RustcVerbose, RustcVersion: tc.RustcVersion, Host: tc.Host,
			Cargo: tc.Cargo, CargoVersion: tc.CargoVersion,
		},
		Modes:    Modes{Freshness: fresh, Isolation: iso.Isolation, Remap: remapMode},
		Fallback: iso.Warning(),
		tree:     tree,
	}
	if o.firstOnly != "" {
		cmds = []string{o.firstOnly}
	}
	why := "configured"
	if o.Settings.WarmIsDefault {
		why = "default"
	}
	for _, c := range cmds {
		p.Warm = append(p.Warm, WarmCommand{Command: c, Generated: o.Settings.IsGeneratedLint(c), KeepGoing: o.Settings.KeepGoing, Why: why})
	}
	p.ID = ID(commit, Fingerprint(p.Toolchain, p.Warm, p.Modes))
	// Cargo reads the configurations above the directory it builds in:
	// the canonical checkout in the sandbox, the base's own without it.
	src := o.Store.MntSrc()
	if p.Modes.Isolation == sandbox.IsolationOff {
		src = o.Store.Base(p.ID).Src
	}
	var err error
	if p.UnitInputs, err = UnitInputs(tree, o.env(), src, cargoHome(o.env())); err != nil {
		return nil, err
	}
	if o.firstOnly == "" {
		learn(o, p)
	} else if o.firstInputs != "" {
		// The full plan's: its first base is its seed with the same
		// inputs, whatever demand added to them (buildFirst).
		p.UnitInputs = o.firstInputs
	}
	return p, nil
}

// firstFingerprint is the fingerprint of the base of p's first warm
// command alone: a progressive build's first step (buildFirst).
func (p *Plan) firstFingerprint() string {
	return strings.TrimPrefix(ID(p.Commit, Fingerprint(p.Toolchain, p.Warm[p.first:p.first+1], p.Modes)), p.Commit+"-")
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
// With checksum, a toolchain that cannot do checksum freshness is refused.
func detectToolchain(o Options, commit string, probe toolchain.Probe, checksum bool) (*toolchain.Toolchain, error) {
	dir, err := toolchainDir(o, commit)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	tc, err := toolchain.DetectWith(dir, o.env(), probe)
	if err != nil {
		return nil, err
	}
	if checksum {
		if err := tc.ProbeChecksum(dir, o.env()); err != nil {
			return nil, err
		}
	}
	return tc, nil
}

// probeRemap asks the commit's toolchain whether remap mode pays off
// (toolchain.ProbeRemap), and refuses the build when it does not.
func probeRemap(o Options, commit string, tc *toolchain.Toolchain) error {
	if knobs.SkipRemapProbe() {
		return nil
	}
	dir, err := toolchainDir(o, commit)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := tc.ProbeRemap(dir, o.env()); err != nil {
		hint := failure.HintOf(err)
		if hint == "" {
			hint = fmt.Sprintf("use a toolchain from Rust %s on, or leave [sandbox] remap-paths off", toolchain.RemapVersion)
		}
		return failure.Wrap(failure.Prereq, err, hint,
			"remap mode ([sandbox] remap-paths) needs Rust %s or later, and this commit's toolchain is rustc %s", toolchain.RemapVersion, tc.RustcVersion)
	}
	return nil
}

// toolchainFiles are the files rustup reads to choose a toolchain.
var toolchainFiles = []string{"rust-toolchain", "rust-toolchain.toml"}

// toolchainDir makes a scratch directory holding the commit's
// rust-toolchain files, for the caller to remove.
func toolchainDir(o Options, commit string) (string, error) {
	dir, err := os.MkdirTemp("", "ferry-toolchain-")
	if err != nil {
		return "", err
	}
	if err := ToolchainFiles(o.Repo, commit, dir); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// ToolchainFiles writes commit's rust-toolchain files into dir, as git's
// object store holds them: rustup run in dir then picks the toolchain a
// base of commit is built with. Never the working tree's: in an agent's
// worktree any build can write one, and a [toolchain] path there names a
// program rustup runs for every cargo and rustc call, outside the sandbox
// for whoever asks there.
func ToolchainFiles(repo *git.Repo, commit, dir string) error {
	// One call lists which of the files the commit has; most have none.
	out, err := repo.Run(repo.Top, append([]string{"ls-tree", "-z", "--full-tree", "--end-of-options", commit, "--"}, toolchainFiles...)...)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out, "\x00") {
		_, name, ok := strings.Cut(line, "\t")
		if !ok || !slices.Contains(toolchainFiles, name) {
			continue
		}
		text, err := repo.Run(repo.Top, "cat-file", "-p", commit+":"+name)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
