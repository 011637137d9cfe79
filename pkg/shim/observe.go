package shim

import (
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/pkg/lifecycle"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/record/demand"
	"github.com/ferrydev/ferry/pkg/sandbox/inplace"
	"github.com/ferrydev/ferry/pkg/session"
	"github.com/ferrydev/ferry/pkg/store"
	"github.com/ferrydev/ferry/pkg/units"
)

// Demand (package demand): every build-type cargo call an agent makes is
// recorded in the store's demand log, normalised, with how many units were
// fresh and how many compiled, read from Cargo's JSON messages as for a
// warm build (record.go): the shim asks for them, stays cargo's parent,
// reads its stdout and passes everything else through. Whatever fails in
// recording is dropped: it never fails or changes the call.
//
// The shim leaves a call's output alone, and records it without counts,
// when it asks for human or short messages, or runs programs (cargo run,
// cargo test or bench without --no-run) with stdout on a terminal: a
// program writing to a pipe instead of the terminal behaves otherwise
// (colours, buffering). Agents' tools run cargo with stdout on a pipe
// already, so their calls are counted. A call made in the agent's sandbox
// already (ferry run, ferry shell) cannot write to the sealed store and
// is not recorded.

// observation is an agent's cargo call the shim records.
type observation struct {
	s   *store.Store
	a   *record.Agent
	cmd demand.Command
	// plan is the call as cargo runs it, with the JSON messages asked for.
	plan  warmPlan
	ws    string // the Cargo workspace, relative to the worktree's top
	start time.Time
	// target is the target dir cargo writes to, as it sees it: the paths
	// in its messages are below it.
	target   string
	fresh    int
	compiled []demand.Unit
	files    [][]string // the outputs of each compiled unit, relative to target
	count    int        // compiled units, with those past MaxUnits
	cpu      float64    // CPU seconds cargo used
}

// watch decides what the shim does with agent a's call, run in the
// worktree at top: nil to run it as before, else the observation to run
// it under. A call demand counts but the shim leaves alone is recorded
// here, without counts.
func (c *Call) watch(s *store.Store, a *record.Agent, top, ws string) *observation {
	if knobs.NoDemandIn(c.Env) {
		return nil
	}
	cmd, ok := demand.Normalize(c.Args, packageDir(top, c.Dir, manifestPathArg(c.Args)))
	if !ok {
		return nil
	}
	o := &observation{s: s, a: a, cmd: cmd, plan: planWarm(c.Args), ws: ws, start: time.Now()}
	if o.plan.unobservable != "" || (runsPrograms(cmd, c.Args) && isTerminal(1)) {
		o.record(0, false)
		return nil
	}
	return o
}

// runsPrograms reports whether the call runs what it builds, with its
// output on cargo's stdout.
func runsPrograms(cmd demand.Command, args []string) bool {
	switch cmd.Sub {
	case "run":
		return true
	case "test", "bench":
		for _, a := range args {
			if a == "--" {
				break
			}
			if a == "--no-run" {
				return false
			}
		}
		return true
	}
	return false
}

// isTerminal reports whether descriptor fd is a terminal.
func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	return err == nil
}

// packageDir is the directory of the package a call in dir selects,
// relative to top: the manifest's (--manifest-path), else the nearest
// directory from dir up to top holding a Cargo.toml; "." for the top or
// anything outside it.
func packageDir(top, dir, manifest string) string {
	rel := func(d string) string {
		r, err := filepath.Rel(top, d)
		if err != nil || r == ".." || strings.HasPrefix(r, "../") {
			return "."
		}
		return filepath.ToSlash(r)
	}
	if manifest != "" {
		if !filepath.IsAbs(manifest) {
			manifest = filepath.Join(dir, manifest)
		}
		return rel(filepath.Dir(manifest))
	}
	if rel(dir) == "." {
		return "."
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "Cargo.toml")); err == nil { // the package's manifest: not a store path
			return rel(d)
		}
		if d == top || d == filepath.Dir(d) {
			return "."
		}
	}
}

// message reads one of Cargo's messages.
func (o *observation) message(body []byte, reason string, _ bool, paths []string) error {
	if reason != units.ReasonArtifact {
		return nil
	}
	art, ok := demand.ParseArtifact(body)
	if !ok {
		return nil
	}
	if art.Fresh {
		o.fresh++
		return nil
	}
	o.count++
	if len(o.compiled) < demand.MaxUnits {
		o.compiled = append(o.compiled, art.Unit(o.target))
		o.files = append(o.files, demand.Relative(art.Filenames, o.target))
	}
	return nil
}

