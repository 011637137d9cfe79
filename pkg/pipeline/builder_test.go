package pipeline_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/internal/eventstest"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/config"
)

// The long-running builder reads ferry.toml again for each build and says
// which settings changed: a warm command added while it runs is in the
// next base.
func TestBuilderReadsSettingsForEachBuild(t *testing.T) {
	w := newWorld(t)
	write := func(toml string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(w.repo.Dir, config.FileName), []byte(toml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("[base]\nwarm = [\"true\"]\n")
	w.start(nil, "ferry-watch", "--interval", "0.1")
	conn := dialHosted(t, w.home)
	ev := eventstest.Watch(t, conn.JS, events.SubjectRepo(w.store.Key))
	builder := w.start(nil, "ferry-base", "--follow")
	first := eventstest.For(ev, wait, readyFor(w.repo.Head))

	write("[base]\nwarm = [\"true\", \"echo second\"]\n")
	c := w.commit()
	second := eventstest.For(ev, wait, readyFor(c))
	r, err := base.Read(w.store, second.BaseID)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Warm) != 2 || r.Warm[1].Command != "echo second" || second.Fingerprint == first.Fingerprint {
		t.Fatalf("the base built after ferry.toml changed warms %+v (fingerprint %s, before %s)", r.Warm, second.Fingerprint, first.Fingerprint)
	}
	if !strings.Contains(builder.out.String(), "settings changed since they were last read: warm") {
		t.Fatalf("the builder did not say which settings changed:\n%s", builder.out)
	}
}
