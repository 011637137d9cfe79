// Package basecmd is the command layer of ferry-base (`ferry base`): build
// or reuse the base of a commit, list and verify bases, and follow the bus
// building every commit ferry-watch announces. It links the NATS client,
// not the server.
package basecmd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/metrics"
	"github.com/ferrydev/ferry/pkg/pipeline"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/relocate"
	"github.com/ferrydev/ferry/pkg/share"
)

type grammar struct {
	Build  buildCmd  `cmd:"" default:"withargs" help:"Build (or reuse) the immutable warm base of a commit and make it current."`
	List   listCmd   `cmd:"" help:"List the bases of this repository."`
	Verify verifyCmd `cmd:"" help:"Check that ready bases still hold the target they were built with, from its listing (inodes, sizes, modes, mtimes, change times), or with --full from every file's bytes (exit 6 if one does not)."`
	Export exportCmd `cmd:"" help:"Write the ready base of a commit as one signed file, for a machine that cannot reach the bus (a cloud agent's container, a CI runner, a new laptop)."`
	Import importCmd `cmd:"" help:"Install a base from a file ferry base export wrote (signed by a key in [share] trusted-keys), relocated to this store, and make it current."`
	Key    keyCmd    `cmd:"" help:"Print the cache key of a commit's base (its commit and the fingerprint of toolchain, target, warm commands and modes) and the prefix older commits' bases share, for a CI cache of exported bases."`
}

type keyCmd struct {
	Rev  string `help:"Revision whose base's key to print." default:"HEAD" placeholder:"R"`
	JSON bool   `name:"json" help:"Print the key and what it is made of as JSON."`
}

type exportCmd struct {
	Rev     string `help:"Revision whose ready base to export." default:"HEAD" placeholder:"R"`
	Output  string `short:"o" help:"File to write (- for stdout); default: ferry-base-<commit>.ferrybase here." placeholder:"FILE"`
	Against string `help:"Write a delta against this ready base (a base id, or a revision whose base it is): files with its content name it instead of holding it, for a reader that holds that base at the same store path." placeholder:"BASE"`
	JSON    bool   `name:"json" help:"Print what was written as JSON."`
}

type importCmd struct {
	File          string `arg:"" help:"The archive ferry base export wrote (- for stdin)." placeholder:"FILE"`
	TrustUnsigned bool   `help:"Install it even when it is unsigned or signed by a key this host does not trust (a file you vouch for)."`
	JSON          bool   `name:"json" help:"Print what was installed as JSON."`
}

type buildCmd struct {
	Rev     string `help:"Revision to build." default:"HEAD" placeholder:"R"`
	Cold    bool   `help:"Build from scratch, never seeded from another base." xor:"pull"`
	Rebuild bool   `help:"Discard the base of R if it is ready and build it again (the fix for a base changed after it was built)."`
	Follow  bool   `help:"Keep building: consume commit.seen events from the bus (see ferry-watch) until stopped. With --pull: runner mode, install each base the fleet announces (base.ready naming an object) instead of building it."`
	Publish bool   `help:"Upload the ready base to the bus's bases bucket, for other hosts to pull."`
	Pull    bool   `help:"Install the base of R from the bus's bases bucket instead of building it (refused, naming the difference, when it was built with another toolchain, warm commands or modes)." xor:"pull"`
	JSON    bool   `name:"json" help:"Print the base record as JSON."`
}

type listCmd struct {
	JSON bool `name:"json" help:"Print the bases as JSON."`
}

const desc = "Build immutable warm bases: one Cargo build per commit, at canonical paths inside a namespace sandbox (at the base's host paths without one: [sandbox] mode)."

var examples = []string{
	"ferry base                  # build (or reuse) the base of HEAD and make it current",
	"ferry base --rev main~3 --json",
	"ferry base --publish        # build, then upload the base for runners",
	"ferry base --pull --rev R   # on a runner: install the published base of R",
	"ferry base --follow --pull  # runner mode: install every base the fleet publishes",
	"ferry base list",
	"ferry base verify --all",
	"ferry base verify --full    # also read every file of the current base and compare its SHA-256",
	"ferry base export -o base.ferrybase   # the current base as one signed file",
	"ferry base import base.ferrybase      # on another machine: install it, relocated",
	"ferry base key              # the cache key of HEAD's base, and the prefix for older commits' bases",
}