// run runs agent a's session x (cargo with the call's arguments, stdout
// not yet set) as a child of the shim, relays its stdout and records the
// call. It returns cargo's exit status.
func (o *observation) run(x *lifecycle.Session) (int, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		x.Close()
		return 0, err
	}
	// A closed stdout is relay's to handle (cargo's stdout is closed in
	// turn), not the shim's death.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGPIPE)
	defer signal.Stop(sigs)

	cpu0 := childCPU()
	var wait func() (int, error)
	if (x.Mode == lifecycle.EnterBind || x.Mode == lifecycle.EnterJoin) && inplace.Linked {
		proc, err := inplace.Start(x.Cmd, x.Mode == lifecycle.EnterJoin, pw)
		// The child holds busy.lock (and mount.lock) now; the agent lock
		// goes, as it does at the exec when the shim becomes cargo.
		x.Close()
		pw.Close()
		if err != nil {
			pr.Close()
			return 0, err
		}
		wait = func() (int, error) { return waitChild(proc) }
	} else {
		x.Cmd.Stdin, x.Cmd.Stdout, x.Cmd.Stderr = os.Stdin, pw, os.Stderr
		done := make(chan struct{})
		var code int
		var runErr error
		go func() {
			code, runErr = x.Run() // signals as a sandbox child's parent
			pw.Close()
			close(done)
		}()
		wait = func() (int, error) { <-done; return code, runErr }
	}
	relayed := make(chan error, 1)
	go func() { relayed <- relay(pr, os.Stdout, o.plan.json, o.message) }()
	code, err := wait()
	// What cargo started may hold its stdout past its exit (a server a
	// test left behind): relay what comes for a moment, then let it go.
	select {
	case <-relayed:
	case <-time.After(2 * time.Second):
		pr.Close()
		<-relayed
	}
	pr.Close()
	if err != nil {
		return code, err
	}
	o.cpu = childCPU() - cpu0
	o.record(code, true)
	return code, nil
}

// childCPU is the CPU time (user and system) of this process's children
// it has waited for, theirs included: cargo's and every rustc's, once
// cargo is reaped.
func childCPU() float64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_CHILDREN, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// waitChild waits for a child the shim started in place, passing SIGTERM,
// SIGHUP and SIGQUIT on and leaving SIGINT to the terminal, which sends it
// to both (as a sandbox child's parent does), and returns its exit status
// (128+signal when killed).
func waitChild(p *os.Process) (int, error) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	signal.Ignore(syscall.SIGINT)
	defer signal.Reset(syscall.SIGINT)
	defer signal.Stop(sigs)
	go func() {
		for s := range sigs {
			p.Signal(s)
		}
	}()
	st, err := p.Wait()
	if err != nil {
		return 0, err
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return st.ExitCode(), nil
}

// record appends the call to the demand log and, when it compiled units,
// writes them to the agent's last-build.json. observed says the counts
// are Cargo's. Nothing here fails the call.
func (o *observation) record(code int, observed bool) {
	files := o.s.Agent(o.a.Name)
	e := demand.Entry{
		Time: o.start.UTC(), Agent: o.a.Name, Base: o.a.Base, Command: o.cmd.String(), Cmd: o.cmd,
		First: demand.Seen(files.Seen, o.cmd.String()), Observed: observed,
		Exit: code,
	}
	if observed {
		e.Seconds, e.CPU = time.Since(o.start).Seconds(), o.cpu
	}
	b, berr := record.ReadBase(o.s, o.a.Base)
	if berr == nil {
		for _, w := range b.Warm {
			if k, ok := demand.KeyOf(w.Command); ok && k == e.Command {
				e.InBase = true
			}
		}
	}
	if observed {
		e.Fresh, e.Compiled = o.fresh, o.count
		written, werr := session.Written(o.s, o.a)
		for i := range o.compiled {
			u := &o.compiled[i]
			if u.Dir == "" && werr == nil {
				// Less the kernel's coarse clock's tick, which file times come from.
				u.Dir = demand.FindDir(store.NestedTarget(written, o.ws), o.files[i], *u, o.start.Add(-50*time.Millisecond))
			}
			if u.Dir != "" && berr == nil {
				if _, err := os.Lstat(filepath.Join(store.NestedTarget(b.Target, o.ws), filepath.FromSlash(u.Dir))); errors.Is(err, os.ErrNotExist) {
					u.New = true
					e.New++
				}
			}
		}
	}
	demand.Append(o.s.DemandLog(), e)
	if observed && e.Compiled > 0 {
		demand.WriteLastBuild(files.LastBuild, &demand.LastBuild{
			Time: e.Time, Command: e.Command, Base: e.Base, Workspace: o.ws, Target: o.target,
			Fresh: e.Fresh, Compiled: e.Compiled, New: e.New, Seconds: e.Seconds, Exit: code, Units: o.compiled,
		})
	}
}
