// Package metrics is Ferry's own Prometheus metrics: what the long-running
// stages (ferry-watch, ferry-base --follow, ferry-gc --follow) did since
// they started, and what the store holds now, served in the Prometheus text
// format on loopback for a build host's Prometheus or agent to scrape.
//
// What it promises: the endpoint listens on 127.0.0.1 only (it names
// agents and commits, so it is not for the network; put a scraper or a
// proxy on the host); counters only grow within a process and start at 0
// when a stage restarts (Prometheus's rate and increase handle that);
// the store's gauges are read when scraped, at most once per StoreInterval,
// so a scraper polling often does not walk a large store each time. The
// recording functions are cheap and safe from any goroutine. The stages
// record through pipeline.Observer (Recorder), which only they set, so
// one-shot commands count nothing and the front and ferry-spawn do not
// link this package (pkg/cli's TestOnlyStagesLinkMetrics).
//
// deploy/README.md lists the metrics and the queries an operator graphs.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/record/demand"
	"github.com/ferrydev/ferry/pkg/store"
	"github.com/ferrydev/ferry/pkg/warmset"
)

// The metrics' names, as deploy/README.md's queries use them.
const (
	BasesBuilt     = "ferry_bases_built_total"
	BasesRefreshed = "ferry_bases_refreshed_total"
	BasesFailed    = "ferry_bases_failed_total"
	BasesPulled    = "ferry_bases_pulled_total"
	BasesPublished = "ferry_bases_published_total"
	BuildSeconds   = "ferry_base_build_seconds"
	PullSeconds    = "ferry_base_pull_seconds"
	PublishSeconds = "ferry_base_publish_seconds"
	PublishedBytes = "ferry_share_published_bytes_total"
	PulledBytes    = "ferry_share_pulled_bytes_total"
	Agents         = "ferry_agents"
	AgentPrivate   = "ferry_agent_private_bytes"
	StoreBytes     = "ferry_store_bytes"
	BasesReady     = "ferry_bases_ready"
	// The agents' first builds within [base] demand-window (package
	// demand): how warm a new agent's first build of a command is.
	HitRatio        = "ferry_agent_first_build_hit_ratio"
	FirstBuildUnits = "ferry_agent_first_build_units"
	CommandHitRatio = "ferry_agent_command_hit_ratio"
)

// commandsExported bounds the commands CommandHitRatio has a series for:
// the most called.
const commandsExported = 20

// Buckets of the duration histograms: a base build takes seconds on a small
// workspace and tens of minutes cold on a large one (ripgrep's cold base:
// about a minute here; the bench's large workspace: several); a pull or a
// publish of a base of some hundred MB takes seconds.
var (
	buildBuckets    = prometheus.ExponentialBuckets(1, 2, 14)    // 1 s to 2.3 h
	transferBuckets = prometheus.ExponentialBuckets(0.25, 2, 14) // 0.25 s to 34 min
)

var (
	registry = prometheus.NewRegistry()

	basesBuilt = prometheus.NewCounter(prometheus.CounterOpts{Name: BasesBuilt,
		Help: "Bases this process built and made ready, cold or seeded (a ready base reused is not counted)."})
	basesRefreshed = prometheus.NewCounter(prometheus.CounterOpts{Name: BasesRefreshed,
		Help: "Bases built seeded from an earlier base's target (a refresh); part of " + BasesBuilt + "."})
	basesFailed = prometheus.NewCounter(prometheus.CounterOpts{Name: BasesFailed,
		Help: "Base builds that failed (a warm command failed, the toolchain was missing, ...); stopped builds are not counted."})
	basesPulled = prometheus.NewCounter(prometheus.CounterOpts{Name: BasesPulled,
		Help: "Bases installed from the bases bucket (ferry base --pull), not counting ones already ready here."})
	basesPublished = prometheus.NewCounter(prometheus.CounterOpts{Name: BasesPublished,
		Help: "Bases uploaded to the bases bucket."})
	buildSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: BuildSeconds,
		Help: "Seconds a base build took, by kind: cold (from nothing) or refresh (seeded from an earlier base).", Buckets: buildBuckets},
		[]string{"kind"})
	pullSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: PullSeconds,
		Help: "Seconds a pull took: download, digest check, install and relocation.", Buckets: transferBuckets})
	publishSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: PublishSeconds,
		Help: "Seconds a publish took: compression and upload.", Buckets: transferBuckets})
	publishedBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: PublishedBytes,
		Help: "Bytes of compressed base objects uploaded to the bases bucket."})
	pulledBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: PulledBytes,
		Help: "Bytes of compressed base objects downloaded from the bases bucket."})
)