// Main runs ferry-base with args and returns its exit code; name is the
// command as typed (cli.Name).
func Main(name string, args []string, io cli.IO) int {
	var c grammar
	ctx, code, done := cli.Parse(name, desc, examples, &c, args, io, cli.WithDefaultHelp("build"))
	if done {
		return code
	}
	switch ctx.Command() {
	case "list":
		return cli.Report(io, name, c.List.run(io), c.List.JSON)
	case "key":
		return cli.Report(io, name, c.Key.run(io), c.Key.JSON)
	case "export":
		return cli.Report(io, name, c.Export.run(io), c.Export.JSON)
	case "import <file>":
		return cli.Report(io, name, c.Import.run(io), c.Import.JSON)
	case "verify":
		err := c.Verify.run(io)
		// With --json the results are the answer on stdout, changed bases
		// included; the refusal then goes to stderr only.
		return cli.Report(io, name, err, c.Verify.JSON && !c.Verify.answered)
	default:
		return cli.Report(io, name, c.Build.run(io), c.Build.JSON)
	}
}

func env(fc *cli.Context, io cli.IO) pipeline.Env {
	return pipeline.Env{Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store, Log: io.Stderr, Prog: "ferry-base",
		Reload: func() (*config.Settings, error) { s, _, err := cli.Settings(fc.Repo); return s, err }}
}

func (c *buildCmd) run(io cli.IO) error {
	fc, err := cli.Load(".")
	if err != nil {
		return err
	}
	stop := cli.StopOnSignals()
	defer stop.Release()
	if c.Follow {
		if err := fc.Store.Init(); err != nil {
			return err
		}
		e := env(fc, io)
		srv, err := metrics.ServeStage(stop.Context(), "ferry-base", fc.Settings, fc.Store)
		if err != nil {
			return err
		}
		if srv != nil {
			defer srv.Close()
			e.Logf("metrics at http://%s/metrics", srv.Addr())
			e.Observer = metrics.Recorder{}
		}
		if c.Pull {
			// Runner mode: install the bases the fleet announces.
			err := pipeline.RunRunner(stop.Context(), pipeline.RunnerOptions{Env: e, Shim: true})
			return stop.Err("ferry base --follow --pull", err)
		}
		err = pipeline.RunBuilder(stop.Context(), pipeline.BuilderOptions{Env: e, Shim: true})
		return stop.Err("ferry base --follow", err)
	}
	e := env(fc, io)
	o := base.Options{
		Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store,
		Rev: c.Rev, Cold: c.Cold, Rebuild: c.Rebuild, Progress: io.Stderr, Shim: true,
	}
	var conn *bus.Conn
	if c.Publish || c.Pull {
		cfg := e.BusConfig("ferry-base")
		cfg.Bound = shareBound
		if conn, err = bus.Dial(stop.Context(), cfg); err != nil {
			return err
		}
		defer conn.Close()
	}
	if c.Pull {
		return c.pull(stop, conn, e, o, io)
	}
	var publish pipeline.Share
	var published *share.Published
	if c.Publish {
		publish = func(ctx context.Context, r *base.Record) (string, error) {
			signer, err := share.HostSigner(fc.Settings.StoreParent, func(f string, a ...any) { fmt.Fprintf(io.Stderr, "ferry-base: "+f+"\n", a...) })
			if err != nil {
				return "", err
			}
			p, err := share.Publish(ctx, conn, bucket(fc.Settings), r, signer)
			if err != nil {
				return "", err
			}
			published = p
			return p.Object, nil
		}
	}
	res, err := pipeline.BuildAndShare(stop.Context(), e.OneShot("ferry-base"), o, publish)
	if err != nil {
		return err
	}
	if c.JSON {
		return cli.WriteJSON(io.Stdout, struct {
			*base.Record
			Reused bool `json:"reused"`
			// Current: the base is current now (false when current
			// stays at a newer commit of its history).
			Current   bool             `json:"current"`
			Published *share.Published `json:"published,omitempty"`
			// First is the base of the first warm command a progressive
			// build made current before this one.
			First *firstBase `json:"first,omitempty"`
		}{res.Record, res.Reused, !res.NotCurrent, published, firstOf(res)})
	}
	r := res.Record
	verb := "built"
	if res.Reused {
		verb = "reused"
	}
	defer func() {
		if published != nil {
			m := published.Meta
			fmt.Fprintf(io.Stdout, "  published %s/%s: %.1f MB (%.1f MB of target) in %s\n",
				published.Bucket, published.Object, float64(m.Compressed)/1e6, float64(m.Bytes)/1e6, cli.Seconds(published.Seconds))
		}
	}()
	fmt.Fprintf(io.Stdout, "%s base %s\n  commit  %s\n  src     %s\n  target  %s\n  cargo   %s\n",
		verb, r.ID, r.Commit, r.Src, r.Target, r.Toolchain.Cargo)
	if r.Seed != "" {
		by := ""
		switch {
		case r.Layer != nil:
			by = fmt.Sprintf(" (layered: %d entries, %.1f MB, written; %d taken from the seed)", r.Layer.Own, float64(r.Layer.OwnBytes)/1e6, r.Layer.Linked)
		case r.SeedBy != "":
			by = " (" + r.SeedBy + ")"
		}
		fmt.Fprintf(io.Stdout, "  seed    %s%s\n", r.Seed, by)
	}
	if !res.Reused {
		fmt.Fprintf(io.Stdout, "  time    %s total: worktree %s, stamp %s, warm %s\n",
			cli.Seconds(r.Timings.Total), cli.Seconds(r.Timings.Worktree), cli.Seconds(r.Timings.Stamp), cli.Seconds(r.Timings.Warm))
	}
	if f := firstOf(res); f != nil {
		fmt.Fprintf(io.Stdout, "  first   %s, warm for %q, current after %s: agents spawned from then on forked it\n", f.ID, f.Warm, cli.Seconds(f.Seconds))
	}
	for i, w := range r.Warm {
		label := "warm   "
		if i > 0 {
			label = "       "
		}
		fmt.Fprintf(io.Stdout, "  %s %s (%s, %s)\n", label, w.Command, w.Why, cli.Seconds(w.Seconds))
	}
	if d := r.Demand; d != nil {
		ref := "the base's own warm CPU time"
		if d.Reference > 0 {
			ref = fmt.Sprintf("%.1f CPU seconds", d.Reference)
		}
		fmt.Fprintf(io.Stdout, "  demand  %d agent call(s) in %s; %d command(s) demanded and warmed (demand-min %d, budget %.2g × %s)\n",
			d.Calls, d.Window, len(d.Picked), d.Min, d.Budget, ref)
		for _, s := range d.Skipped {
			fmt.Fprintf(io.Stdout, "          not warmed: %s: %s\n", s.Command, s.Why)
		}
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(io.Stdout, "  warning %s\n", w)
	}
	// What agents will build themselves: the base is ready without it.
	for _, w := range r.Incomplete {
		fmt.Fprintf(io.Stdout, "  incomplete %s\n", w)
	}
	return nil
}

