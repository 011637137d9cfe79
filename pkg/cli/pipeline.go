package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/pipeline"
)

func (fc *Context) env(io IO) pipeline.Env {
	return pipeline.Env{Repo: fc.Repo, Settings: fc.Settings, Store: fc.Store, Log: io.Stderr}
}

// stopContext ends on SIGINT or SIGTERM.
func stopContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

type watchCLI struct {
	Rev      string  `help:"Ref to follow." default:"HEAD" placeholder:"R"`
	Interval float64 `help:"Seconds between polls." default:"2" placeholder:"S"`
	GC       bool    `name:"gc" help:"Also collect garbage after each new base (as ferry-gc --follow would)."`
	JSON     bool    `name:"json" help:"Report errors as JSON on stdout."`
}

// Watch is the ferry-watch command.
func Watch(args []string, io IO) int {
	var c watchCLI
	return command("ferry-watch", "Poll a ref and publish commit.seen for each new commit; hosts the embedded bus unless [bus] url or FERRY_NATS_URL names another.", &c, args, io, &c.JSON, func() error {
		if c.Interval <= 0 {
			return failure.New(failure.Usage, "pass a positive number of seconds, e.g. --interval 2", "bad --interval %v", c.Interval)
		}
		fc, err := Load(".")
		if err != nil {
			return err
		}
		ctx, stop := stopContext()
		defer stop()
		return pipeline.RunWatcher(ctx, pipeline.WatcherOptions{
			Env: fc.env(io), Rev: c.Rev, Interval: time.Duration(c.Interval * float64(time.Second)), GC: c.GC,
		})
	})
}

func followBuilder(io IO) error {
	fc, err := Load(".")
	if err != nil {
		return err
	}
	if err := fc.Store.Init(); err != nil {
		return err
	}
	ctx, stop := stopContext()
	defer stop()
	var ackWait time.Duration
	if v := os.Getenv("FERRY_ACK_WAIT"); v != "" {
		ackWait, _ = time.ParseDuration(v)
	}
	return pipeline.RunBuilder(ctx, pipeline.BuilderOptions{Env: fc.env(io), Shim: true, AckWait: ackWait})
}

func followGC(io IO) error {
	fc, err := Load(".")
	if err != nil {
		return err
	}
	if err := fc.Store.Init(); err != nil {
		return err
	}
	ctx, stop := stopContext()
	defer stop()
	return pipeline.RunGC(ctx, fc.env(io))
}

type upCLI struct {
	Rev      string  `help:"Ref to follow." default:"HEAD" placeholder:"R"`
	Interval float64 `help:"Seconds between polls." default:"2" placeholder:"S"`
}

// up starts the watcher (hosting the bus), the builder and gc as children
// and stops them all on Ctrl-C or SIGTERM.
func up(args []string, io IO) int {
	var c upCLI
	_, code, done := parse("ferry up", "Keep bases warm for this repository: start ferry-watch (hosting the bus), ferry-base --follow and ferry-gc --follow; Ctrl-C or SIGTERM stops them all.", &c, args, io)
	if done {
		return code
	}
	err := func() error {
		if _, err := Load("."); err != nil {
			return err
		}
		ctx, stop := stopContext()
		defer stop()
		specs := [][]string{
			{"ferry-watch", "--rev", c.Rev, "--interval", fmt.Sprint(c.Interval)},
			{"ferry-base", "--follow"},
			{"ferry-gc", "--follow"},
		}
		var cmds []*exec.Cmd
		stopAll := func() {
			for _, cmd := range cmds {
				cmd.Process.Signal(syscall.SIGTERM)
			}
		}
		exited := make(chan string, len(specs))
		var wg sync.WaitGroup
		for _, s := range specs {
			path, err := stagePath(s[0])
			if err != nil {
				stopAll()
				return err
			}
			cmd := exec.Command(path, s[1:]...)
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
					fmt.Fprintf(io.Stderr, "ferry up: %s exited: %v\n", name, err)
				}
				exited <- name
			}(s[0], cmd)
			if s[0] == "ferry-watch" {
				time.Sleep(200 * time.Millisecond) // let it take the bus first
			}
		}
		fmt.Fprintf(io.Stderr, "ferry up: watching %s; Ctrl-C stops\n", c.Rev)
		var failed string
		select {
		case <-ctx.Done():
		case failed = <-exited:
		}
		stopAll()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			for _, cmd := range cmds {
				cmd.Process.Kill()
			}
			<-done
		}
		if failed != "" {
			return failure.New(failure.Internal, "see its messages above", "%s stopped; ferry up stopped the others", failed)
		}
		fmt.Fprintln(io.Stderr, "ferry up: stopped")
		return nil
	}()
	return Report(io, "ferry", err, false)
}

