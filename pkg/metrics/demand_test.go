package metrics

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry/pkg/record/demand"
	"github.com/ferrydev/ferry/pkg/store"
)

// The store's collector exports the hit rate of the agents' first builds
// within the window, from the demand log: overall, by result, by command.
func TestStoreCollectorHitRate(t *testing.T) {
	root := t.TempDir()
	s, err := store.Open(filepath.Join(root, "home"), filepath.Join(root, "repo", ".git"), filepath.Join(root, "repo"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	release := demand.Command{Dir: ".", Sub: "build", Args: []string{"--release"}}
	plain := demand.Command{Dir: ".", Sub: "build"}
	now := time.Now().UTC()
	for _, e := range []demand.Entry{
		{Time: now.Add(-30 * 24 * time.Hour), Agent: "old", Command: plain.String(), Cmd: plain, First: true, Observed: true, Compiled: 100},
		{Time: now, Agent: "a", Command: release.String(), Cmd: release, First: true, Observed: true, Compiled: 30, New: 30},
		{Time: now, Agent: "b", Command: plain.String(), Cmd: plain, First: true, Observed: true, Fresh: 30},
		{Time: now, Agent: "b", Command: plain.String(), Cmd: plain, Observed: true, Fresh: 28, Compiled: 2},
	} {
		if err := demand.Append(s.DemandLog(), e); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(StoreCollector(s, "", 7*24*time.Hour))
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			got[key] = m.GetGauge().GetValue()
		}
	}
	for k, want := range map[string]float64{
		HitRatio:                                            0.5, // 30 fresh of 60 first-build units
		FirstBuildUnits + "{result=fresh}":                  30,
		FirstBuildUnits + "{result=compiled}":               30,
		FirstBuildUnits + "{result=new}":                    30,
		CommandHitRatio + "{command=cargo build}":           1,
		CommandHitRatio + "{command=cargo build --release}": 0,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %t), want %v", k, v, ok, want)
		}
	}
	n := 0
	for k := range got {
		if len(k) > len(CommandHitRatio) && k[:len(CommandHitRatio)+1] == CommandHitRatio+"{" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d command series, want 2: %v", n, got)
	}
}
