package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/pipeline"
	"github.com/ferrydev/ferry/pkg/store"
)

// runPipeline measures the event pipeline: ref move to base.building, the
// publish cost of one-shot commands, and idle memory of ferry up.
func runPipeline(bin string, n int) error {
	if err := fixture.CheckTools(""); err != nil {
		return err
	}
	bin, _ = filepath.Abs(bin)
	dir, err := os.MkdirTemp("", "ferry-bench-pipeline-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	repo, err := fixture.Generate(filepath.Join(dir, "repo"), fixture.Options{})
	if err != nil {
		return err
	}
	// A warm command that builds nothing keeps the figures about the pipeline.
	os.WriteFile(filepath.Join(repo.Dir, "ferry.toml"), []byte("[base]\nwarm = [\"true\"]\n"), 0o644)
	home := filepath.Join(dir, "home")
	env := append(os.Environ(), "FERRY_HOME="+home)
	ferry := func(args ...string) (time.Duration, error) {
		c := exec.Command(filepath.Join(bin, "ferry"), args...)
		c.Dir, c.Env = repo.Dir, env
		t := time.Now()
		out, err := c.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("ferry %v: %v\n%s", args, err, out)
		}
		return time.Since(t), nil
	}

	// One-shot publish cost without a bus: the event goes to the outbox.
	var noBus []time.Duration
	for i := 0; i < n*3; i++ {
		d, err := ferry("base")
		if err != nil {
			return err
		}
		noBus = append(noBus, d)
	}

	interval := 500 * time.Millisecond
	up := exec.Command(filepath.Join(bin, "ferry"), "up", "--interval", fmt.Sprint(interval.Seconds()))
	up.Dir, up.Env = repo.Dir, env
	logf, _ := os.Create(filepath.Join(dir, "up.log"))
	up.Stdout, up.Stderr = logf, logf
	if err := up.Start(); err != nil {
		return err
	}
	defer func() {
		up.Process.Signal(syscall.SIGTERM)
		up.Wait()
	}()
	// Connect like any client once the watcher has written bus.json.
	var conn *bus.Conn
	deadline := time.Now().Add(30 * time.Second)
	for conn == nil {
		c, err := bus.Dial(context.Background(), bus.Config{Parent: home, Name: "bench"})
		if err == nil {
			conn = c
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bus never came up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer conn.Close()
	common, _ := repo.Git("rev-parse", "--path-format=absolute", "--git-common-dir")
	key := store.Key(strings.TrimSpace(common))
	building := make(chan string, 16)
	sub, err := conn.NC.Subscribe(events.SubjectFor(key, events.KindBaseBuilding), func(m *nats.Msg) {
		var b events.BaseBuilding
		if json.Unmarshal(m.Data, &b) == nil {
			building <- b.Commit
		}
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	time.Sleep(2 * interval) // the watcher's first polls

	// One-shot publish cost with the bus up.
	var withBus []time.Duration
	for i := 0; i < n*3; i++ {
		d, err := ferry("base")
		if err != nil {
			return err
		}
		withBus = append(withBus, d)
	}

	var lat []time.Duration
	for i := 0; i < n+2; i++ {
		repo.Write("README.md", fmt.Sprintf("round %d\n", i))
		c, err := repo.Commit(fmt.Sprintf("bench %d", i))
		if err != nil {
			return err
		}
		t := time.Now()
		timeout := time.After(30 * time.Second)
	wait:
		for {
			select {
			case got := <-building:
				if got == c {
					lat = append(lat, time.Since(t))
					break wait
				}
			case <-timeout:
				return fmt.Errorf("no base.building for %s", c[:12])
			}
		}
		time.Sleep(3 * interval) // let the build finish before the next move
	}

	// In-process publish cost of one event (connect, flush, publish, ack).
	cfg := bus.Config{Parent: home, Name: "bench"}
	var emitUp []time.Duration
	for i := 0; i < 20; i++ {
		t := time.Now()
		pipeline.Emit(pipeline.Env{Store: &store.Store{Parent: home, Key: key, Dir: filepath.Join(home, key)}, Bus: &cfg}, "bench",
			&events.GCCollected{DeletedBases: []string{}})
		emitUp = append(emitUp, time.Since(t))
	}

	// The same without a bus: the event goes to an outbox.
	nobusHome := filepath.Join(dir, "nobus")
	nobusCfg := bus.Config{Parent: nobusHome, Name: "bench"}
	var emitDown []time.Duration
	for i := 0; i < 20; i++ {
		t := time.Now()
		pipeline.Emit(pipeline.Env{Store: &store.Store{Parent: nobusHome, Key: key, Dir: filepath.Join(nobusHome, key)}, Bus: &nobusCfg}, "bench",
			&events.GCCollected{DeletedBases: []string{}})
		emitDown = append(emitDown, time.Since(t))
	}

	time.Sleep(3 * time.Second)
	rss := childRSS(up.Process.Pid)

	fmt.Printf("\n== Event pipeline (median)\n")
	fmt.Printf("  %-58s %8.0f ms  (goal <= 2 polls + 100 ms = %.0f ms)\n", "ref moved -> base.building (poll interval 0.5 s)", ms(median(lat)), ms(2*interval+100*time.Millisecond))
	fmt.Printf("  %-58s %8.1f ms\n", "one-shot `ferry base` (reuse), no bus: event to outbox", ms(median(noBus)))
	fmt.Printf("  %-58s %8.1f ms\n", "one-shot `ferry base` (reuse), bus up: event published", ms(median(withBus)))
	fmt.Printf("  %-58s %+8.1f ms\n", "difference (noise: toolchain detection dominates)", ms(median(withBus)-median(noBus)))
	fmt.Printf("  %-58s %8.2f ms  (goal < 20 ms)\n", "one event, bus up: connect, flush, publish, ack, close", ms(median(emitUp)))
	fmt.Printf("  %-58s %8.2f ms  (goal < 20 ms)\n", "one event, no bus: to the outbox", ms(median(emitDown)))
	for _, r := range rss {
		fmt.Printf("  %-58s %8.1f MiB\n", "idle RSS of "+r.name, float64(r.kib)/1024)
	}
	return nil
}

type procRSS struct {
	name string
	kib  int64
}

// childRSS reads the resident memory of pid's children.
func childRSS(pid int) []procRSS {
	var out []procRSS
	// Any thread of a Go process may have started a child.
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var kids []string
	for _, t := range tasks {
		if b, err := os.ReadFile(t); err == nil {
			kids = append(kids, strings.Fields(string(b))...)
		}
	}
	for _, f := range kids {
		cmd, _ := os.ReadFile("/proc/" + f + "/cmdline")
		name := strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
		name = filepath.Base(strings.SplitN(name, " --interval", 2)[0])
		status, _ := os.ReadFile("/proc/" + f + "/status")
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				out = append(out, procRSS{name, kb})
			}
		}
	}
	return out
}