// stagePath finds a stage binary beside this executable, else on PATH.
func stagePath(bin string) (string, error) {
	if self, err := os.Executable(); err == nil {
		cand := filepath.Join(filepath.Dir(self), bin)
		if fi, err := os.Stat(cand); err == nil && fi.Mode().IsRegular() {
			return cand, nil
		}
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		return "", failure.Wrap(failure.Prereq, err, "install Ferry's binaries together (make build puts them all in ./bin)", "%s not found beside ferry or on PATH", bin)
	}
	return p, nil
}

type eventsCLI struct {
	Follow bool `help:"Keep printing new events."`
	JSON   bool `name:"json" help:"One JSON event per line."`
}

// eventLog prints the repository's events from the bus.
func eventLog(args []string, io IO) int {
	var c eventsCLI
	return command("ferry events", "Print this repository's event log from the bus.", &c, args, io, &c.JSON, func() error {
		fc, err := Load(".")
		if err != nil {
			return err
		}
		ctx, stop := stopContext()
		defer stop()
		cfg := fc.env(io).BusConfig("ferry-events")
		cfg.Bound = 2 * time.Second
		conn, err := bus.Dial(ctx, cfg)
		if err != nil {
			return failure.Wrap(failure.Prereq, err, "start the bus with `ferry up` or `ferry-watch` (events written meanwhile wait in the outbox)", "cannot reach the bus")
		}
		defer conn.Close()
		var mu sync.Mutex
		var backlog []events.Event
		caughtUp := make(chan struct{}, 2)
		var wg sync.WaitGroup
		for _, stream := range []string{bus.StreamCommits, bus.StreamEvents} {
			cons, err := conn.JS.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
				FilterSubjects: []string{events.SubjectRepo(fc.Store.Key)},
				DeliverPolicy:  jetstream.DeliverAllPolicy,
			})
			if err != nil {
				return err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				signalled := false
				for {
					m, err := cons.Next(jetstream.FetchMaxWait(500 * time.Millisecond))
					if err != nil {
						if !signalled {
							signalled = true
							caughtUp <- struct{}{}
						}
						if !c.Follow || ctx.Err() != nil {
							return
						}
						continue
					}
					ev, err := bus.DecodeMessage(m.Subject(), m.Data())
					if err != nil {
						fmt.Fprintf(io.Stderr, "ferry events: undecodable message on %s: %v\n", m.Subject(), err)
						continue
					}
					mu.Lock()
					if backlog != nil || !signalled {
						backlog = append(backlog, ev)
					} else {
						printEvent(io, ev, c.JSON)
					}
					mu.Unlock()
				}
			}()
		}
		<-caughtUp
		<-caughtUp
		mu.Lock()
		sort.SliceStable(backlog, func(i, j int) bool {
			return backlog[i].EventHeader().Time.Before(backlog[j].EventHeader().Time)
		})
		for _, ev := range backlog {
			printEvent(io, ev, c.JSON)
		}
		backlog = nil
		mu.Unlock()
		if c.Follow {
			<-ctx.Done()
		}
		wg.Wait()
		return nil
	})
}

func printEvent(io IO, ev events.Event, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(ev)
		fmt.Fprintln(io.Stdout, string(b))
		return
	}
	h := ev.EventHeader()
	b, _ := json.Marshal(ev)
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, k := range []string{"type", "id", "time", "repo_key", "host", "repo", "RepoKey"} {
		delete(m, k)
	}
	var parts []string
	for k, v := range m {
		s := fmt.Sprint(v)
		if len(s) > 60 {
			s = s[:57] + "..."
		}
		parts = append(parts, k+"="+s)
	}
	sort.Strings(parts)
	fmt.Fprintf(io.Stdout, "%s  %-14s %s\n", h.Time.Local().Format("15:04:05.000"), ev.Kind(), strings.Join(parts, " "))
}