// shareBound bounds the connection of --publish and --pull: they move a
// base, and have no outbox to fall back on.
const shareBound = 5 * time.Second

// bucket is the bases bucket the settings name.
func bucket(s *config.Settings) share.Bucket {
	return share.Bucket{Name: s.BasesBucket, MaxBytes: s.BasesMaxBytes, Replicas: s.BusReplicas}
}

func (c *buildCmd) pull(stop *cli.Stop, conn *bus.Conn, e pipeline.Env, o base.Options, io cli.IO) error {
	po := share.PullOptions{Build: o, Bucket: bucket(o.Settings), Progress: io.Stderr}
	res, err := pipeline.Pull(stop.Context(), e.OneShot("ferry-base"), conn, po)
	var np *share.NotPublishedError
	if errors.As(err, &np) {
		return c.pullAncestor(stop, conn, e, po, np, err, io)
	}
	if err != nil {
		return stop.Err("ferry base --pull", err)
	}
	if c.JSON {
		return cli.WriteJSON(io.Stdout, res)
	}
	r := res.Record
	verb := "pulled"
	if res.Reused {
		verb = "reused"
	}
	fmt.Fprintf(io.Stdout, "%s base %s\n  commit  %s\n  src     %s\n  target  %s\n  cargo   %s\n",
		verb, r.ID, r.Commit, r.Src, r.Target, r.Toolchain.Cargo)
	if !res.Reused {
		fmt.Fprintf(io.Stdout, "  from    %s on %s (%.1f MB) in %s\n", res.Meta.Store, res.Meta.Host, float64(res.Meta.Compressed)/1e6, cli.Seconds(res.Seconds))
	}
	if a := res.Relocated; a != nil {
		printRelocated(io, a, res.Rebuilds, "the publisher's")
	}
	return nil
}