func init() {
	registry.MustRegister(basesBuilt, basesRefreshed, basesFailed, basesPulled, basesPublished,
		buildSeconds, pullSeconds, publishSeconds, publishedBytes, pulledBytes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Zero series for both kinds, so a rate over them exists before the
	// first build of each.
	buildSeconds.WithLabelValues("cold")
	buildSeconds.WithLabelValues("refresh")
}

// BaseBuilt records a base built and made ready; seeded says it was a
// refresh from an earlier base.
func BaseBuilt(seeded bool, seconds float64) {
	basesBuilt.Inc()
	kind := "cold"
	if seeded {
		basesRefreshed.Inc()
		kind = "refresh"
	}
	buildSeconds.WithLabelValues(kind).Observe(seconds)
}

// BaseFailed records a failed base build.
func BaseFailed() { basesFailed.Inc() }

// BasePulled records a base installed from the bucket: the object's
// compressed size and the pull's duration.
func BasePulled(bytes int64, seconds float64) {
	basesPulled.Inc()
	pulledBytes.Add(float64(bytes))
	pullSeconds.Observe(seconds)
}

// BasePublished records a base uploaded to the bucket: the object's
// compressed size and the publish's duration.
func BasePublished(bytes int64, seconds float64) {
	basesPublished.Inc()
	publishedBytes.Add(float64(bytes))
	publishSeconds.Observe(seconds)
}

// Recorder records into this package's metrics: the pipeline.Observer of
// a stage that serves them.
type Recorder struct{}

func (Recorder) BaseBuilt(seeded bool, seconds float64)     { BaseBuilt(seeded, seconds) }
func (Recorder) BaseFailed()                                { BaseFailed() }
func (Recorder) BasePulled(bytes int64, seconds float64)    { BasePulled(bytes, seconds) }
func (Recorder) BasePublished(bytes int64, seconds float64) { BasePublished(bytes, seconds) }

// Stages are the stages that serve metrics, in the order of their ports
// from [metrics] port (config.MetricsPorts of them).
var Stages = []string{"ferry-watch", "ferry-base", "ferry-gc"}

// ServeStage serves the metrics of stage, one of Stages, at [metrics] port
// (settings.MetricsPort) plus the stage's place in Stages, until ctx ends or
// Close; nil, nil when the port is 0. ferry-gc also reports the store s
// (StoreCollector): one stage per repository does, so a sum over a host's
// targets counts each store once.
func ServeStage(ctx context.Context, stage string, settings *config.Settings, s *store.Store) (*Server, error) {
	if settings == nil || settings.MetricsPort == 0 {
		return nil, nil
	}
	offset := slices.Index(Stages, stage)
	if offset < 0 {
		return nil, fmt.Errorf("serve metrics: %q is not a stage that serves them", stage)
	}
	var extra []prometheus.Collector
	if stage == "ferry-gc" {
		extra = append(extra, StoreCollector(s, filepath.Join(settings.WorktreeParent, s.Key), settings.DemandWindow))
	}
	return Serve(ctx, settings.MetricsPort+offset, extra...)
}

// Server is a running metrics endpoint.
type Server struct {
	srv   *http.Server
	addr  string
	done  chan struct{}
	extra []prometheus.Collector
}

// Addr is the endpoint's address, 127.0.0.1:<port>; its metrics are at
// http://<Addr>/metrics.
func (s *Server) Addr() string { return s.addr }

// Close stops serving and unregisters the server's extra collectors.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.done
	for _, c := range s.extra {
		registry.Unregister(c)
	}
	return err
}

