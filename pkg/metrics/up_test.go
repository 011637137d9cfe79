package metrics_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/metrics"
)

// freeRun finds a port p with p..p+n-1 free on loopback.
func freeRun(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		ok := p+n-1 <= 65535
		for i := 1; ok && i < n; i++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+i))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return p
		}
	}
	t.Skip("no run of free ports")
	return 0
}

// samples reads http://addr/metrics into series (name with labels, as
// written) to value.
func samples(addr string) (map[string]float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err == nil {
			out[l[:i]] = v
		}
	}
	return out, sc.Err()
}

// TestStagesUnderUp runs `ferry up` with [metrics] port and [bus]
// monitor-port set (through their variables) and scrapes what an operator
// would: ferry-watch, ferry-base and ferry-gc each at its port on loopback,
// the base build counted by ferry-base, the ready base and store disk by
// ferry-gc, and the embedded bus's NATS monitoring.
func TestStagesUnderUp(t *testing.T) {
	repo := testenv.Repo(t, fixture.Options{NoRegistry: true})
	os.WriteFile(filepath.Join(repo.Dir, config.FileName), []byte("[base]\nwarm = [\"true\"]\n"), 0o644)
	os.WriteFile(filepath.Join(repo.Dir, ".git", "info", "exclude"), []byte(config.FileName+"\n"), 0o644)
	bin := testenv.Binaries(t)
	port := freeRun(t, config.MetricsPorts+1)
	monitor := port + config.MetricsPorts

	root := t.TempDir()
	cmd := exec.Command(filepath.Join(bin, "ferry"), "up", "--interval", "0.2")
	cmd.Dir = repo.Dir
	cmd.Env = append(os.Environ(),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"FERRY_HOME="+filepath.Join(root, "home"), "FERRY_WORKTREES="+filepath.Join(root, "wt"),
		"FERRY_METRICS_PORT="+strconv.Itoa(port), "FERRY_BUS_MONITOR_PORT="+strconv.Itoa(monitor))
	var log testenv.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()

	addr := func(stage string) string {
		for i, s := range metrics.Stages {
			if s == stage {
				return "127.0.0.1:" + strconv.Itoa(port+i)
			}
		}
		t.Fatalf("no stage %s", stage)
		return ""
	}
	var base, gc map[string]float64
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var errs []string
		if _, err := samples(addr("ferry-watch")); err != nil {
			errs = append(errs, "ferry-watch: "+err.Error())
		}
		var err error
		if base, err = samples(addr("ferry-base")); err != nil || base[metrics.BasesBuilt] != 1 {
			errs = append(errs, fmt.Sprintf("ferry-base: %s = %v (%v)", metrics.BasesBuilt, base[metrics.BasesBuilt], err))
		}
		if gc, err = samples(addr("ferry-gc")); err != nil || gc[metrics.BasesReady] != 1 {
			errs = append(errs, fmt.Sprintf("ferry-gc: %s = %v (%v)", metrics.BasesReady, gc[metrics.BasesReady], err))
		}
		if len(errs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s\nferry up said:\n%s", strings.Join(errs, "\n"), log.String())
		}
		time.Sleep(300 * time.Millisecond)
	}
	if n := base[metrics.BuildSeconds+`_count{kind="cold"}`]; n != 1 {
		t.Errorf("ferry-base: %d cold builds timed, want 1", int(n))
	}
	if gc[metrics.StoreBytes+`{part="bases"}`] <= 0 {
		t.Errorf("ferry-gc: no disk use of the bases")
	}
	for _, stage := range metrics.Stages {
		if !strings.Contains(log.String(), stage+": metrics at http://"+addr(stage)+"/metrics") {
			t.Errorf("%s did not say where its metrics are", stage)
		}
	}

	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(monitor) + "/varz")
	if err != nil {
		t.Fatalf("NATS monitoring: %v\n%s", err, log.String())
	}
	defer resp.Body.Close()
	var varz struct {
		ServerName string `json:"server_name"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&varz); err != nil || varz.ServerName != "ferry-bus" {
		t.Errorf("NATS monitoring /varz: %+v, %v", varz, err)
	}

	// Ctrl-C is how a user stops ferry up: a clean stop, exit 0, the
	// stages stopped with it (their ports free again).
	cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err != nil {
		t.Errorf("ferry up after Ctrl-C: %v\n%s", err, log.String())
	}
	if out := log.String(); !strings.Contains(out, "ferry up: stopped") || strings.Contains(out, "error:") {
		t.Errorf("ferry up after Ctrl-C said:\n%s", out)
	}
	for _, stage := range metrics.Stages {
		if _, err := samples(addr(stage)); err == nil {
			t.Errorf("%s still serves its metrics after ferry up stopped", stage)
		}
	}
}
