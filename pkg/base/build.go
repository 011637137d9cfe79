package base

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pelletier/go-toml/v2"
	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/cargoenv"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/freshness"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/remap"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
	"github.com/ferrydev/ferry/pkg/toolchain"
)

// Options are the inputs of one base build.
type Options struct {
	Repo     *git.Repo
	Settings *config.Settings
	Store    *store.Store
	Rev      string // default HEAD
	Cold     bool   // never seed from another base: build from an empty target
	// Rebuild discards the base of Rev when it is ready and builds it
	// again: the fix for a base changed after it was built (see Verify).
	Rebuild  bool
	Progress io.Writer // progress lines and the warm commands' output; nil discards
	Env      []string  // environment of the warm commands; nil means os.Environ()
	// Shim installs the shim (ferry-shim beside the running binary) as
	// cargo and puts it first on the warm commands' PATH, so each nested
	// workspace gets the target dir it gets in agents, and the warm build
	// is observed (see warmObserved). ShimBin names the shim binary when
	// it is not ferry-shim beside the running binary (tests).
	Shim    bool
	ShimBin string
	// RustcBin names the ferry-rustc binary remap mode installs when it
	// is not beside the running binary (tests).
	RustcBin string
	// OnBuilding is called once the base lock is held and a build (not a
	// reuse) begins.
	OnBuilding func(p *Plan)
}

// Result is what Build did.
type Result struct {
	Record *Record
	Reused bool // the base was already ready; nothing was built
}

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

func (o Options) env() []string {
	if o.Env != nil {
		return o.Env
	}
	return os.Environ()
}

func (o Options) progress() io.Writer {
	if o.Progress == nil {
		return io.Discard
	}
	return o.Progress
}

// Build builds the base of o.Rev, or reuses it when it is ready, and makes
// it current. A failure leaves no ready base, no base directory, no
// registered worktree, and the previous current base in place.
func Build(ctx context.Context, o Options) (*Result, error) {
	start := time.Now()
	p, err := Resolve(o)
	if err != nil {
		return nil, err
	}
	if err := o.Store.Init(); err != nil {
		return nil, err
	}
	out := o.progress()
	if p.Fallback != "" {
		fmt.Fprintf(out, "ferry-base: warning: %s\n", p.Fallback)
	}

	l, err := lock.TryTake(o.Store.BaseLock(p.ID))
	if err == lock.ErrBusy {
		fmt.Fprintf(out, "ferry-base: waiting for another build of %s\n", p.ID)
		l, err = lock.Take(o.Store.BaseLock(p.ID))
	}
	if err != nil {
		return nil, err
	}
	defer l.Release()

	if r, err := Read(o.Store, p.ID); err == nil {
		if !o.Rebuild {
			// Never serve a base something changed since it was built.
			if err := Verify(r); err != nil {
				return nil, err
			}
			if r.Modes.Remap {
				// Its agents run rustc through the installed wrapper: put
				// back a link a move of Ferry's binaries left dangling.
				if err := o.Store.InstallRemapWrapper(o.RustcBin); err != nil {
					return nil, fmt.Errorf("remap mode: %w", err)
				}
			}
			if err := SetCurrent(o.Store, p.ID); err != nil {
				return nil, err
			}
			fmt.Fprintf(out, "ferry-base: base %s is ready; reused\n", p.ID)
			return &Result{Record: r, Reused: true}, nil
		}
		if err := unready(o.Store, r); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "ferry-base: discarded base %s to build it again\n", p.ID)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err := Discard(o, p.ID); err != nil {
		return nil, fmt.Errorf("discard the partial base %s: %w", p.ID, err)
	}
	var seed *Record
	p.SeedWhy = "cold: --cold"
	if !o.Cold {
		var held *lock.Lock
		seed, held, p.SeedWhy = chooseSeed(o.Store, p, o.Settings.Prune)
		if held != nil {
			defer held.Release()
		}
	}
	if seed != nil {
		p.Seed = seed.ID
	}
	if o.OnBuilding != nil {
		o.OnBuilding(p)
	}

	r, err := build(ctx, o, p, seed, start)
	if err != nil {
		if derr := Discard(o, p.ID); derr != nil {
			err = errors.Join(err, fmt.Errorf("discard the failed base: %w", derr))
		} else if rerr := l.Remove(); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove the failed base's lock file: %w", rerr))
		}
		return nil, err
	}
	return &Result{Record: r}, nil
}