// Serve serves the metrics at http://127.0.0.1:port/metrics until ctx ends
// or Close. extra are collectors served until Close (the store's, in the
// stage that reports it); two servers at once cannot have the same extra
// collectors. Port 0 picks a free port (tests).
func Serve(ctx context.Context, port int, extra ...prometheus.Collector) (*Server, error) {
	for i, c := range extra {
		if err := registry.Register(c); err != nil {
			for _, r := range extra[:i] {
				registry.Unregister(r)
			}
			return nil, fmt.Errorf("serve metrics: %w", err)
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		for _, c := range extra {
			registry.Unregister(c)
		}
		return nil, failure.Wrap(failure.Prereq, err,
			"choose another [metrics] port (FERRY_METRICS_PORT): ferry-watch takes it, ferry-base the next and ferry-gc the one after; or stop what listens there",
			"serve metrics on 127.0.0.1:%d", port)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry}))
	s := &Server{
		srv:   &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		addr:  l.Addr().String(),
		done:  make(chan struct{}),
		extra: extra,
	}
	go func() {
		defer close(s.done)
		s.srv.Serve(l)
	}()
	go func() {
		select {
		case <-ctx.Done():
			s.srv.Close()
		case <-s.done:
		}
	}()
	return s, nil
}

// StoreInterval is the shortest time between two reads of the store's
// gauges: walking a store of a few large bases takes a good fraction of a
// second, and Prometheus may scrape every few seconds.
var StoreInterval = 10 * time.Second

// StoreCollector reports what a repository's store holds when scraped:
// agents by state and the private bytes of each, ready bases, the disk
// the store and the repository's worktrees use, and the hit rate of the
// agents' first builds within window (the demand log's).
func StoreCollector(s *store.Store, worktrees string, window time.Duration) prometheus.Collector {
	return &storeCollector{s: s, worktrees: worktrees, window: window}
}

var (
	agentsDesc = prometheus.NewDesc(Agents, "Agents of the repository, by state.", []string{"state"}, nil)
	privDesc   = prometheus.NewDesc(AgentPrivate,
		"Disk an agent's fork uses that its base does not share (what `ferry list` shows as PRIVATE).", []string{"agent"}, nil)
	storeDesc = prometheus.NewDesc(StoreBytes,
		"Disk allocated under the repository's store, by part: bases, agents (forks), other (bus outbox, locks, scratch), worktrees (agents' checkouts). Each inode counts once; a reflinked fork counts in full, so use "+AgentPrivate+" for what agents add.",
		[]string{"part"}, nil)
	readyDesc = prometheus.NewDesc(BasesReady, "Ready bases in the store.", nil, nil)
	hitDesc   = prometheus.NewDesc(HitRatio,
		"Of the units the agents' first build of each command built within [base] demand-window, the fraction fresh from the base (absent until one is recorded).", nil, nil)
	unitsDesc = prometheus.NewDesc(FirstBuildUnits,
		"Units the agents' first builds within [base] demand-window built, by result: fresh (from the base), compiled, and new (compiled, and not held by the base at all: a demand miss).", []string{"result"}, nil)
	cmdHitDesc = prometheus.NewDesc(CommandHitRatio,
		"First-build hit ratio within [base] demand-window per normalised cargo command (the most called ones).", []string{"command"}, nil)
)

type storeCollector struct {
	s         *store.Store
	worktrees string
	window    time.Duration

	mu      sync.Mutex
	read    time.Time
	metrics []prometheus.Metric
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- agentsDesc
	ch <- privDesc
	ch <- storeDesc
	ch <- readyDesc
	ch <- hitDesc
	ch <- unitsDesc
	ch <- cmdHitDesc
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.metrics == nil || time.Since(c.read) >= StoreInterval {
		c.metrics = c.gather()
		c.read = time.Now()
	}
	for _, m := range c.metrics {
		ch <- m
	}
}

