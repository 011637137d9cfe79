package pipeline_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/internal/bustest"
	"github.com/ferrydev/ferry/internal/eventstest"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/pipeline"
	"github.com/ferrydev/ferry/pkg/share"
)

// A builder that shares bases publishes each before announcing it, and
// base.ready names the object.
func TestBuildAndShareNamesTheObject(t *testing.T) {
	w := newWorld(t)
	os.WriteFile(filepath.Join(w.repo.Dir, config.FileName), []byte("[base]\nwarm = [\"true\"]\n"), 0o644)
	h := bustest.StartIn(t, w.home)
	conn := bustest.Dial(t, h, "test")
	watch := eventstest.Watch(t, conn.JS, events.SubjectRepo(w.store.Key))
	e := w.env(&testenv.Buffer{})
	cfg := h.ClientConfig("test")
	e.Bus = &cfg
	signer, _, err := share.EnsureSigner(w.home)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(ctx context.Context, r *base.Record) (string, error) {
		p, err := share.Publish(ctx, conn, share.Bucket{}, r, signer)
		if err != nil {
			return "", err
		}
		return p.Object, nil
	}
	res, err := pipeline.BuildAndShare(context.Background(), e.OneShot("ferry-base"), base.Options{
		Repo: e.Repo, Settings: e.Settings, Store: e.Store, Rev: "HEAD"}, publish)
	if err != nil {
		t.Fatal(err)
	}
	ready := eventstest.For(watch, wait, func(*events.BaseReady) bool { return true })
	if ready.BaseID != res.Record.ID || ready.Object != res.Record.ID {
		t.Fatalf("base.ready %+v for base %s", ready, res.Record.ID)
	}
	obs, err := conn.JS.ObjectStore(t.Context(), share.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := obs.GetInfo(t.Context(), ready.Object); err != nil || info.Metadata["digest"] == "" {
		t.Fatalf("object %s: %+v, %v", ready.Object, info, err)
	}
}
