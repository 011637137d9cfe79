package oracle

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
)

// Agent is one working tree under test: the harness edits Tree, then calls
// Build and Run and compares what they give with a reference build.
type Agent interface {
	// Name identifies the agent in reports.
	Name() string
	// Tree is the agent's working tree on the host; the harness edits it.
	Tree() string
	// Build builds Tree as the agent would, with dir (slash-separated,
	// relative to Tree, "" for Tree itself) as working directory: for the
	// default variant cargo build --workspace --all-targets, then cargo
	// test -p app, and it returns the standard output of the test run;
	// for another, cargo build -p app with the variant's options (its
	// test output is ""). An error means a build or a test failed.
	Build(ctx context.Context, dir string, v Variant) (testOutput string, err error)
	// Run runs the app binary the last Build of variant v produced and
	// returns its standard output.
	Run(ctx context.Context, v Variant) (string, error)
}

// Variant is how a check builds: as the base warmed it (the zero value),
// or now and then the way agents build what the base may hold only
// because agents demanded it: a release build, or a feature the plain
// build leaves off. The app prints the same marker either way, so the
// reference's cold build of the default decides what is right.
type Variant struct {
	Release  bool
	Features string // for --features, "" for none
}

// Args are the variant's cargo options.
func (v Variant) Args() []string {
	var a []string
	if v.Release {
		a = append(a, "--release")
	}
	if v.Features != "" {
		a = append(a, "--features", v.Features)
	}
	return a
}

// Profile is the profile dir the variant's binary is in.
func (v Variant) Profile() string {
	if v.Release {
		return "release"
	}
	return "debug"
}

func (v Variant) String() string {
	if v == (Variant{}) {
		return "default"
	}
	return "cargo build -p " + fixture.AppCrate + " " + strings.Join(v.Args(), " ")
}

// FeatureVariant is the feature a check's feature variant turns on: the
// fixture's test-only feature, which a plain build leaves off.
var FeatureVariant = Variant{Features: fixture.ManifestCrate + "/" + fixture.DevFeature}

// drawVariant picks the variant of a check: mostly the default, one in
// six a release build, one in six the feature.
func drawVariant(rng *rand.Rand) Variant {
	switch rng.IntN(6) {
	case 0:
		return Variant{Release: true}
	case 1:
		return FeatureVariant
	}
	return Variant{}
}

// Rooted is an Agent whose build sees its tree at a known path, which the
// app's ManifestDirFlag output must then name: the reference's output moved
// from the reference's copy to that path. A build that kept a unit of the
// base's (a build at other paths, without the namespace sandbox) shows
// the base's path there.
type Rooted interface {
	// BuildRoot is where the agent's cargo sees Tree: the canonical
	// checkout in the sandbox, the worktree itself without it.
	BuildRoot() string
	// RunManifestDir runs the app binary the last Build of variant v
	// produced with ManifestDirFlag and returns its standard output.
	RunManifestDir(ctx context.Context, v Variant) (string, error)
}

// Options shape a run of the harness.
type Options struct {
	// Seed drives every random choice.
	Seed uint64
	// Rounds is the number of rounds each agent makes (at least 1).
	Rounds int
	// Lockstep makes the agents take turns in a fixed order (agent 0's round
	// 0, agent 1's round 0, …, agent 0's round 1, …) instead of running
	// concurrently.
	Lockstep bool
	// Script, when it returns ok, fixes the edit kinds of an agent's round
	// (none at all is allowed) instead of drawing them.
	Script func(agent, round int) (kinds []Kind, ok bool)
	// Repro is printed with every mismatch and error: how to rerun this
	// exact sequence of edits.
	Repro string
	// Logf, when set, receives one line per checked build.
	Logf func(format string, args ...any)
	// Variants makes a check now and then also build and run another
	// Variant (drawVariant), compared with the same reference.
	// VariantScript, when it returns ok, fixes the variant of an agent's
	// round's checks instead.
	Variants      bool
	VariantScript func(agent, round int) (v Variant, ok bool)
}

// Harness runs agents through rounds of edits and checked builds.
type Harness struct {
	Agents     []Agent
	References []*Reference // References[i] is Agents[i]'s
	// Bases[i], when set, is the tree whose bytes Agents[i]'s reverted edits
	// restore (the checkout of the base it was forked from); by default the
	// agent's own tree as it is when Run starts.
	Bases   []string
	Options Options
}