// pullAncestor answers a pull of a commit nobody published: it pulls the
// nearest published first-parent ancestor and builds the commit's base
// seeded from it (a refresh, far cheaper than a cold build).
func (c *buildCmd) pullAncestor(stop *cli.Stop, conn *bus.Conn, e pipeline.Env, po share.PullOptions, np *share.NotPublishedError, notPublished error, io cli.IO) error {
	fp := strings.TrimPrefix(np.ID, np.Commit+"-")
	anc, err := share.Nearest(stop.Context(), conn, po.Bucket, po.Build.Repo, np.Commit, fp)
	if err != nil {
		return err
	}
	if anc == "" {
		return notPublished
	}
	fmt.Fprintf(io.Stderr, "ferry-base: no base of %s is published; pulling that of its ancestor %s and refreshing from it\n", cli.Short(np.Commit), cli.Short(anc))
	ao := po
	ao.Build.Rev = anc
	pulled, err := pipeline.Pull(stop.Context(), e.OneShot("ferry-base"), conn, ao)
	if err != nil {
		return stop.Err("ferry base --pull", err)
	}
	bo := po.Build
	bo.Rev = np.Commit
	res, err := pipeline.BuildBase(stop.Context(), e.OneShot("ferry-base"), bo)
	if err != nil {
		return stop.Err("ferry base --pull", err)
	}
	if c.JSON {
		return cli.WriteJSON(io.Stdout, struct {
			*share.Pulled
			Refreshed *base.Record `json:"refreshed"`
		}{pulled, res.Record})
	}
	r := res.Record
	fmt.Fprintf(io.Stdout, "pulled base %s (ancestor)\nbuilt base %s\n  commit  %s\n  seed    %s\n  src     %s\n  target  %s\n  time    %s pull, %s refresh\n",
		pulled.Record.ID, r.ID, r.Commit, r.Seed, r.Src, r.Target, cli.Seconds(pulled.Seconds), cli.Seconds(r.Timings.Total))
	return nil
}