// gather reads the store. A part it cannot read is left out rather than
// reported as 0, so a graph shows a gap, not a false drop.
func (c *storeCollector) gather() []prometheus.Metric {
	var out []prometheus.Metric
	if all, err := agent.All(c.s); err == nil {
		states := map[string]int{}
		for _, r := range all {
			states[r.State]++
			b, err := fork.ByName(r.Backend)
			if err != nil {
				continue
			}
			if n, err := b.PrivateBytes(fork.Paths{AgentDir: c.s.Agent(r.Name).Dir}); err == nil {
				out = append(out, prometheus.MustNewConstMetric(privDesc, prometheus.GaugeValue, float64(n), r.Name))
			}
		}
		for st, n := range states {
			out = append(out, prometheus.MustNewConstMetric(agentsDesc, prometheus.GaugeValue, float64(n), st))
		}
	}
	if ents, err := os.ReadDir(c.s.BasesDir()); err == nil || errors.Is(err, fs.ErrNotExist) {
		ready := 0
		for _, e := range ents {
			if _, err := os.Stat(store.BaseFiles(filepath.Join(c.s.BasesDir(), e.Name())).Record); err == nil {
				ready++
			}
		}
		out = append(out, prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, float64(ready)))
	}
	out = append(out, c.demand()...)
	seen := map[[2]uint64]bool{}
	parts := map[string]int64{}
	if err := allocated(c.s.Dir, seen, map[string]string{c.s.BasesDir(): "bases", c.s.AgentsDir(): "agents"}, parts, "other"); err == nil {
		for _, p := range []string{"bases", "agents", "other"} {
			out = append(out, prometheus.MustNewConstMetric(storeDesc, prometheus.GaugeValue, float64(parts[p]), p))
		}
	}
	if c.worktrees != "" {
		wt := map[string]int64{}
		if err := allocated(c.worktrees, seen, nil, wt, "worktrees"); err == nil {
			out = append(out, prometheus.MustNewConstMetric(storeDesc, prometheus.GaugeValue, float64(wt["worktrees"]), "worktrees"))
		}
	}
	return out
}

// allocated adds the allocated size of everything under root to parts,
// under the part its top directory maps to in split (def otherwise), each
// inode once (seen), without crossing into other file systems (an agent's
// live overlay, a mounted sandbox). A missing root is 0.
func allocated(root string, seen map[[2]uint64]bool, split map[string]string, parts map[string]int64, def string) error {
	var rootDev uint64
	if fi, err := os.Lstat(root); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	} else if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		rootDev = uint64(st.Dev)
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				return nil // removed meanwhile, or a sandbox's private dir
			}
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if uint64(st.Dev) != rootDev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		key := [2]uint64{uint64(st.Dev), uint64(st.Ino)}
		if seen[key] {
			return nil
		}
		seen[key] = true
		part := def
		for dir, name := range split {
			if p == dir || len(p) > len(dir) && p[:len(dir)+1] == dir+"/" {
				part = name
				break
			}
		}
		parts[part] += int64(st.Blocks) * 512
		return nil
	})
}

// demand reads the demand log's first builds within the window.
func (c *storeCollector) demand() []prometheus.Metric {
	if c.window <= 0 {
		return nil
	}
	l, err := demand.Read(c.s.DemandLog())
	if err != nil {
		return nil
	}
	sum := warmset.Summarize(l.Entries, time.Now().Add(-c.window))
	out := []prometheus.Metric{
		prometheus.MustNewConstMetric(unitsDesc, prometheus.GaugeValue, float64(sum.Fresh), "fresh"),
		prometheus.MustNewConstMetric(unitsDesc, prometheus.GaugeValue, float64(sum.Units-sum.Fresh), "compiled"),
		prometheus.MustNewConstMetric(unitsDesc, prometheus.GaugeValue, float64(sum.New), "new"),
	}
	if sum.HitRate != nil {
		out = append(out, prometheus.MustNewConstMetric(hitDesc, prometheus.GaugeValue, *sum.HitRate))
	}
	for i, cmd := range sum.Commands {
		if i >= commandsExported {
			break
		}
		if cmd.HitRate != nil {
			out = append(out, prometheus.MustNewConstMetric(cmdHitDesc, prometheus.GaugeValue, *cmd.HitRate, cmd.Command))
		}
	}
	return out
}