// Mismatch is a wrong build: what an agent's build produced differs from a
// cold build of the same tree.
type Mismatch struct {
	Agent string
	Round int
	Step  string   // which build of the round
	What  string   // "app output", "test output", "build", "app run"
	Edits []string // every edit the agent made so far, oldest first
	Seed  uint64
	Repro string

	Expected, Got string
}

func (m Mismatch) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "MISMATCH: agent %s, round %d, %s: %s differs from a cold build of the same tree (seed %d)\n",
		m.Agent, m.Round, m.Step, m.What, m.Seed)
	if m.Repro != "" {
		fmt.Fprintf(&b, "  reproduce: %s\n", m.Repro)
	}
	fmt.Fprintf(&b, "  edits so far (%d):\n", len(m.Edits))
	for _, e := range m.Edits {
		fmt.Fprintf(&b, "    %s\n", e)
	}
	if d := wordDiff(m.Expected, m.Got); d != "" {
		fmt.Fprintf(&b, "  differing words (expected -> got):\n%s", d)
	}
	fmt.Fprintf(&b, "  expected: %s\n  got:      %s", indent(m.Expected), indent(m.Got))
	return b.String()
}

// Report is the outcome of a run.
type Report struct {
	Seed       uint64
	Mismatches []Mismatch
	// Errors are problems of the harness itself (an edit or a reference build
	// that failed, a reference that disagrees with fixture.ExpectedMarker):
	// never a finding about the builds under test.
	Errors []string
	// Checks counts the builds checked against a reference.
	Checks int
	// Kinds counts the edits made, by the kind applied (deleting an asset
	// when none is left adds one instead).
	Kinds   map[Kind]int
	Elapsed time.Duration

	mu sync.Mutex
}

func (r *Report) mismatch(m Mismatch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Mismatches = append(r.Mismatches, m)
}

func (r *Report) errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Errors = append(r.Errors, fmt.Sprintf(format, args...))
}

func (r *Report) count(k Kind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Kinds[k]++
}

func (r *Report) checked() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Checks++
}

// KindSummary lists the edit counts by kind, e.g. "source=7 asset-add=3 …".
func (r *Report) KindSummary() string {
	var parts []string
	for _, k := range AllKinds() {
		parts = append(parts, fmt.Sprintf("%s=%d", k, r.Kinds[k]))
	}
	return strings.Join(parts, " ")
}

// agentState is what the harness tracks for one agent.
type agentState struct {
	idx     int
	agent   Agent
	ref     *Reference
	rng     *rand.Rand
	vrng    *rand.Rand // draws the variants, apart from the edits
	ed      *editor
	history []string
	// roundEdits are the edits since the last check, for the log.
	roundEdits []string
}