func (c *listCmd) run(io cli.IO) error {
	fc, err := cli.Load(".")
	if err != nil {
		return err
	}
	list, err := base.List(fc.Store)
	if err != nil {
		return err
	}
	if c.JSON {
		if list == nil {
			list = []base.Entry{}
		}
		return cli.WriteJSON(io.Stdout, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(io.Stdout, "no bases yet: run `ferry base` to build one")
		return nil
	}
	tw := tabwriter.NewWriter(io.Stdout, 0, 4, 2, ' ', 0)
	// INCOMPLETE counts what the warm build left unbuilt (targets that did
	// not compile, a failed clippy command): `ferry base --json` names them.
	// WARM counts the commands a base is warm for (a progressive build's
	// first base: the one it names).
	fmt.Fprintln(tw, "CURRENT\tID\tSTATE\tINCOMPLETE\tWARM\tCOMMIT\tSEED\tCARGO\tCREATED")
	for _, e := range list {
		cur := ""
		if e.Current {
			cur = "*"
		}
		incomplete, warm, commit, seed, cargo, created := "-", "-", "-", "-", "-", "-"
		if e.Record != nil {
			warm = fmt.Sprint(len(e.Record.Warm))
			if len(e.Record.Warm) == 1 {
				warm = e.Record.Warm[0].Command
			}
			if n := len(e.Record.Incomplete); n > 0 {
				incomplete = fmt.Sprint(n)
			}
			commit = cli.Short(e.Record.Commit)
			if e.Record.Seed != "" {
				seed = cli.ShortBase(e.Record.Seed)
			}
			cargo = e.Record.Toolchain.CargoVersion
			created = e.Record.Created.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cur, e.ID, e.State, incomplete, warm, commit, seed, cargo, created)
	}
	return tw.Flush()
}

type verifyCmd struct {
	Rev  string `help:"Verify the ready bases of this revision (default: the current base)." placeholder:"R"`
	All  bool   `help:"Verify every ready base."`
	Full bool   `help:"Also read every file of the target and compare its SHA-256 with the one recorded when the base was built (SHA256SUMS beside base.json), naming the files whose bytes differ."`
	JSON bool   `name:"json" help:"Print one result per base as JSON."`

	answered bool
}

type verifyResult struct {
	ID      string `json:"id"`
	Commit  string `json:"commit"`
	Current bool   `json:"current"`
	OK      bool   `json:"ok"`
	Full    bool   `json:"full"` // the files' bytes were compared too (--full)
	// Weak says why the seal cannot catch everything it would now: a
	// record of an older Ferry, without change times or content digests.
	Weak string `json:"weak,omitempty"`
	// Damaged: its base.json cannot be read (Problem says why).
	Damaged bool    `json:"damaged,omitempty"`
	Problem string  `json:"problem,omitempty"`
	Hint    string  `json:"hint,omitempty"`
	Seconds float64 `json:"seconds"`
}

func (c *verifyCmd) run(io cli.IO) error {
	fc, err := cli.Load(".")
	if err != nil {
		return err
	}
	list, err := base.List(fc.Store)
	if err != nil {
		return err
	}
	commit := ""
	if c.Rev != "" {
		if commit, err = fc.Repo.ResolveCommit(c.Rev); err != nil {
			return err
		}
	}
	results := []verifyResult{}
	bad := 0
	for _, e := range list {
		if e.Damaged != nil {
			// Its commit is the id's first part: a damaged record cannot
			// be verified, only built again.
			idCommit, _, _ := strings.Cut(e.ID, "-")
			if (!c.All && commit == "" && !e.Current) || (commit != "" && idCommit != commit) {
				continue
			}
			results = append(results, verifyResult{ID: e.ID, Commit: idCommit, Current: e.Current, Damaged: true,
				Problem: e.Damaged.Error(), Hint: e.Damaged.Hint()})
			bad++
			continue
		}
		if e.Record == nil || (!c.All && commit == "" && !e.Current) || (commit != "" && e.Record.Commit != commit) {
			continue
		}
		t := time.Now()
		v := verifyResult{ID: e.ID, Commit: e.Record.Commit, Current: e.Current, OK: true, Full: c.Full}
		verify := base.Verify
		if c.Full {
			verify = base.VerifyFull
		}
		err := verify(e.Record)
		if errors.Is(err, base.ErrNoContents) {
			v.Full, err = false, nil
		}
		if err != nil {
			msgs := cli.Messages(err)
			v.OK, v.Problem, v.Hint = false, msgs[len(msgs)-1], failure.HintOf(err)
			bad++
		}
		rebuild := "`ferry base --rebuild --rev " + cli.Short(e.Record.Commit) + "`"
		switch {
		case !e.Record.TargetSeal.Covers():
			v.Weak = "its seal, written by an older Ferry, does not cover restored timestamps (a same-size write with its mtime put back passes) and records no content digests; " + rebuild + " gives it one that does"
		case c.Full && !v.Full:
			v.Weak = "its seal records no content digests, so --full compared its listing only; " + rebuild + " gives it one that does"
		}
		v.Seconds = time.Since(t).Seconds()
		results = append(results, v)
	}
	if _, err := fc.Store.Current(); len(results) == 0 && !c.All && commit == "" && failure.AsDamaged(err) != nil {
		return err // which base is current cannot be told
	}
	if len(results) == 0 {
		what := "no current base"
		if commit != "" {
			what = "no ready base at " + cli.Short(commit)
		}
		return failure.New(failure.Usage, "build one with `ferry base`, or list them with `ferry base list`", "%s to verify", what)
	}
	if c.JSON {
		if err := cli.WriteJSON(io.Stdout, results); err != nil {
			return err
		}
		c.answered = true
	} else {
		for _, v := range results {
			how := ""
			if v.Full {
				how = ", every file read"
			}
			switch {
			case v.OK:
				fmt.Fprintf(io.Stdout, "ok       %s (%s%s)\n", v.ID, cli.Seconds(v.Seconds), how)
			case v.Damaged:
				fmt.Fprintf(io.Stdout, "DAMAGED  %s\n  %s\n  fix: %s\n", v.ID, v.Problem, v.Hint)
			default:
				fmt.Fprintf(io.Stdout, "CHANGED  %s\n  %s\n  fix: %s\n", v.ID, v.Problem, v.Hint)
			}
			if v.Weak != "" {
				fmt.Fprintf(io.Stdout, "  note: %s\n", v.Weak)
			}
		}
	}
	if bad > 0 {
		return failure.New(failure.Refused, "rebuild each changed or damaged base with `ferry base --rebuild --rev COMMIT`",
			"%d of %d base(s) changed after they were built or have a damaged record", bad, len(results))
	}
	return nil
}

func (c *exportCmd) run(io cli.IO) error {
	fc, err := cli.Load(".")
	if err != nil {
		return err
	}
	p, err := base.Resolve(base.Options{Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store, Rev: c.Rev})
	if err != nil {
		return err
	}
	r, err := base.Read(fc.Store, p.ID)
	if errors.Is(err, fs.ErrNotExist) {
		return failure.New(failure.Refused, "build it first: `ferry base --rev "+cli.Short(p.Commit)+"`",
			"no ready base of %s to export (base %s)", cli.Short(p.Commit), p.ID)
	}
	if err != nil {
		return err
	}
	var against *base.Record
	if c.Against != "" {
		if against, err = readyBase(fc, c.Against); err != nil {
			return err
		}
	}
	signer, err := share.HostSigner(fc.Settings.StoreParent, func(f string, a ...any) { fmt.Fprintf(io.Stderr, "ferry-base: "+f+"\n", a...) })
	if err != nil {
		return err
	}
	if err := os.MkdirAll(fc.Store.TmpDir(), 0o700); err != nil {
		return err
	}
	out := c.Output
	if out == "" {
		out = "ferry-base-" + cli.Short(r.Commit) + ".ferrybase"
	}
	var ex *share.Exported
	if out == "-" {
		if c.JSON {
			return failure.New(failure.Usage, "write the archive to a file with -o FILE, or drop --json", "--json and -o - would both write to stdout")
		}
		ex, err = share.Export(r, signer, io.Stdout, fc.Store.TmpDir(), against)
	} else {
		ex, err = exportTo(out, r, signer, fc.Store.TmpDir(), against)
	}
	if err != nil {
		return err
	}
	ex.File = out
	if c.JSON {
		return cli.WriteJSON(io.Stdout, ex)
	}
	if out != "-" {
		fmt.Fprintf(io.Stdout, "exported base %s\n  commit  %s\n  file    %s (%.1f MB; %.1f MB of target)\n  signer  %s\n  time    %s\n",
			r.ID, r.Commit, out, float64(ex.Bytes)/1e6, float64(ex.Meta.Bytes)/1e6, ex.Signer, cli.Seconds(ex.Seconds))
		if d := ex.Meta.Delta; d != nil {
			fmt.Fprintf(io.Stdout, "  delta   against base %s: %d target files (%.1f MB) named, not held\n", d.Seed, d.Seeded, float64(d.SeededBytes)/1e6)
		}
	}
	return nil
}

// readyBase is the ready base that name names: a base id, or a revision
// whose base (as this host would build it) is ready.
func readyBase(fc *cli.Context, name string) (*base.Record, error) {
	if r, err := base.Read(fc.Store, name); err == nil {
		return r, nil
	}
	p, err := base.Resolve(base.Options{Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store, Rev: name})
	if err != nil {
		return nil, failure.Wrap(failure.Usage, err, "name a base of `ferry base list`, or a revision whose base is ready", "--against %s", name)
	}
	r, err := base.Read(fc.Store, p.ID)
	if err != nil {
		return nil, failure.New(failure.Refused, "name a base of `ferry base list`, or build that revision's base first",
			"--against %s: no ready base of %s here (base %s)", name, cli.Short(p.Commit), p.ID)
	}
	return r, nil
}

// exportTo writes the archive to file path whole or not at all: to a
// temporary file beside it, renamed into place when complete.
func exportTo(path string, r *base.Record, signer *share.Signer, tmp string, against *base.Record) (*share.Exported, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name()) // after the rename: nothing
	ex, err := share.Export(r, signer, f, tmp, against)
	if err == nil {
		err = f.Chmod(0o644) // what it holds is signed, not secret
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return nil, fmt.Errorf("export to %s: %w", path, err)
	}
	return ex, nil
}