func build(ctx context.Context, o Options, p *Plan, seed *Record, start time.Time) (*Record, error) {
	out := o.progress()
	s := o.Store
	dir := s.BaseDir(p.ID)
	r := &Record{
		Format: Format, ID: p.ID, Commit: p.Commit, Fingerprint: strings.TrimPrefix(p.ID, p.Commit+"-"),
		Store: s.Dir, Dir: dir, Src: s.Base(p.ID).Src, Target: s.Base(p.ID).Target,
		MntSrc: s.MntSrc(), MntTarget: s.MntTarget(),
		Toolchain: p.Toolchain, Modes: p.Modes, UnitInputs: p.UnitInputs, Warnings: []string{}, Incomplete: []string{},
		Demand: p.Learned,
	}
	if l := p.Learned; l != nil && l.Damaged > 0 {
		msg := fmt.Sprintf("the demand log had %d line(s) that could not be read: rebuilt without them", l.Damaged)
		r.Warnings = append(r.Warnings, msg)
		fmt.Fprintf(out, "ferry-base: warning: %s\n", msg)
	}
	if l := p.Learned; l != nil && l.Error != "" {
		msg := "the demand log could not be read, so nothing was learned from it: " + l.Error
		r.Warnings = append(r.Warnings, msg)
		fmt.Fprintf(out, "ferry-base: warning: %s\n", msg)
	}
	if p.Fallback != "" {
		r.Warnings = append(r.Warnings, p.Fallback)
	}
	fmt.Fprintf(out, "ferry-base: building base %s (%s, %s)\n", p.ID, short(p.Commit), p.Toolchain.Cargo)

	t := time.Now()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// The seed's target is cloned while git checks the commit out: the two
	// touch different directories, and neither needs the other.
	cloned := func() error { return nil }
	seedHow := ""
	if seed != nil {
		done := make(chan error, 1)
		go func() {
			// The probes too run beside the checkout; r.SeedBy and
			// seedHow are read once cloned returns.
			var why string
			r.SeedBy, why = seedMethodHere(s.Dir, r, o.Settings.Layered)
			seedHow = seedWords(r.SeedBy, why)
			done <- cloneSeed(r, seed)
		}()
		var err error
		waited := false
		cloned = func() error {
			if !waited {
				err, waited = <-done, true
			}
			return err
		}
		defer cloned() // nothing returns while the clone still writes
	}
	if err := o.Repo.WorktreeAddDetached(r.Src, p.Commit); err != nil {
		return nil, err
	}
	if err := o.Repo.WorktreeLock(r.Src, "ferry base "+p.ID); err != nil {
		return nil, err
	}
	if r.Modes.Remap {
		if err := prepareRemap(o, r); err != nil {
			return nil, err
		}
	}
	r.Timings.Worktree = since(t)

	t = time.Now()
	fmt.Fprintf(out, "ferry-base: %s\n", p.SeedWhy)
	if seed != nil {
		if err := cloned(); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "ferry-base: %s\n", seedHow)
		var err error
		if r.Stamped, err = seedFrom(o, r, seed); err != nil {
			return nil, err
		}
		r.Seed = seed.ID
		if r.HostPaths() {
			a, err := relocateSeed(r, seed)
			if err != nil {
				return nil, err
			}
			r.Relocated = &a
			fmt.Fprintf(out, "ferry-base: relocated the seed's target: removed %d unit path(s) that recorded the seed's paths\n", a.Paths)
		}
	} else {
		entries, err := o.Repo.LsFiles(r.Src)
		if err != nil {
			return nil, err
		}
		st, err := freshness.StampBaseCheckout(r.Src, entries)
		if err != nil {
			return nil, err
		}
		r.Stamped = StampCount{Files: st.Files, Dirs: st.Dirs}
		if err := os.Mkdir(r.Target, 0o755); err != nil {
			return nil, err
		}
	}
	r.Timings.Stamp = since(t)

	t = time.Now()
	shimDir := ""
	if o.Shim {
		if err := s.InstallShim(o.ShimBin); err != nil {
			msg := fmt.Sprintf("warmed without the shim (%v): workspaces nested in the checkout were not warmed in their own target dirs", err)
			r.Warnings = append(r.Warnings, msg)
			fmt.Fprintf(out, "ferry-base: warning: %s\n", msg)
		} else {
			shimDir = s.ShimDir()
		}
	}
	if shimDir == "" {
		r.Incomplete = append(r.Incomplete, "nested workspaces: not warmed in their own target dirs (agents build them cold)")
	}
	if err := warmObserved(ctx, o, p, r, seed, shimDir); err != nil {
		return nil, err
	}
	r.Timings.Warm = since(t)
	r.WarmReference = r.ownWarmSeconds()
	if r.Seed != "" && seed != nil && seed.reference() > 0 {
		r.WarmReference = seed.reference()
	}

	t = time.Now()
	dirty, err := o.Repo.Dirty(r.Src)
	if err != nil {
		return nil, err
	}
	for _, d := range dirty {
		if (d.X == '?' || d.X == '!') && filepath.Base(d.Path) == "Cargo.lock" {
			// An untracked lockfile, ignored or not, is Cargo resolving
			// the workspace; agents get a copy of it (see ferry spawn).
			continue
		}
		if r.Modes.Remap && d.X == '!' && d.Path == store.RemapLink {
			continue // remap mode's link to the target: Ferry's
		}
		msg := fmt.Sprintf("the warm build wrote %s into the source tree (a build script or command writing outside OUT_DIR or the target dir)", d.Path)
		r.Warnings = append(r.Warnings, msg)
		fmt.Fprintf(out, "ferry-base: warning: %s\n", msg)
	}
	// base.json promises a complete target: make the build's writes durable
	// first, so a crash after the marker cannot leave a ready base with torn
	// files (and the first reflink fork does not pay for the writeback).
	if err := atomicfile.SyncTree(r.Target); err != nil {
		return nil, err
	}
	if r.HostPaths() {
		// Forks of this base build at their own paths: what they must
		// rebuild is planned once, here.
		if err := planRelocation(r); err != nil {
			return nil, err
		}
	}
	if r.TargetSeal, err = Seal(r.Target); err != nil {
		return nil, fmt.Errorf("seal the base's target: %w", err)
	}
	r.Created = time.Now().UTC()
	r.Timings.Finish = since(t)
	r.Timings.Total = since(start)
	if err := ctx.Err(); err != nil {
		return nil, interrupted(err)
	}
	// base.json is the ready marker: written last, atomically.
	if err := atomicfile.WriteJSON(s.Base(p.ID).Record, r, 0o644); err != nil {
		return nil, err
	}
	if err := SetCurrent(s, p.ID); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "ferry-base: base %s ready in %.1fs (warm %.1fs)\n", p.ID, r.Timings.Total, r.Timings.Warm)
	return r, nil
}

