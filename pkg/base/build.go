package base

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/confine"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/freshness"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/lifecycle"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
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
	// Prog starts each progress line: the program building (DefaultProg
	// when empty).
	Prog string
	Env  []string // environment of the warm commands; nil means os.Environ()
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
	// OnFirstReady is called when a progressive build's first base is
	// ready and current, before the full base is built on it.
	OnFirstReady func(r *Record)
	// firstOnly builds the base of this one of the plan's warm commands
	// alone: the first step of a progressive build (Settings.Progressive).
	firstOnly string
	// firstInputs is the unit inputs the first step records: the full
	// plan's (buildFirst).
	firstInputs string
}

// Result is what Build did.
type Result struct {
	Record *Record
	Reused bool // the base was already ready; nothing was built
	// NotCurrent: current stays another base, at a newer commit of the
	// same history (SetCurrent).
	NotCurrent bool
	// First is the base of the first warm command a progressive build
	// made ready (and current) before this one; nil when the build was
	// not progressive.
	First *Record
	// FirstSeconds is how long after the build started First was current.
	FirstSeconds float64
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

// DefaultProg is the program progress lines name when Options.Prog is
// empty.
const DefaultProg = "ferry-base"

// ProgName is the program o's progress lines name.
func (o Options) ProgName() string {
	if o.Prog == "" {
		return DefaultProg
	}
	return o.Prog
}

// say writes one progress line, started with the program's name.
func (o Options) say(format string, args ...any) {
	fmt.Fprintf(o.progress(), "%s: "+format+"\n", append([]any{o.ProgName()}, args...)...)
}

// Build builds the base of o.Rev, or reuses it when it is ready, and makes
// it current. A failure leaves no ready base, no base directory, no
// registered worktree, and the previous current base in place.
func Build(ctx context.Context, o Options) (*Result, error) {
	start := time.Now()
	commit, err := resolveCommit(o)
	if err != nil {
		return nil, err
	}
	g := guess(o, commit)
	var probed task[SeedHost]
	if g != nil {
		// Most likely a refresh: the store exists, and its probes run
		// beside the plan's.
		probed = probeSeeding(o.Store.Dir, o.Settings.Layered)
		defer probed() // nothing returns while a probe runs
	}
	likely := begin(func() (verified, error) { return verifyCurrent(o.Store), nil })
	p, err := resolveAt(o, commit)
	if err != nil {
		g.abandon(o)
		return nil, err
	}
	if err := o.Store.Init(); err != nil {
		g.abandon(o)
		return nil, err
	}
	if p.Fallback != "" {
		o.say("warning: %s", p.Fallback)
	}

	l, co := g.take(p.ID)
	if co == nil {
		g.abandon(o)
		if l, err = takeBuildLock(o, p.ID); err != nil {
			return nil, err
		}
	}
	defer l.Release()
	known, _ := likely()
	if co == nil {
		if res, err := reuse(o, p.ID, known); res != nil || err != nil {
			return res, err
		}
		// The commit is checked out while a seed is chosen (its seal
		// checked): neither needs the other.
		co = startCheckout(o, p.ID, commit)
	}
	var seed *Record
	p.SeedWhy = "cold: --cold"
	if progressive(o, p) {
		p.first = firstCommand(o, p)
	}
	var seedHeld *lock.Lock
	if !o.Cold {
		seed, seedHeld, p.SeedWhy = chooseSeed(o.Store, p, o.Settings.Prune, known)
		if seedHeld != nil {
			defer seedHeld.Release()
		}
	}
	var first *Record
	var firstAt float64
	if seed == nil && progressive(o, p) {
		// Cold, with commands to spare: the first command's base first,
		// ready for spawning, then this one seeded from it.
		if first, err = buildFirst(ctx, o, p); err != nil {
			return nil, discardFailed(o, p.ID, co, l, err)
		}
		firstAt = since(start)
		seed, seedHeld, p.SeedWhy = chooseSeed(o.Store, p, o.Settings.Prune, known)
		if seedHeld != nil {
			defer seedHeld.Release()
		}
	}
	if seed != nil {
		p.Seed = seed.ID
	}
	if o.OnBuilding != nil {
		o.OnBuilding(p)
	}

	// Refused under the free-space floor before the warm build, the one
	// that fills a disk; the checkout started beside it is discarded.
	var r *Record
	err = o.Settings.MinFree.Check(o.Store.Dir, fmt.Sprintf("building the base of %.12s", commit))
	if err == nil {
		r, err = build(ctx, o, p, seed, start, co, probed)
	}
	var sc *SeedChangedError
	if errors.As(err, &sc) {
		// The discard unlinks this build's names of the seed's inodes,
		// which moves their change times into a link window: first
		// every ready base whose check shows the write, the seed among
		// them, is made partial (see ExposeSharedWrites).
		seedHeld.Release()
		exposed, xerr := exposeChanged(o.Store, p.ID) // as SealSharing does
		for _, e := range exposed {
			o.say("made base %s partial: it holds a file written outside Ferry's sandboxes during this build (the next build of its commit builds it again)", e)
		}
		if xerr != nil {
			err = errors.Join(err, xerr)
		}
		err = failure.Wrap(failure.Refused, err,
			"find what writes into the store from outside Ferry's sandboxes, then run `ferry base` again: it builds from another base, or cold",
			"the base of %s was not made ready", short(p.Commit))
	}
	if err != nil {
		return nil, discardFailed(o, p.ID, co, l, err)
	}
	cur, _ := o.Store.Current()
	return &Result{Record: r, NotCurrent: cur != r.ID, First: first, FirstSeconds: firstAt}, nil
}

// progressive reports whether the cold build of plan p builds its first
// warm command's base first (Settings.Progressive): with more than one
// command, not under --cold (which seeds from nothing), not already the
// first step.
func progressive(o Options, p *Plan) bool {
	return o.Settings.Progressive && !o.Cold && o.firstOnly == "" && len(p.Warm) > 1
}

// buildFirst builds (or reuses) the base of p's first warm command (the
// one firstCommand chose), which becomes current: agents spawn from it
// while the rest of p warms. It is the seed the full build then takes
// (chooseSeed), as a layer at the same commit. It records p's unit inputs,
// which hash in the commands demand added: all its units are units of p's
// commit, so it seeds p as a base with the same inputs does, with nothing
// to prune. Under --rebuild it is built again too: a first base that
// verifies is the seed (chooseSeed) and is not built at all, and one that
// does not is what --rebuild is for. Its lock is taken under p's own, the
// lock order every progressive build keeps.
func buildFirst(ctx context.Context, o Options, p *Plan) (*Record, error) {
	o.say("warming %q first: agents spawn from its base once it is ready; the other %d command(s) follow, seeded from it", p.Warm[p.first].Command, len(p.Warm)-1)
	fo := o
	fo.firstOnly, fo.firstInputs, fo.OnBuilding = p.Warm[p.first].Command, p.UnitInputs, nil
	res, err := Build(ctx, fo)
	if err != nil {
		return nil, err
	}
	if o.OnFirstReady != nil {
		o.OnFirstReady(res.Record)
	}
	return res.Record, nil
}

// takeBuildLock takes base id's build lock, waiting (and saying so) while
// another build of it holds it.
func takeBuildLock(o Options, id string) (*lock.Lock, error) {
	l, err := lock.TryTake(o.Store.BaseLock(id))
	if err == lock.ErrBusy {
		o.say("waiting for another build of %s", id)
		l, err = lock.Take(o.Store.BaseLock(id))
	}
	return l, err
}

// discardFailed removes what the failed build of base id left, the
// checkout done first, then its lock file l; it returns the build's error
// err with any of theirs.
func discardFailed(o Options, id string, co *checkout, l *lock.Lock, err error) error {
	co.done()
	if derr := Discard(o, id); derr != nil {
		return errors.Join(err, fmt.Errorf("discard the failed base: %w", derr))
	}
	if rerr := l.Remove(); rerr != nil {
		return errors.Join(err, fmt.Errorf("remove the failed base's lock file: %w", rerr))
	}
	return err
}

// reuse serves base id when it is ready, and returns nil, nil when it is
// to be built: it does not exist, or o.Rebuild asks for it again (then it
// is made a partial base first). The caller holds the base lock; known is
// the current base's seal check, taken for id's when it is that base.
//
// A base whose base.json is damaged is refused, naming the file, unless
// o.Rebuild asks for it again: then it is made partial as a ready one is.
func reuse(o Options, id string, known verified) (*Result, error) {
	r, err := Read(o.Store, id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if d := failure.AsDamaged(err); d != nil && o.Rebuild {
		if err := unreadyDamaged(o.Store, id); err != nil {
			return nil, err
		}
		o.say("discarded base %s, whose base.json was damaged, to build it again", id)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if o.Rebuild {
		exposed, err := ExposeSharedWrites(o.Store, id)
		for _, e := range exposed {
			o.say("made base %s partial: it shares a file written outside Ferry's sandboxes with base %s (the next build of its commit builds it again)", e, id)
		}
		if err != nil {
			return nil, err
		}
		if err := unready(o.Store, r); err != nil {
			return nil, err
		}
		o.say("discarded base %s to build it again", id)
		return nil, nil
	}
	// Never serve a base something changed since it was built.
	if !known.of(r) {
		if err := Verify(r); err != nil {
			return nil, err
		}
	}
	if r.Modes.Remap {
		// Its agents run rustc through the installed wrapper: put back a
		// link a move of Ferry's binaries left dangling.
		if err := o.Store.InstallRemapWrapper(o.RustcBin); err != nil {
			return nil, fmt.Errorf("remap mode: %w", err)
		}
	}
	made, err := SetCurrent(o.Repo, o.Store, id)
	if err != nil {
		return nil, err
	}
	o.say("base %s is ready; reused%s", id, keptCurrent(o.Store, made))
	return &Result{Record: r, Reused: true, NotCurrent: !made}, nil
}

// A checkout is a base's checkout going on in the background
// (startCheckout). Each function waits for its step and says how it went,
// the same each time it is called.
type checkout struct {
	discarded func() error // what a crash left of the base is gone
	done      func() error // the commit is checked out, the worktree locked
}

// startCheckout discards what a crash may have left of base id (the
// caller holds its lock), then checks commit out at the base's src (from
// the spare checkout when it can: takeSpare) and locks the worktree, in
// the background.
func startCheckout(o Options, id, commit string) *checkout {
	discarded := begin(func() (struct{}, error) {
		if err := Discard(o, id); err != nil {
			return struct{}{}, fmt.Errorf("discard the partial base %s: %w", id, err)
		}
		return struct{}{}, nil
	})
	done := begin(func() (struct{}, error) {
		if _, err := discarded(); err != nil {
			return struct{}{}, err
		}
		src := o.Store.Base(id).Src
		if err := os.MkdirAll(o.Store.BaseDir(id), 0o755); err != nil {
			return struct{}{}, err
		}
		took, err := takeSpare(o, src, commit)
		if err != nil {
			o.say("warning: the spare checkout could not be taken (%v); checking the commit out", err)
		}
		if took {
			o.say("checked the commit out from the spare checkout")
		} else if err := o.Repo.WorktreeAddDetached(src, commit); err != nil {
			return struct{}{}, err
		}
		return struct{}{}, o.Repo.WorktreeLock(src, store.BaseCheckoutReason(id))
	})
	return &checkout{discarded: func() error { _, err := discarded(); return err }, done: func() error { _, err := done(); return err }}
}

// A guessed checkout is one started before the base's id is known: the
// toolchain's calls take longer than the checkout, and a refresh's id is
// almost always the commit's with the fingerprint of the current base. So
// the checkout starts at that id, under its base lock, while the rest of
// the plan resolves; a wrong guess (a new toolchain, other warm commands
// or modes) is discarded and the build goes on as if there had been none.
// On the benchmark's large workspace (1,238 tracked files) the checkout
// takes 55-150 ms, which now pass while the plan resolves and the seed is
// chosen instead of after.
type guessed struct {
	id       string
	lock     *lock.Lock
	checkout *checkout
}

// guess starts the checkout of commit at the current base's fingerprint,
// and returns nil when there is nothing to guess from (no current base)
// or the guessed base is being built, or exists (ready or not readable):
// then the usual path decides.
func guess(o Options, commit string) *guessed {
	cur, err := o.Store.Current()
	if err != nil || cur == "" {
		return nil
	}
	_, fp, ok := strings.Cut(cur, "-")
	if !ok || fp == "" {
		return nil
	}
	id := ID(commit, fp)
	l, err := lock.TryTake(o.Store.BaseLock(id))
	if err != nil {
		return nil
	}
	if _, err := os.Lstat(o.Store.Base(id).Record); !errors.Is(err, fs.ErrNotExist) {
		l.Release()
		return nil
	}
	return &guessed{id: id, lock: l, checkout: startCheckout(o, id, commit)}
}

// take returns the guessed base's lock and checkout when the guess was
// id, and nils otherwise.
func (g *guessed) take(id string) (*lock.Lock, *checkout) {
	if g == nil || g.id != id {
		return nil, nil
	}
	l, c := g.lock, g.checkout
	g.lock = nil // taken: abandon leaves it alone
	return l, c
}

// abandon undoes a wrong guess: it waits for the checkout, discards it and
// removes the lock file (as after a failed build).
func (g *guessed) abandon(o Options) {
	if g == nil || g.lock == nil {
		return
	}
	g.checkout.done()
	if Discard(o, g.id) == nil {
		g.lock.Remove()
	} else {
		g.lock.Release() // a directory is left: gc deletes it and the lock file
	}
	g.lock = nil
}

// build builds base p on checkout co; probed is the store's seed probes
// (probeSeeding), nil when Build did not start them.
func build(ctx context.Context, o Options, p *Plan, seed *Record, start time.Time, co *checkout, probed task[SeedHost]) (*Record, error) {
	r := newRecord(o, p)
	o.say("building base %s (%s, %s)", p.ID, short(p.Commit), p.Toolchain.Cargo)
	// What the sandbox may confine is probed beside the checkout.
	confined := decideConfinement(o, r)

	t := time.Now()
	sd, err := checkOut(o, r, seed, co, probed)
	defer sd.wait() // nothing returns while the clone still writes
	if err != nil {
		return nil, err
	}
	r.Timings.Worktree = since(t)

	t = time.Now()
	o.say("%s", p.SeedWhy)
	if err := stampOrSeed(o, p, r, seed, sd); err != nil {
		return nil, err
	}
	r.Timings.Stamp = since(t)

	t = time.Now()
	fin := &finishing{o: o, r: r}
	defer fin.wait() // nothing returns while the background work reads or writes the base
	if err := warm(ctx, o, p, r, seed, confined, fin); err != nil {
		return nil, err
	}
	r.Timings.Warm = since(t)

	t = time.Now()
	if err := finish(o, r, fin); err != nil {
		return nil, err
	}
	r.Created = time.Now().UTC()
	r.Timings.Finish = since(t)
	r.Timings.Total = since(start)
	if err := ctx.Err(); err != nil {
		return nil, interrupted(err)
	}
	// base.json is the ready marker: written last, atomically.
	if err := atomicfile.WriteJSON(o.Store.Base(p.ID).Record, r, 0o644); err != nil {
		return nil, err
	}
	made, err := SetCurrent(o.Repo, o.Store, p.ID)
	if err != nil {
		return nil, err
	}
	o.say("base %s ready in %.1fs (warm %.1fs)%s", p.ID, r.Timings.Total, r.Timings.Warm, keptCurrent(o.Store, made))
	return r, nil
}

// newRecord is the record of the base plan p builds, before the build: what
// the plan decided, and its warnings (the demand log's).
func newRecord(o Options, p *Plan) *Record {
	s := o.Store
	r := &Record{Base: record.Base{
		Format: Format, ID: p.ID, Commit: p.Commit, Fingerprint: strings.TrimPrefix(p.ID, p.Commit+"-"),
		Store: s.Dir, Dir: s.BaseDir(p.ID), Src: s.Base(p.ID).Src, Target: s.Base(p.ID).Target,
		MntSrc: s.MntSrc(), MntTarget: s.MntTarget(),
		Toolchain: p.Toolchain, Modes: p.Modes, UnitInputs: p.UnitInputs, Warnings: []string{}, Incomplete: []string{},
		Demand: p.Learned,
	}}
	if l := p.Learned; l != nil && l.Damaged > 0 {
		msg := fmt.Sprintf("the demand log had %d line(s) that could not be read: rebuilt without them", l.Damaged)
		r.Warnings = append(r.Warnings, msg)
		o.say("warning: %s", msg)
	}
	if l := p.Learned; l != nil && l.Error != "" {
		msg := "the demand log could not be read, so nothing was learned from it: " + l.Error
		r.Warnings = append(r.Warnings, msg)
		o.say("warning: %s", msg)
	}
	if p.Fallback != "" {
		r.Warnings = append(r.Warnings, p.Fallback)
	}
	return r
}

// seeding is the clone of a seed's target that runs beside the checkout
// (checkOut): wait returns when it is done, with its error; how says how
// the base started from its seed, once wait returned; tree is the seed's
// commit's tree.
type seeding struct {
	wait func() error
	how  string
	tree task[[]git.Entry]
}

// checkOut checks the base's commit out into its directory, cloning the
// seed's target (when there is a seed) at the same time: the two touch
// different directories, and neither needs the other. The caller waits
// for the returned seeding before it returns, error or not.
func checkOut(o Options, r *Record, seed *Record, co *checkout, probed task[SeedHost]) (*seeding, error) {
	sd := &seeding{wait: func() error { return nil }}
	if err := co.discarded(); err != nil {
		return sd, err
	}
	if err := os.MkdirAll(r.Dir, 0o755); err != nil {
		return sd, err
	}
	if seed != nil {
		sd.tree = begin(func() ([]git.Entry, error) { return o.Repo.LsTree(seed.Commit) })
		clone := begin(func() (struct{}, error) {
			// The probes too run beside the checkout, unless they
			// started with it; r.SeedBy and sd.how are read once wait
			// returns.
			pr := probed
			if pr == nil {
				pr = probeSeeding(o.Store.Dir, o.Settings.Layered)
			}
			var why string
			r.SeedBy, why = seedMethodHere(pr, r)
			sd.how = seedWords(r.SeedBy, why)
			if err := cloneSeed(r, seed); err != nil {
				return struct{}{}, err
			}
			r.reuse = &Reuse{Seed: seed}
			if r.SeedBy != SeedByLayer {
				r.reuse.Cloned = time.Now()
			}
			return struct{}{}, nil
		})
		sd.wait = func() error { _, err := clone(); return err }
	}
	if err := co.done(); err != nil {
		return sd, err
	}
	if r.Modes.Remap {
		if err := prepareRemap(o, r); err != nil {
			return sd, err
		}
	}
	return sd, nil
}

// stampOrSeed lays the target down: the seed's, cloned beside the
// checkout, stamped where the commits agree (and relocated for a base
// built at host paths), or an empty one over a checkout stamped whole.
func stampOrSeed(o Options, p *Plan, r *Record, seed *Record, sd *seeding) error {
	if seed == nil {
		st, err := freshness.StampBaseCheckout(r.Src, p.tree)
		if err != nil {
			return err
		}
		r.Stamped = StampCount{Files: st.Files, Dirs: st.Dirs}
		return os.Mkdir(r.Target, 0o755)
	}
	if err := sd.wait(); err != nil {
		return err
	}
	o.say("%s", sd.how)
	var err error
	if r.Stamped, err = seedFrom(o, p, r, seed, sd.tree); err != nil {
		return err
	}
	r.Seed = seed.ID
	if r.HostPaths() {
		a, err := relocateSeed(r, seed)
		if err != nil {
			return err
		}
		r.Relocated = &a
		o.say("relocated the seed's target: removed %d unit path(s) that recorded the seed's paths", a.Paths)
	}
	return nil
}

// warm runs the warm commands (through the shim when it can be installed,
// so nested workspaces warm in their own target dirs), in the sandbox
// confined is deciding, observed, and removes what they wrote to their
// private $HOME, $CARGO_HOME and /tmp.
func warm(ctx context.Context, o Options, p *Plan, r *Record, seed *Record, confined task[*confine.Record], fin *finishing) error {
	shimDir := ""
	if o.Shim {
		if err := o.Store.InstallShim(o.ShimBin); err != nil {
			msg := fmt.Sprintf("warmed without the shim (%v): workspaces nested in the checkout were not warmed in their own target dirs", err)
			r.Warnings = append(r.Warnings, msg)
			o.say("warning: %s", msg)
		} else {
			shimDir = o.Store.ShimDir()
		}
	}
	if shimDir == "" {
		r.Incomplete = append(r.Incomplete, "nested workspaces: not warmed in their own target dirs (agents build them cold)")
	}
	conf, err := confined()
	if err != nil {
		return err
	}
	r.Confinement = conf
	sayGaps(o, conf)
	prefetch(ctx, o, p, r, seed)
	if err := warmObserved(ctx, o, p, r, seed, shimDir, fin); err != nil {
		return err
	}
	// What the warm commands wrote to $HOME, $CARGO_HOME and /tmp is
	// theirs alone, and goes before the base is ready.
	if err := platform.RemoveTree(store.BaseFiles(r.Dir).Private); err != nil {
		return err
	}
	r.WarmReference = r.ownWarmSeconds()
	if r.Seed != "" && seed != nil && seed.reference() > 0 {
		r.WarmReference = seed.reference()
	}
	return nil
}

// finish collects what the background work found once the warm commands
// were done (the target's dirty files, its relocation plan, its seal, the
// observation, the spare checkout) and makes the target durable, all
// before base.json says it is ready: a crash after the marker cannot leave
// a ready base with torn files (and the first reflink fork does not pay
// for the writeback). Most of the writes went back while the target was
// observed and sealed; the last sync covers the rest, and what pruning
// changed.
func finish(o Options, r *Record, fin *finishing) error {
	msgs, err := fin.dirty()
	if err != nil {
		return err
	}
	for _, msg := range msgs {
		r.Warnings = append(r.Warnings, msg)
		o.say("warning: %s", msg)
	}
	if r.HostPaths() {
		// Forks of this base build at their own paths: what they must
		// rebuild is planned once, here.
		if err := planRelocation(r); err != nil {
			return err
		}
	}
	sd, err := fin.seal()
	if err != nil {
		return fmt.Errorf("seal the base's target: %w", err)
	}
	if len(sd.written) > 0 {
		return &SeedChangedError{Seed: r.reuse.Seed.ID, Files: sd.written}
	}
	r.TargetSeal = sd.seal
	if err := fin.observed(); err != nil {
		return err
	}
	if fin.spare != nil {
		if _, err := fin.spare(); err != nil {
			// The next build checks its commit out itself.
			o.say("warning: the spare checkout was not made: %v", err)
		}
	}
	if _, err := fin.flush(); err != nil {
		return err
	}
	return atomicfile.SyncTree(r.Target)
}

// keptCurrent is what a progress line adds when SetCurrent kept the
// current base: which, and why.
func keptCurrent(s *store.Store, made bool) string {
	if made {
		return ""
	}
	cur, _ := s.Current()
	return fmt.Sprintf("; current stays %s, at a newer commit of its history", cur)
}

// unready turns ready base r back into a partial one, for --rebuild: its
// base.json goes, durably, so that a crash from here on leaves a partial
// base for the next build to discard. A base still mounted as an overlay's
// lower layer (an overlay agent's processes run) is refused: its files
// must not change under them.
func unready(s *store.Store, r *Record) error {
	return unreadyDamaged(s, r.ID)
}

// unreadyDamaged is unready for base id whose record may not be readable:
// everything it needs is where the store's layout puts it.
func unreadyDamaged(s *store.Store, id string) error {
	files := s.Base(id)
	// An overlay agent's idle namespace, kept for the host to reach its
	// build output, must not stand in the way: end those holders first.
	lifecycle.EndHolders(s.AgentsDir(), files.Target)
	if sandbox.MountedLower(files.Target) {
		return failure.New(failure.Refused, "stop the processes of the overlay agents spawned from it (their shells and builds), then try again",
			"base %s is in use as the lower layer of a running overlay agent", id)
	}
	if err := os.Remove(files.Record); err != nil {
		return err
	}
	return atomicfile.SyncDir(s.BaseDir(id))
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
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	// RemoveTree: a layered refresh's overlay work dir holds a directory
	// without permissions. In a link window: a layered refresh or a pull
	// linked its seed's files into it.
	if err := linking(o.Store, id, func() error { return platform.RemoveTree(dir) }); err != nil {
		return err
	}
	return atomicfile.SyncDir(o.Store.BasesDir())
}

// SetCurrent records base id as current under the store lock, unless the
// current base is at a newer commit of the same history: one whose commit
// descends from id's. So current is the newest commit any finished base
// covers, whatever order builds finish in (two `ferry base --rev` at once,
// a watcher's build overtaken by a user's), and an older commit's base,
// built or reused, serves spawns from that commit (chooseBase) without
// taking current back. A commit of another history (a branch switched to)
// replaces current. It reports whether id is current now. Called with the
// base lock held (the lock order's one exception: see package lock).
func SetCurrent(repo *git.Repo, s *store.Store, id string) (bool, error) {
	l, err := lock.Take(s.LockPath())
	if err != nil {
		return false, err
	}
	defer l.Release()
	if cur, err := s.Current(); err == nil && cur != "" && cur != id && repo != nil {
		commit, _, _ := strings.Cut(id, "-")
		curCommit, _, _ := strings.Cut(cur, "-")
		if _, rerr := Read(s, cur); rerr == nil && commit != curCommit {
			// A commit the repository lost (a current left by a history
			// rewritten and collected) answers no: id replaces it.
			if newer, _ := repo.IsAncestor(commit, curCommit); newer {
				return false, nil
			}
		}
	}
	return true, s.SetCurrent(id)
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
