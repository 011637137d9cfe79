package pipeline_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ferrydev/ferry/internal/bustest"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/metrics"
	"github.com/ferrydev/ferry/pkg/pipeline"
	"github.com/ferrydev/ferry/pkg/share"
)

// scrape reads the metrics endpoint at addr the way Prometheus does (text
// format) and returns the families by name.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", addr, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: not the Prometheus text format: %v", addr, err)
	}
	return fams
}

// value is the value of the series of family name whose labels include
// want (a counter's or gauge's value, a histogram's count), and whether
// there is one.
func value(fams map[string]*dto.MetricFamily, name string, want ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(want); i += 2 {
			found := false
			for _, l := range m.Label {
				if l.GetName() == want[i] && l.GetValue() == want[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetricsAfterBuildAndPull scrapes ferry-gc's endpoint (at [metrics]
// port + 2, on loopback) before and after what the stages do, through an
// Env whose Observer is metrics.Recorder as the stages' commands set it: a
// cold build published to the bucket, a pull into a second store, an
// agent, a refresh, a failed build. Each metric moves by what happened; the
// store's gauges show the agent, its private bytes and the store's disk. A
// one-shot Env (no Observer) moves nothing.
func TestMetricsAfterBuildAndPull(t *testing.T) {
	w := newWorld(t)
	os.WriteFile(filepath.Join(w.repo.Dir, config.FileName), []byte("[base]\nwarm = [\"mkdir -p target/debug && head -c 300000 /dev/urandom > target/debug/blob\"]\n"), 0o644)
	h := bustest.StartIn(t, w.home)
	conn := bustest.Dial(t, h, "test")
	e := w.env(&testenv.Buffer{})
	cfg := h.ClientConfig("test")
	e.Bus = &cfg
	e.Observer = metrics.Recorder{} // as a stage that serves metrics
	ctx := context.Background()
	old := metrics.StoreInterval
	metrics.StoreInterval = 0 // read the store on every scrape
	defer func() { metrics.StoreInterval = old }()

	// [metrics] port P: ferry-gc serves on P+2.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gcPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if gcPort < 3 {
		t.Skip("no usable port")
	}
	e.Settings.MetricsPort = gcPort - 2
	srv, err := metrics.ServeStage(ctx, "ferry-gc", e.Settings, e.Store)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if host, port, _ := net.SplitHostPort(srv.Addr()); host != "127.0.0.1" || port != strconv.Itoa(gcPort) {
		t.Fatalf("ferry-gc serves metrics at %s, want 127.0.0.1:%d", srv.Addr(), gcPort)
	}

	before := scrape(t, srv.Addr())
	delta := func(after map[string]*dto.MetricFamily, name string, labels ...string) float64 {
		a, ok := value(after, name, labels...)
		if !ok {
			t.Errorf("no %s%v in the scrape", name, labels)
		}
		b, _ := value(before, name, labels...)
		return a - b
	}

	// A cold build, published.
	res, err := pipeline.BuildAndShare(ctx, e.OneShot("ferry-base"), base.Options{
		Repo: e.Repo, Settings: e.Settings, Store: e.Store, Rev: "HEAD"}, pipeline.Publisher(e, conn))
	if err != nil {
		t.Fatal(err)
	}
	obs, err := conn.JS.ObjectStore(ctx, share.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := obs.GetInfo(ctx, res.Record.ID)
	if err != nil {
		t.Fatal(err)
	}
	object := float64(info.Size)

	// A pull of it into a second store on this host.
	home2 := filepath.Join(t.TempDir(), "home2")
	cenv := testenv.NewEnv(t.TempDir(), w.repo.Dir)
	cenv.Set("FERRY_HOME", home2)
	settings2, err := config.Load(w.git.Top, cenv)
	if err != nil {
		t.Fatal(err)
	}
	// It trusts the key the publisher made when it published.
	signer, err := share.LoadSigner(w.home)
	if err != nil {
		t.Fatal(err)
	}
	settings2.TrustedKeys = []string{signer.Public()}
	e2 := pipeline.Env{Repo: w.git, Settings: settings2, Store: openStore(t, w.git, home2), Bus: &cfg, Observer: metrics.Recorder{}}
	pulled, err := pipeline.Pull(ctx, e2.OneShot("ferry-base"), conn, share.PullOptions{
		Build: base.Options{Repo: e2.Repo, Settings: e2.Settings, Store: e2.Store, Rev: "HEAD"}})
	if err != nil {
		t.Fatal(err)
	}
	if pulled.Reused {
		t.Fatal("the second store already had the base")
	}

	// An agent on the first store.
	if _, err := pipeline.Spawn(e.OneShot("ferry-spawn"), agent.SpawnOptions{
		Repo: e.Repo, Settings: e.Settings, Store: e.Store, Name: "a1"}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(w.wts, w.store.Key, "a1", "scratch"), make([]byte, 100000), 0o644)

	after := scrape(t, srv.Addr())
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{metrics.BasesBuilt, nil, 1},
		{metrics.BasesRefreshed, nil, 0},
		{metrics.BasesFailed, nil, 0},
		{metrics.BuildSeconds, []string{"kind", "cold"}, 1},
		{metrics.BasesPublished, nil, 1},
		{metrics.PublishSeconds, nil, 1},
		{metrics.PublishedBytes, nil, object},
		{metrics.BasesPulled, nil, 1},
		{metrics.PullSeconds, nil, 1},
		{metrics.PulledBytes, nil, object},
	} {
		if d := delta(after, c.name, c.labels...); d != c.want {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, d, c.want)
		}
	}
	if object < 300000/4 {
		t.Errorf("the object is %v bytes: the base's 300 kB of random data did not travel", object)
	}
	if n, _ := value(after, metrics.Agents, "state", "ready"); n != 1 {
		t.Errorf("%s{state=ready} = %v, want 1 (%v)", metrics.Agents, n, after[metrics.Agents])
	}
	if _, ok := value(after, metrics.AgentPrivate, "agent", "a1"); !ok {
		t.Errorf("no %s for agent a1", metrics.AgentPrivate)
	}
	if n, _ := value(after, metrics.BasesReady); n != 1 {
		t.Errorf("%s = %v, want 1", metrics.BasesReady, n)
	}
	if n, _ := value(after, metrics.StoreBytes, "part", "bases"); n < 300000 {
		t.Errorf("%s{part=bases} = %v, want at least the 300 kB the warm command wrote", metrics.StoreBytes, n)
	}
	if n, _ := value(after, metrics.StoreBytes, "part", "worktrees"); n < 100000 {
		t.Errorf("%s{part=worktrees} = %v, want at least the agent's 100 kB file", metrics.StoreBytes, n)
	}

	// A refresh: the next commit seeded from the base.
	w.commit()
	before = after
	if _, err := pipeline.BuildAndShare(ctx, e.OneShot("ferry-base"), base.Options{
		Repo: e.Repo, Settings: e.Settings, Store: e.Store, Rev: "HEAD"}, nil); err != nil {
		t.Fatal(err)
	}
	after = scrape(t, srv.Addr())
	if d := delta(after, metrics.BasesRefreshed); d != 1 {
		t.Errorf("%s moved by %v after a seeded build, want 1", metrics.BasesRefreshed, d)
	}
	if d := delta(after, metrics.BuildSeconds, "kind", "refresh"); d != 1 {
		t.Errorf("%s{kind=refresh} count moved by %v, want 1", metrics.BuildSeconds, d)
	}

	// A failed build.
	os.WriteFile(filepath.Join(w.repo.Dir, config.FileName), []byte("[base]\nwarm = [\"exit 3\"]\n"), 0o644)
	ef := w.env(&testenv.Buffer{})
	ef.Bus = &cfg
	ef.Observer = metrics.Recorder{}
	before = after
	start := time.Now()
	if _, err := pipeline.BuildAndShare(ctx, ef.OneShot("ferry-base"), base.Options{
		Repo: ef.Repo, Settings: ef.Settings, Store: ef.Store, Rev: "HEAD"}, nil); err == nil {
		t.Fatal("a warm command exiting 3 built a base")
	}
	after = scrape(t, srv.Addr())
	if d := delta(after, metrics.BasesFailed); d != 1 {
		t.Errorf("%s moved by %v after a failed build, want 1", metrics.BasesFailed, d)
	}
	if d := delta(after, metrics.BasesBuilt); d != 0 {
		t.Errorf("%s moved by %v after a failed build", metrics.BasesBuilt, d)
	}
	// A one-shot command's Env tells nobody.
	before = after
	eo := w.env(&testenv.Buffer{})
	eo.Bus = &cfg
	if _, err := pipeline.BuildAndShare(ctx, eo.OneShot("ferry-base"), base.Options{
		Repo: eo.Repo, Settings: eo.Settings, Store: eo.Store, Rev: "HEAD"}, nil); err == nil {
		t.Fatal("a warm command exiting 3 built a base")
	}
	if d := delta(scrape(t, srv.Addr()), metrics.BasesFailed); d != 0 {
		t.Errorf("a one-shot build moved %s by %v", metrics.BasesFailed, d)
	}
	t.Logf("object %.0f bytes; failed build in %v", object, time.Since(start).Round(time.Millisecond))
}