// noSpace returns the error of a warm command that failed because the
// target's filesystem ran full, or nil. Cargo reports ENOSPC only in its
// output, and not always in words: lld writes its output through mmap, so
// on a full filesystem it dies of SIGBUS ("ld terminated with signal 7
// [Bus error]"), and it frees what it wrote as it dies, so a statfs after
// the failure can find room again. Three signs count: a line saying "No
// space left on device"; the target's filesystem seen (nearly) full while
// the command ran; and a line reporting SIGBUS while that filesystem was
// seen with less than busBelow free. The error carries ENOSPC, the target,
// and the least free space seen, so the printer names the filesystem and
// its free space as the failure left it, not as it is after cargo and the
// discarded base freed some.
func noSpace(r *Record, command string, code int, signs spaceSigns) error {
	if !signs.full() {
		return nil
	}
	cause := error(syscall.ENOSPC)
	if said := signs.said; said != "" || signs.bus != "" {
		if said == "" {
			said = signs.bus
		}
		cause = fmt.Errorf("it said %q: %w", said, syscall.ENOSPC)
	}
	err := failure.Wrap(failure.NoSpace, &WarmError{Command: command, ExitCode: code, Err: cause}, "the previous current base is unchanged",
		"warm command %q ran out of space", command)
	if signs.watched {
		return failure.NoSpaceSeen(r.Target, signs.least, err)
	}
	return failure.NoSpaceAt(r.Target, err)
}

// spaceSigns is what a failed warm command left as evidence of a full
// filesystem.
type spaceSigns struct {
	said    string // the last line of its output reporting ENOSPC
	bus     string // the last line of its output reporting SIGBUS
	least   uint64 // the least free space seen on the target's filesystem
	watched bool   // least was measured
}

// fullBelow is the free space under which the target's filesystem counts
// as full: less than most crates' rlibs, and more than the few blocks a
// filesystem can have left when it refuses a write larger than them.
const fullBelow = 1 << 20

