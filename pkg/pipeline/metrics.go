package pipeline

import (
	"context"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry/pkg/metrics"
)

// MetricsStages are the stages that serve metrics, in the order of their
// ports from [metrics] port (config.MetricsPorts of them).
var MetricsStages = []string{"ferry-watch", "ferry-base", "ferry-gc"}

// ServeMetrics serves the process's metrics (package metrics) for stage, one
// of MetricsStages, on loopback at [metrics] port plus the stage's place in
// MetricsStages; nil, nil when [metrics] port is 0. ferry-gc also reports
// the store (agents, their private bytes, disk use): one stage per
// repository does, so a sum over a host's targets counts the store once.
func (e Env) ServeMetrics(ctx context.Context, stage string) (*metrics.Server, error) {
	if e.Settings == nil || e.Settings.MetricsPort == 0 {
		return nil, nil
	}
	offset := -1
	for i, s := range MetricsStages {
		if s == stage {
			offset = i
		}
	}
	if offset < 0 {
		return nil, nil
	}
	var extra []prometheus.Collector
	if stage == "ferry-gc" {
		extra = append(extra, metrics.StoreCollector(e.Store, filepath.Join(e.Settings.WorktreeParent, e.Store.Key)))
	}
	srv, err := metrics.Serve(ctx, e.Settings.MetricsPort+offset, extra...)
	if err != nil {
		return nil, err
	}
	e.Logf("%s: metrics at http://%s/metrics", stage, srv.Addr())
	return srv, nil
}