func (c *importCmd) run(io cli.IO) error {
	fc, err := cli.Load(".")
	if err != nil {
		return err
	}
	stop := cli.StopOnSignals()
	defer stop.Release()
	from := os.Stdin
	if c.File != "-" {
		f, err := os.Open(c.File)
		if err != nil {
			return failure.Wrap(failure.Usage, err, "give the file ferry base export wrote, or - for stdin", "import %s", c.File)
		}
		defer f.Close()
		from = f
	}
	e := env(fc, io)
	o := share.ImportOptions{
		Build: base.Options{Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store, Progress: io.Stderr, Prog: "ferry-base"},
		File:  c.File, From: from, TrustUnsigned: c.TrustUnsigned, Progress: io.Stderr,
	}
	res, err := pipeline.Import(stop.Context(), e.OneShot("ferry-base"), o)
	if err != nil {
		return stop.Err("ferry base import", err)
	}
	if c.JSON {
		return cli.WriteJSON(io.Stdout, res)
	}
	r := res.Record
	verb := "imported"
	if res.Reused {
		verb = "reused"
	}
	fmt.Fprintf(io.Stdout, "%s base %s\n  commit  %s\n  src     %s\n  target  %s\n  cargo   %s\n",
		verb, r.ID, r.Commit, r.Src, r.Target, r.Toolchain.Cargo)
	if !res.Reused {
		fmt.Fprintf(io.Stdout, "  from    %s, exported from %s on %s, in %s\n", c.File, res.Meta.Store, res.Meta.Host, cli.Seconds(res.Seconds))
	}
	if a := res.Relocated; a != nil && a.Paths > 0 {
		printRelocated(io, a, res.Rebuilds, "the exporting store's")
	}
	return nil
}