// busBelow is the free space under which a SIGBUS counts as the filesystem
// running full: sampling misses the moment lld fills it (measured on a 24
// MiB tmpfs: 3 MiB seen free while the linker died filling it), so the bound
// is loose, but a linker dying of SIGBUS with a gigabyte free has another
// cause.
const busBelow = 1 << 30

func (s spaceSigns) full() bool {
	return s.said != "" || (s.watched && (s.least < fullBelow || (s.bus != "" && s.least < busBelow)))
}

// freeInterval is how often watchFree samples: a statfs costs about a
// microsecond. A filesystem a build fills can be full for less than this
// (a linker frees what it wrote as it dies), which busBelow allows for.
const freeInterval = 10 * time.Millisecond

// watchFree samples the free space of the filesystem holding dir until the
// returned stop is called, which returns the least seen and whether
// anything was measured. Free is what this process may write: root may use
// the blocks a filesystem keeps back, so a build as root is not out of
// space when only those are left.
func watchFree(dir string) (stop func() (uint64, bool)) {
	var (
		mu    sync.Mutex
		least uint64
		seen  bool
	)
	root := os.Geteuid() == 0
	sample := func() {
		var st unix.Statfs_t
		if unix.Statfs(dir, &st) != nil {
			return
		}
		free := st.Bavail * uint64(st.Bsize)
		if root {
			free = st.Bfree * uint64(st.Bsize)
		}
		mu.Lock()
		if !seen || free < least {
			least, seen = free, true
		}
		mu.Unlock()
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(freeInterval)
		defer t.Stop()
		for {
			sample()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() (uint64, bool) {
		close(done)
		<-finished
		sample()
		mu.Lock()
		defer mu.Unlock()
		return least, seen
	}
}

// outputTail passes a warm command's output on and keeps its last tailSize
// bytes, where Cargo's report of the error that stopped the build is.
type outputTail struct {
	w   io.Writer
	mu  sync.Mutex
	buf []byte
}

// tailSize covers the end of a failed build's output: the error, and the
// warnings and "could not compile" lines other jobs print after it.
const tailSize = 64 << 10

func (t *outputTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*tailSize {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-tailSize:]...)
	}
	t.mu.Unlock()
	return t.w.Write(p)
}

// What Rust programs (cargo, rustc, always in the C locale) and the C
// compiler driver print for ENOSPC and for a linker killed by SIGBUS.
var (
	noSpaceTexts = []string{"No space left on device"}
	busTexts     = []string{"Bus error", "SIGBUS"}
)

// lastLine returns the last line of the tail holding one of texts, trimmed
// (to its last 400 bytes), or "".
func (t *outputTail) lastLine(texts []string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	tail := t.buf
	if len(tail) > tailSize {
		tail = tail[len(tail)-tailSize:]
	}
	i := -1
	for _, text := range texts {
		i = max(i, bytes.LastIndex(tail, []byte(text)))
	}
	if i < 0 {
		return ""
	}
	start := bytes.LastIndexByte(tail[:i], '\n') + 1
	end := len(tail)
	if j := bytes.IndexByte(tail[i:], '\n'); j >= 0 {
		end = i + j
	}
	line := strings.TrimSpace(string(tail[start:end]))
	if len(line) > 400 {
		line = "..." + line[len(line)-400:]
	}
	return line
}

// WarmError is a warm command that failed, in the chain of the error Build
// returns, so that whoever reports the failure can name the command.
type WarmError struct {
	Command  string
	ExitCode int
	Seconds  float64  // how long it ran
	Failed   []string // the targets cargo said it could not build
	Err      error    // why, when Ferry knows more than the status (a full disk)
}

