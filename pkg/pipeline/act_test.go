package pipeline_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/internal/bustest"
	"github.com/ferrydev/ferry/internal/eventstest"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/pipeline"
)

// The act-then-announce layer builds each event in one place, with every
// field, whichever process made the change: a failed build names its base,
// fingerprint and warm command; a ready one its base; a one-shot command's
// events and a follower's are the same.
func TestBuildBaseAnnouncesEveryField(t *testing.T) {
	w := newWorld(t)
	os.WriteFile(filepath.Join(w.repo.Dir, config.FileName), []byte("[base]\nwarm = [\"true\", \"exit 3\"]\n"), 0o644)
	h := bustest.StartIn(t, w.home)
	watch := eventstest.Watch(t, bustest.Dial(t, h, "test").JS, events.SubjectRepo(w.store.Key))
	e := w.env(&testenv.Buffer{})
	cfg := h.ClientConfig("test")
	e.Bus = &cfg

	_, err := pipeline.BuildBase(context.Background(), e.OneShot("ferry-base"), base.Options{
		Repo: e.Repo, Settings: e.Settings, Store: e.Store, Rev: "HEAD"})
	if failure.KindOf(err) != failure.BuildFailed {
		t.Fatalf("build: %v, want a failed warm command", err)
	}
	building := eventstest.For(watch, wait, func(*events.BaseBuilding) bool { return true })
	failed := eventstest.For(watch, wait, func(*events.BaseFailed) bool { return true })
	if failed.BaseID != building.BaseID || failed.BaseID == "" || failed.Fingerprint != building.Fingerprint || failed.Fingerprint == "" ||
		failed.Commit != building.Commit || failed.Command != "exit 3" || failed.ExitKind != "build-failed" || failed.ExitCode != 5 || failed.Error == "" {
		t.Errorf("base.failed %+v after base.building %+v", failed, building)
	}

	// A command that keeps going past a bench that does not compile: the
	// base is ready, and base.ready carries what it lacks.
	os.WriteFile(filepath.Join(w.repo.Dir, config.FileName), []byte("[base]\nkeep-going = true\nwarm = ['''"+
		"echo 'error: could not compile `x` (bench \"b\") due to 1 previous error' >&2; exit 101''']\n"), 0o644)
	e = w.env(&testenv.Buffer{})
	e.Bus = &cfg
	res, err := pipeline.BuildBase(context.Background(), e.OneShot("ferry-base"), base.Options{
		Repo: e.Repo, Settings: e.Settings, Store: e.Store, Rev: "HEAD"})
	if err != nil {
		t.Fatal(err)
	}
	ready := eventstest.For(watch, wait, func(*events.BaseReady) bool { return true })
	if ready.BaseID != res.Record.ID || ready.Commit != res.Record.Commit || ready.Fingerprint != res.Record.Fingerprint || !ready.Current || ready.Reused {
		t.Errorf("base.ready %+v for %s", ready, res.Record.ID)
	}
	if !slices.Equal(ready.Incomplete, res.Record.Incomplete) || !slices.ContainsFunc(ready.Incomplete, func(s string) bool {
		return strings.HasPrefix(s, `bench "b" of crate x did not compile`)
	}) {
		t.Errorf("base.ready incomplete %q, base.json's %q", ready.Incomplete, res.Record.Incomplete)
	}
}
