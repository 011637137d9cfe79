// Package watchcmd is the command layer of ferry-watch (`ferry watch`):
// poll a ref and announce new commits, hosting the embedded bus unless an
// external one is configured; and `ferry-watch log`, which reads the event
// log the embedded bus stored while no host runs (`ferry events` falls
// back to it). It is the only command package that links the NATS server.
package watchcmd

import (
	"fmt"
	"time"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/bus/embedded"
	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/metrics"
	"github.com/ferrydev/ferry/pkg/pipeline"
	"github.com/ferrydev/ferry/pkg/pipeline/watcher"
)

type grammar struct {
	Watch watchCmd `cmd:"" default:"withargs" help:"Poll a ref and publish commit.seen for each new commit (the default)."`
	Log   logCmd   `cmd:"" help:"Print the event log the embedded bus stored, while no host runs (what ferry events falls back to)."`
}

type watchCmd struct {
	Rev      string  `help:"Ref to follow." default:"HEAD" placeholder:"R"`
	Interval float64 `help:"Seconds between polls." default:"2" placeholder:"S"`
	GC       bool    `name:"gc" help:"Also collect garbage after each new base (as ferry-gc --follow would)."`
	JSON     bool    `name:"json" help:"Report errors as JSON on stdout."`
}

type logCmd struct {
	JSON bool `name:"json" help:"One JSON event per line."`
}

const desc = "Poll a ref and publish commit.seen for each new commit; hosts the embedded bus unless [bus] url or FERRY_NATS_URL names another."

var examples = []string{
	"ferry watch --rev main --interval 2",
	"ferry-watch log --json",
}

// Main runs ferry-watch with args and returns its exit code; name is the
// command as typed (cli.Name).
func Main(name string, args []string, io cli.IO) int {
	var c grammar
	ctx, code, done := cli.Parse(name, desc, examples, &c, args, io)
	if done {
		return code
	}
	if ctx.Command() == "log" {
		return cli.Report(io, name, c.Log.run(io), c.Log.JSON)
	}
	return cli.Report(io, name, c.Watch.run(io), c.Watch.JSON)
}

func (c *watchCmd) run(io cli.IO) error {
	if c.Interval <= 0 {
		return failure.New(failure.Usage, "pass a positive number of seconds, e.g. --interval 2", "bad --interval %v", c.Interval)
	}
	fc, err := cli.Load(".")
	if err != nil {
		return err
	}
	stop := cli.StopOnSignals()
	defer stop.Release()
	e := pipeline.Env{Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store, Log: io.Stderr, Prog: "ferry-watch"}
	stages := []string{"ferry-watch"}
	if c.GC {
		stages = append(stages, "ferry-gc") // its gc runs in this process
	}
	for _, stage := range stages {
		srv, err := metrics.ServeStage(stop.Context(), stage, fc.Settings, fc.Store)
		if err != nil {
			return err
		}
		if srv != nil {
			defer srv.Close()
			// Named by stage: this process serves gc's metrics too.
			fmt.Fprintf(io.Stderr, "%s: metrics at http://%s/metrics\n", stage, srv.Addr())
		}
	}
	err = watcher.Run(stop.Context(), watcher.Options{
		Env: e,
		Rev: c.Rev, Interval: time.Duration(c.Interval * float64(time.Second)), GC: c.GC,
	})
	return stop.Err("ferry watch", err)
}

// run opens the stored streams of the store parent's bus directory in this
// process (embedded.Options.Offline), forwards the outboxes into them, and
// prints the repository's events.
func (c *logCmd) run(io cli.IO) error {
	fc, err := cli.Load(".")
	if err != nil {
		return err
	}
	h, err := embedded.Start(embedded.Options{Dir: fc.Store.BusDir(), Offline: true})
	if err != nil {
		return failure.Wrap(failure.KindOf(err), err, "while ferry-watch hosts the bus, read the log with `ferry events`", "open the stored event log")
	}
	defer h.Shutdown()
	stop := cli.StopOnSignals()
	defer stop.Release()
	conn, err := bus.Dial(stop.Context(), h.ClientConfig("ferry-watch-log"))
	if err != nil {
		return err
	}
	defer conn.Close()
	// Events waiting in the outboxes join the log first, as they would
	// when a host next runs.
	if _, err := conn.Flush(stop.Context()); err != nil {
		fmt.Fprintf(io.Stderr, "ferry events: outbox: %v\n", err)
	}
	return conn.Replay(stop.Context(), fc.Store.Key, false, func(ev events.Event) { cli.PrintEvent(io, ev, c.JSON) },
		func(subject string, err error) {
			fmt.Fprintf(io.Stderr, "ferry events: undecodable message on %s: %v\n", subject, err)
		})
}