// printRelocated says what relocating an installed base removed, the
// units that recorded whose paths, and the crates the first build
// rebuilds.
func printRelocated(io cli.IO, a *record.Applied, rebuilds []string, whose string) {
	fmt.Fprintf(io.Stdout, "  relocated %d unit path(s) that recorded %s paths (%d files): the first build rebuilds %d unit(s)",
		a.Paths, whose, a.Files, len(rebuilds))
	if c := relocate.Crates(rebuilds); len(c) > 0 {
		fmt.Fprintf(io.Stdout, " of %s", strings.Join(c, ", "))
	}
	fmt.Fprintln(io.Stdout)
}

// keyPrefix begins every cache key of a base: a CI cache holding other
// things can tell Ferry's entries apart.
const keyPrefix = "ferry-base-"

func (c *keyCmd) run(io cli.IO) error {
	fc, err := cli.Load(".")
	if err != nil {
		return err
	}
	p, err := base.Resolve(base.Options{Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store, Rev: c.Rev})
	if err != nil {
		return err
	}
	// The fingerprint first, the commit last: a cache restoring by prefix
	// finds this commit's base, or the newest saved under the same
	// toolchain, target, warm commands and modes (an older commit's,
	// which a seeded refresh brings up to this one).
	k := struct {
		Key         string   `json:"key"`
		Prefix      string   `json:"prefix"`
		BaseID      string   `json:"base_id"`
		Commit      string   `json:"commit"`
		Fingerprint string   `json:"fingerprint"`
		Rustc       string   `json:"rustc_version"`
		Target      string   `json:"target"`
		Warm        []string `json:"warm"`
		Isolation   string   `json:"isolation"`
		Freshness   string   `json:"freshness"`
	}{
		Prefix: keyPrefix + p.Fingerprint() + "-", BaseID: p.ID, Commit: p.Commit, Fingerprint: p.Fingerprint(),
		Rustc: p.Toolchain.RustcVersion, Target: p.Toolchain.Host, Isolation: p.Modes.Isolation, Freshness: p.Modes.Freshness,
	}
	k.Key = k.Prefix + p.Commit
	for _, w := range p.Warm {
		if w.Demanded == 0 {
			k.Warm = append(k.Warm, w.Command)
		}
	}
	if c.JSON {
		return cli.WriteJSON(io.Stdout, k)
	}
	fmt.Fprintf(io.Stdout, "key     %s\nprefix  %s\n  (rustc %s, %s, %d warm command(s), %s, freshness %s)\n",
		k.Key, k.Prefix, k.Rustc, k.Target, len(k.Warm), k.Isolation, k.Freshness)
	return nil
}

// firstBase is what `ferry base --json` says of a progressive build's first
// base.
type firstBase struct {
	ID      string  `json:"id"`
	Warm    string  `json:"warm"`    // its one warm command
	Seconds float64 `json:"seconds"` // from the start of the build until it was current
}

func firstOf(res *base.Result) *firstBase {
	f := res.First
	if f == nil || len(f.Warm) == 0 {
		return nil
	}
	return &firstBase{ID: f.ID, Warm: f.Warm[0].Command, Seconds: res.FirstSeconds}
}
