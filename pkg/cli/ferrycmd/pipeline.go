package ferrycmd

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/pipeline"
)

type upCmd struct {
	Rev      string  `help:"Ref to follow." default:"HEAD" placeholder:"R"`
	Interval float64 `help:"Seconds between polls." default:"2" placeholder:"S"`
	Runner   bool    `help:"Runner mode, what an ephemeral runner runs at boot: install the bases the fleet's bus announces (ferry base --follow --pull) and collect (ferry gc --follow); no watcher, no builds. Needs the fleet's bus: FERRY_NATS_URL or [bus] url."`
}

// up starts the watcher (hosting the bus), the builder and gc as child
// processes and stops them all on Ctrl-C (exit 130) or SIGTERM (exit 0).
func up(args []string, io cli.IO) int {
	var c upCmd
	_, code, done := cli.Parse("ferry up", "Keep bases warm for this repository: start ferry-watch (hosting the bus), ferry-base --follow and ferry-gc --follow, and stop them all on Ctrl-C or SIGTERM (exit 0). Their output goes to stderr.",
		[]string{"ferry up", "ferry up --rev main --interval 5", "ferry up --runner   # on a runner, with FERRY_NATS_URL naming the fleet's bus"}, &c, args, io)
	if done {
		return code
	}
	return cli.Report(io, "ferry up", c.run(io), false)
}

func (c *upCmd) run(io cli.IO) error {
	if c.Interval <= 0 {
		return failure.New(failure.Usage, "pass a positive number of seconds, e.g. --interval 2", "bad --interval %v", c.Interval)
	}
	fc, err := cli.Load(".")
	if err != nil {
		return err
	}
	specs := [][]string{
		{"watch", "--rev", c.Rev, "--interval", fmt.Sprint(c.Interval)},
		{"base", "--follow"},
		{"gc", "--follow"},
	}
	what := "watching " + c.Rev
	if c.Runner {
		// A runner hosts no bus (its bases come from the fleet's) and
		// watches nothing: the build hosts do.
		if fc.Settings.BusURL == "" {
			return failure.New(failure.Usage, "set FERRY_NATS_URL (or [bus] url in ferry.toml) to the fleet's bus, with the runner's credentials",
				"ferry up --runner needs the fleet's bus, and none is configured")
		}
		specs = [][]string{{"base", "--follow", "--pull"}, {"gc", "--follow"}}
		what = "runner: installing the fleet's bases"
	}
	stop := cli.StopOnSignals()
	defer stop.Release()
	ctx := stop.Context()
	var cmds []*exec.Cmd
	stopAll := func() {
		for _, cmd := range cmds {
			cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	exited := make(chan string, len(specs))
	var wg sync.WaitGroup
	for _, s := range specs {
		path, err := stagePath("ferry-" + s[0])
		if err != nil {
			stopAll()
			return err
		}
		cmd := exec.Command(path, s[1:]...)
		cmd.Env = append(os.Environ(), cli.InvokedAs+"=ferry "+s[0])
		cmd.Stdout, cmd.Stderr = io.Stderr, io.Stderr
		// Own process group: the terminal's Ctrl-C reaches ferry up,
		// which stops the children in order.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			stopAll()
			return err
		}
		cmds = append(cmds, cmd)
		wg.Add(1)
		go func(name string, cmd *exec.Cmd) {
			defer wg.Done()
			err := cmd.Wait()
			if err != nil && ctx.Err() == nil {
				fmt.Fprintf(io.Stderr, "ferry up: ferry %s exited: %v\n", name, err)
			}
			exited <- name
		}(s[0], cmd)
		if s[0] == "watch" {
			time.Sleep(200 * time.Millisecond) // let it take the bus first
		}
	}
	fmt.Fprintf(io.Stderr, "ferry up: %s; Ctrl-C stops\n", what)
	var failed string
	select {
	case <-ctx.Done():
	case failed = <-exited:
	}
	stopAll()
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(60 * time.Second):
		for _, cmd := range cmds {
			cmd.Process.Kill()
		}
		<-finished
	}
	if failed != "" {
		return failure.New(failure.Internal, "see its messages above", "ferry %s stopped; ferry up stopped the others", failed)
	}
	// Ctrl-C is how ferry up is meant to stop: a clean stop, exit 0.
	fmt.Fprintln(io.Stderr, "ferry up: stopped")
	return nil
}

type eventsCmd struct {
	Follow bool `help:"Keep printing new events (needs a running bus)."`
	JSON   bool `name:"json" help:"One JSON event per line."`
}

// eventLog prints the repository's events from the bus; without a running
// bus it runs `ferry-watch log`, which reads what the embedded bus stored.
func eventLog(args []string, io cli.IO) int {
	var c eventsCmd
	return cli.Run("ferry events", "Print this repository's event log: from the bus, or, when none runs, from what the embedded bus stored.",
		[]string{"ferry events", "ferry events --follow --json"}, &c, args, io, &c.JSON, func() error {
			fc, err := cli.Load(".")
			if err != nil {
				return err
			}
			stop := cli.StopOnSignals()
			defer stop.Release()
			e := pipeline.Env{Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store, Log: io.Stderr, Prog: "ferry events"}
			cfg := e.BusConfig("ferry-events")
			cfg.Bound = 2 * time.Second
			conn, err := bus.Dial(stop.Context(), cfg)
			if err != nil {
				// No bus, or a dead host's bus.json: read what it stored. An
				// external bus, a refusal, or --follow need the bus itself.
				if c.Follow || cfg.URL != "" || failure.KindOf(err) == failure.Refused {
					return failure.Wrap(failure.Prereq, err, "start the bus with `ferry up` or `ferry watch` (events written meanwhile wait in the outbox)", "cannot reach the bus")
				}
				return offlineLog(io, c.JSON)
			}
			defer conn.Close()
			err = conn.Replay(stop.Context(), fc.Store.Key, c.Follow, func(ev events.Event) { cli.PrintEvent(io, ev, c.JSON) },
				func(subject string, err error) {
					fmt.Fprintf(io.Stderr, "ferry events: undecodable message on %s: %v\n", subject, err)
				})
			return stop.Err("ferry events", err)
		})
}

// offlineLog replaces this process with `ferry-watch log`, the one binary
// that links the server which can open the stored streams.
func offlineLog(io cli.IO, asJSON bool) error {
	fmt.Fprintln(io.Stderr, "ferry events: no bus is running; reading the log it stored")
	args := []string{"log"}
	if asJSON {
		args = append(args, "--json")
	}
	path, err := stagePath("ferry-watch")
	if err != nil {
		return err
	}
	err = syscall.Exec(path, append([]string{"ferry-watch"}, args...), os.Environ())
	return fmt.Errorf("exec %s: %w", path, err)
}