// Run runs every agent through Options.Rounds rounds and returns the report.
// It returns an error only when the run could not start.
func (h *Harness) Run(ctx context.Context) (*Report, error) {
	start := time.Now()
	o := h.Options
	if len(h.Agents) == 0 || len(h.References) != len(h.Agents) {
		return nil, fmt.Errorf("oracle: %d agents and %d references", len(h.Agents), len(h.References))
	}
	if o.Rounds < 1 {
		return nil, fmt.Errorf("oracle: %d rounds", o.Rounds)
	}
	rep := &Report{Seed: o.Seed, Kinds: map[Kind]int{}}
	cover := rand.New(rand.NewPCG(o.Seed, 0x6f7261636c65)).Perm(len(AllKinds()))

	states := make([]*agentState, len(h.Agents))
	for i, a := range h.Agents {
		rng := rand.New(rand.NewPCG(o.Seed, uint64(i)+1))
		baseTree := a.Tree()
		if i < len(h.Bases) && h.Bases[i] != "" {
			baseTree = h.Bases[i]
		}
		ed, err := newEditor(a.Tree(), baseTree, a.Name(), rng)
		if err != nil {
			return nil, err
		}
		states[i] = &agentState{idx: i, agent: a, ref: h.References[i], rng: rng, ed: ed,
			vrng: rand.New(rand.NewPCG(o.Seed, uint64(i)+0x7661726961))}
	}

	var tn *turns
	if o.Lockstep {
		tn = newTurns()
	}
	var wg sync.WaitGroup
	for _, st := range states {
		wg.Add(1)
		go func() {
			defer wg.Done()
			aborted := false
			for r := 0; r < o.Rounds; r++ {
				if tn != nil {
					tn.wait(r*len(states) + st.idx)
				}
				if !aborted && ctx.Err() == nil {
					kinds := h.kindsFor(st, r, cover, len(states))
					aborted = !h.round(ctx, rep, st, r, kinds)
				}
				if tn != nil {
					tn.done()
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		rep.errorf("run interrupted: %v (seed %d)", err, o.Seed)
	}
	sort.SliceStable(rep.Mismatches, func(i, j int) bool {
		a, b := rep.Mismatches[i], rep.Mismatches[j]
		if a.Round != b.Round {
			return a.Round < b.Round
		}
		return a.Agent < b.Agent
	})
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// kindsFor returns the edit kinds of agent st's round r: scripted, or the
// covering kind of this slot followed by zero to two weighted draws.
func (h *Harness) kindsFor(st *agentState, r int, cover []int, agents int) []Kind {
	if h.Options.Script != nil {
		if ks, ok := h.Options.Script(st.idx, r); ok {
			return ks
		}
	}
	all := AllKinds()
	kinds := []Kind{all[cover[(r*agents+st.idx)%len(all)]]}
	for n := st.rng.IntN(3); n > 0; n-- {
		kinds = append(kinds, drawKind(st.rng))
	}
	return kinds
}

// round applies the edits of one round and checks the builds; it returns
// false when the agent cannot go on (a harness error).
func (h *Harness) round(ctx context.Context, rep *Report, st *agentState, r int, kinds []Kind) bool {
	var restores []*edit
	st.roundEdits = st.roundEdits[:0]
	for _, k := range kinds {
		e, err := st.ed.apply(k)
		if err != nil {
			rep.errorf("agent %s, round %d: edit %s: %v (seed %d; %s)", st.agent.Name(), r, k, err, h.Options.Seed, h.Options.Repro)
			return false
		}
		rep.count(e.kind)
		st.history = append(st.history, fmt.Sprintf("round %d: %s", r, e.desc))
		st.roundEdits = append(st.roundEdits, e.desc)
		if e.restore != nil {
			restores = append(restores, e)
		}
	}
	if len(kinds) == 0 {
		st.history = append(st.history, fmt.Sprintf("round %d: (no edit)", r))
	}
	step := "build"
	if len(restores) > 0 {
		step = "build before the revert"
	}
	if !h.check(ctx, rep, st, r, step) {
		return false
	}
	if len(restores) == 0 {
		return true
	}
	for _, e := range restores {
		desc, err := e.restore()
		if err != nil {
			rep.errorf("agent %s, round %d: %v (seed %d; %s)", st.agent.Name(), r, err, h.Options.Seed, h.Options.Repro)
			return false
		}
		st.history = append(st.history, fmt.Sprintf("round %d: %s", r, desc))
		st.roundEdits = append(st.roundEdits, desc)
	}
	return h.check(ctx, rep, st, r, "build after restoring the base's bytes")
}

// check builds the agent, builds the reference of the same tree, and
// compares; it returns false on a harness error.
func (h *Harness) check(ctx context.Context, rep *Report, st *agentState, r int, step string) bool {
	o := h.Options
	a := st.agent
	dir := buildDir(st.rng)
	if dir != "" {
		step += " in " + dir
	}
	var v Variant
	if o.Variants {
		v = drawVariant(st.vrng)
	}
	if o.VariantScript != nil {
		if sv, ok := o.VariantScript(st.idx, r); ok {
			v = sv
		}
	}
	t0 := time.Now()
	testOut, buildErr := a.Build(ctx, dir, Variant{})
	var got string
	var runErr error
	if buildErr == nil {
		got, runErr = a.Run(ctx, Variant{})
	}
	var vOut string
	var vErr error
	if v != (Variant{}) && buildErr == nil {
		step += "; then " + v.String()
		if _, vErr = a.Build(ctx, dir, v); vErr == nil {
			vOut, vErr = a.Run(ctx, v)
		}
	}
	t1 := time.Now()
	ref, refErr := st.ref.Build(ctx, a.Tree())
	t2 := time.Now()
	if ctx.Err() != nil {
		return false
	}
	if refErr != nil {
		rep.errorf("agent %s, round %d, %s: reference build failed (the edits broke the tree: a harness bug): %v\n  edits so far:\n    %s\n  seed %d; %s",
			a.Name(), r, step, refErr, strings.Join(st.history, "\n    "), o.Seed, o.Repro)
		return false
	}
	want, err := fixture.ExpectedMarker(st.ref.Src())
	if err != nil {
		rep.errorf("agent %s, round %d: %v", a.Name(), r, err)
		return false
	}
	if ref.App != want {
		rep.errorf("agent %s, round %d, %s: the reference build disagrees with fixture.ExpectedMarker (a harness bug, seed %d; %s)\n%s",
			a.Name(), r, step, o.Seed, o.Repro, wordDiff(want, ref.App))
		return false
	}
	rep.checked()
	m := Mismatch{Agent: a.Name(), Round: r, Step: step, Edits: append([]string(nil), st.history...), Seed: o.Seed, Repro: o.Repro}
	found := 0
	switch {
	case buildErr != nil:
		m.What, m.Expected, m.Got = "build", "a successful build and test run (the reference's succeeds)", buildErr.Error()
		rep.mismatch(m)
		found++
	case runErr != nil:
		m.What, m.Expected, m.Got = "app run", ref.App, runErr.Error()
		rep.mismatch(m)
		found++
	default:
		if got != ref.App {
			m.What, m.Expected, m.Got = "app output", ref.App, got
			rep.mismatch(m)
			found++
		}
		if gt, wt := normalizeTest(testOut), normalizeTest(ref.Test); gt != wt {
			m.What, m.Expected, m.Got = "test output", wt, gt
			rep.mismatch(m)
			found++
		}
		variants := []Variant{{}}
		switch {
		case vErr != nil:
			m.What, m.Expected, m.Got = v.String(), "a successful build and run (the default's succeeded)", vErr.Error()
			rep.mismatch(m)
			found++
		case v != (Variant{}):
			variants = append(variants, v)
			if vOut != ref.App {
				m.What, m.Expected, m.Got = "app output of "+v.String(), ref.App, vOut
				rep.mismatch(m)
				found++
			}
		}
		if ra, ok := a.(Rooted); ok {
			want := ra.BuildRoot() + strings.TrimPrefix(ref.ManifestDir, st.ref.Src())
			for _, v := range variants {
				if md, err := ra.RunManifestDir(ctx, v); err != nil {
					m.What, m.Expected, m.Got = "app run "+fixture.ManifestDirFlag+" ("+v.String()+")", want, err.Error()
					rep.mismatch(m)
					found++
				} else if md != want {
					m.What, m.Expected, m.Got = "app "+fixture.ManifestDirFlag+" output ("+v.String()+")", want, md
					rep.mismatch(m)
					found++
				}
			}
		}
	}
	if o.Logf != nil {
		verdict := "same as the cold build"
		if found > 0 {
			verdict = fmt.Sprintf("%d MISMATCH(ES)", found)
		}
		edits := "no edit"
		if len(st.roundEdits) > 0 {
			edits = strings.Join(st.roundEdits, "; ")
		}
		o.Logf("agent %s round %d (%s): %s; agent %.1fs, reference %.1fs [%s]", a.Name(), r, step, verdict,
			t1.Sub(t0).Seconds(), t2.Sub(t1).Seconds(), edits)
	}
	st.roundEdits = st.roundEdits[:0]
	return true
}

// buildDir is where cargo runs for a build: mostly the worktree's root,
// sometimes a member crate or a directory that is no package, where Cargo
// (and Ferry's shim) must find the workspace above.
func buildDir(rng *rand.Rand) string {
	switch n := rng.IntN(8); {
	case n == 0:
		return fixture.AssetsDir
	case n == 1:
		members := fixture.Members(fixture.Options{})
		return fixture.CrateDir(members[rng.IntN(len(members))])
	case n == 2:
		return fixture.CrateDir(fixture.ChainC) + "/src"
	}
	return ""
}

// normalizeTest keeps what a test run's output says about the code: its
// non-empty lines without timings, sorted (tests run in parallel and report
// in completion order).
func normalizeTest(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if i := strings.Index(l, "; finished in "); i >= 0 {
			l = l[:i]
		}
		lines = append(lines, l)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// wordDiff lists the words that differ between two marker lines, position
// by position.
func wordDiff(want, got string) string {
	w, g := strings.Fields(want), strings.Fields(got)
	if len(w) == 0 || len(g) == 0 {
		return ""
	}
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)); i++ {
		var ws, gs string
		if i < len(w) {
			ws = w[i]
		}
		if i < len(g) {
			gs = g[i]
		}
		if ws != gs {
			fmt.Fprintf(&b, "    %s -> %s\n", orNone(ws), orNone(gs))
		}
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func indent(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n            ")
}

// turns orders the agents' rounds in lockstep mode.
type turns struct {
	mu   sync.Mutex
	cond *sync.Cond
	next int
}

func newTurns() *turns {
	t := &turns{}
	t.cond = sync.NewCond(&t.mu)
	return t
}

// wait blocks until it is turn n.
func (t *turns) wait(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.next != n {
		t.cond.Wait()
	}
}

// done ends the current turn.
func (t *turns) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	t.cond.Broadcast()
}