func (e *WarmError) Error() string {
	msg := fmt.Sprintf("warm command %q failed with exit status %d", e.Command, e.ExitCode)
	if e.Seconds > 0 {
		msg += fmt.Sprintf(" after %.1fs", e.Seconds)
	}
	if len(e.Failed) > 0 {
		msg += "; did not compile: " + strings.Join(e.Failed, ", ")
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *WarmError) Unwrap() error { return e.Err }

// FailedCommand is the warm command a failed Build names, or "".
func FailedCommand(err error) string {
	var we *WarmError
	if errors.As(err, &we) {
		return we.Command
	}
	return ""
}

// runWarm runs one warm command in the sandbox at the canonical paths (or,
// for a base built without it, in the checkout at its host path), its
// output going to output, and returns its exit status and, when it failed,
// the signs of a full filesystem it left. The error is for failures to run
// it at all.
//
// cpu is the CPU time the command and everything it waited for used (user
// and system): what demand's budget weighs, since unlike the wall time it
// does not grow with what else the host runs.
func runWarm(ctx context.Context, o Options, r *Record, command, shimDir string, output io.Writer) (code int, signs spaceSigns, cpu float64, err error) {
	wrapper := ""
	if r.Modes.Remap {
		wrapper = o.Store.RemapWrapper()
	}
	env := warmEnv(o.env(), r, shimDir, wrapper)
	c, err := warmCommand(o, r, command, env)
	if err != nil {
		return 0, spaceSigns{}, 0, err
	}
	// stdout is the caller's answer channel: the build's output goes to stderr.
	tail := &outputTail{w: output}
	c.Stdout = tail
	c.Stderr = tail
	stopWatch := watchFree(r.Dir) // the target's filesystem; a layered refresh has no target yet
	if err := c.Start(); err != nil {
		stopWatch()
		return 0, spaceSigns{}, 0, err
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			// The init of the PID namespace, or without the sandbox the
			// leader of the command's process group: everything dies.
			if c.SysProcAttr != nil && c.SysProcAttr.Setpgid {
				syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			}
			c.Process.Kill()
		case <-done:
		}
	}()
	err = c.Wait()
	close(done)
	least, watched := stopWatch()
	if ps := c.ProcessState; ps != nil {
		cpu = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	if ctx.Err() != nil {
		return 0, spaceSigns{}, cpu, interrupted(ctx.Err())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code := ee.ExitCode()
		if code < 0 {
			code = 128 + 9
		}
		return code, spaceSigns{said: tail.lastLine(noSpaceTexts), bus: tail.lastLine(busTexts), least: least, watched: watched}, cpu, nil
	}
	return 0, spaceSigns{}, cpu, err
}

// warmCommand prepares a warm command: in the sandbox, the checkout and
// target bind-mounted at the canonical paths in a sealed store, in a PID
// namespace that dies with this process; without it, in the checkout at its
// host path, in a process group of its own that is killed on interruption
// and gets SIGKILL when this process dies.
func warmCommand(o Options, r *Record, command string, env []string) (*sandbox.Cmd, error) {
	src, _ := r.BuildPaths()
	if r.HostPaths() {
		c, err := sandbox.Inside(sandbox.Plan{Dir: src, Argv: []string{"sh", "-c", command}, Env: env})
		if err != nil {
			return nil, err
		}
		c.SysProcAttr = hostWarmAttr()
		return c, nil
	}
	seal, err := o.Store.Seal()
	if err != nil {
		return nil, err
	}
	// The shim records the warm build's cargo calls in the base's
	// warm-units/, which the sealed store must leave writable.
	writable := append(seal.Writable, store.BaseFiles(r.Dir).WarmUnits)
	binds := []sandbox.Bind{{Source: r.Src, Target: r.MntSrc}}
	var overlays []sandbox.Overlay
	if l := r.layer; l != nil {
		// A layered refresh: the seed's target under the base's layer.
		if err := resetLayerWork(r); err != nil {
			return nil, err
		}
		overlays = append(overlays, sandbox.Overlay{Lower: l.Lower, Upper: l.Upper, Work: layerWork(r), Target: r.MntTarget, Volatile: true})
	} else {
		binds = append(binds, sandbox.Bind{Source: r.Target, Target: r.MntTarget})
	}
	return sandbox.Command(sandbox.Plan{
		Store:             seal.Root,
		Writable:          writable,
		Masked:            seal.Masked,
		Binds:             binds,
		Overlays:          overlays,
		Dir:               src,
		Argv:              []string{"sh", "-c", command},
		Env:               env,
		KillOnParentDeath: true,
	})
}

// warmEnv is the environment of a warm command: the caller's, with every
// variable that could send Cargo's output elsewhere replaced (invariant 3);
// in remap mode, with rustc run through wrapper (remap.Env).
func warmEnv(env []string, r *Record, shimDir, wrapper string) []string {
	// The bus's variables too: nothing a build runs reaches the bus.
	out := config.WithoutBus(cargoenv.Without(env, "PWD", "OLDPWD", "FERRY_AGENT", "FERRY_WARM_SRC", "FERRY_WARM_TARGET", "FERRY_WARM_UNITS", "FERRY_WARM_CARGO", "PATH"))
	if r.Modes.Remap {
		out = append(cargoenv.Without(out, remap.EnvWrapper, remap.EnvChannel), remap.Env(wrapper, toolchain.Channel(r.Toolchain.RustcVersion))...)
	}
	path := cargoenv.Get(env, "PATH")
	if shimDir != "" {
		path = shimDir + string(filepath.ListSeparator) + path
	}
	out = append(out, "PATH="+path)
	src, target := r.BuildPaths()
	if shimDir != "" {
		out = append(out, "FERRY_WARM_SRC="+src, "FERRY_WARM_TARGET="+target, "FERRY_WARM_UNITS="+store.BaseFiles(r.Dir).WarmUnits,
			"FERRY_WARM_CARGO="+r.Toolchain.CargoVersion)
	}
	out = append(out, cargoenv.Target(target)...)
	out = cargoenv.WithFreshness(out, r.FreshnessEnv())
	return append(out,
		"CARGO_BUILD_WARNINGS=warn",
		"PWD="+src,
	)
}

// prepareRemap lays out a remap base's checkout: the link through which
// its builds reach the target (<src>/.ferry-target -> target, made before
// stamping so the checkout's root holds the same entries as an agent's
// worktree, which gets its link before it is compared), ignored by every
// worktree of the repository through info/exclude so it is never counted
// as anyone's change; and the rustc wrapper, installed in the store's bin/.
func prepareRemap(o Options, r *Record) error {
	if err := o.Store.InstallRemapWrapper(o.RustcBin); err != nil {
		return fmt.Errorf("remap mode: %w", err)
	}
	if err := o.Repo.Exclude("/" + store.RemapLink); err != nil {
		return fmt.Errorf("remap mode: %w", err)
	}
	_, link := r.BuildPaths()
	if err := os.Symlink(r.Target, link); err != nil {
		return fmt.Errorf("remap mode: link the checkout to the target: %w", err)
	}
	return nil
}

// unready turns ready base r back into a partial one, for --rebuild: its
// base.json goes, durably, so that a crash from here on leaves a partial
// base for the next build to discard. A base still mounted as an overlay's
// lower layer (an overlay agent's processes run) is refused: its files
// must not change under them.
func unready(s *store.Store, r *Record) error {
	// An overlay agent's idle namespace, kept for the host to reach its
	// build output, must not stand in the way: end those holders first.
	fork.EndHolders(s.AgentsDir(), r.Target)
	if sandbox.MountedLower(r.Target) {
		return failure.New(failure.Refused, "stop the processes of the overlay agents spawned from it (their shells and builds), then try again",
			"base %s is in use as the lower layer of a running overlay agent", r.ID)
	}
	if err := os.Remove(s.Base(r.ID).Record); err != nil {
		return err
	}
	return atomicfile.SyncDir(r.Dir)
}

// Discard removes every trace of a base that is not ready: its registered
// worktree and its directory. The caller holds the base lock. After a failed
// build Build then removes the lock file too, still holding it (package
// lock's protocol): nothing is left for the base, and a builder waiting on
// the lock wakes, locks a new file and builds, as it would have anyway. The
// discard of a partial base before a build keeps it: the build goes on
// under that lock. A discard that fails keeps it too: a directory is left,
// and gc deletes both. A pull of a shared base (package share) discards
// its partial base the same way.
func Discard(o Options, id string) error {
	dir := o.Store.BaseDir(id)
	if _, err := os.Stat(o.Store.Base(id).Record); err == nil {
		return fmt.Errorf("refusing to discard ready base %s", id)
	}
	if err := o.Repo.WorktreeRemove(o.Store.Base(id).Src); err != nil {
		return err
	}
	// RemoveTree: a layered refresh's overlay work dir holds a directory
	// without permissions.
	if err := fork.RemoveTree(dir); err != nil {
		return err
	}
	return atomicfile.SyncDir(o.Store.BasesDir())
}

// SetCurrent records id as current under the store lock. Called with the
// base lock held (the lock order's one exception: see package lock).
func SetCurrent(s *store.Store, id string) error {
	l, err := lock.Take(s.LockPath())
	if err != nil {
		return err
	}
	defer l.Release()
	return s.SetCurrent(id)
}

func interrupted(err error) error {
	return failure.Wrap(failure.Interrupted, err, "", "base build interrupted; the partial base was discarded")
}

func since(t time.Time) float64 {
	return float64(time.Since(t).Round(time.Millisecond)) / float64(time.Second)
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
