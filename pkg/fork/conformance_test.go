package fork_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/lifecycle"
	"github.com/ferrydev/ferry/pkg/store"

	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/fork/forktest"
)

// Every registered backend passes the conformance suite.
func TestConformance(t *testing.T) {
	for _, b := range fork.Backends() {
		t.Run(b.Name(), func(t *testing.T) { forktest.Run(t, b) })
	}
}

// TestEveryBackendHasALifecycle holds each registered backend to its
// second registration, in package lifecycle's table, and to a lifecycle
// that fits its forks: what a lifecycle says an agent's builds wrote
// (Written, which the shim reads) is where the sandbox mounts the fork
// (TargetSpec's directory) or its overlay's upper layer.
func TestEveryBackendHasALifecycle(t *testing.T) {
	for _, b := range fork.Backends() {
		l, err := lifecycle.For(b.Name())
		if err != nil {
			t.Errorf("backend %s: %v (add it to the table in pkg/lifecycle/lifecycle.go)", b.Name(), err)
			continue
		}
		checkLifecycleFits(t, b, l)
	}
}

func checkLifecycleFits(t *testing.T, b fork.Backend, l lifecycle.Lifecycle) {
	t.Helper()
	dir := t.TempDir()
	spec := b.TargetSpec(fork.Paths{BaseTarget: "/base/target", AgentDir: dir})
	want := spec.Dir
	if spec.Overlay != nil {
		want = spec.Overlay.Upper
	}
	if got := l.Written(lifecycle.Agent{Name: "a", Files: store.AgentFiles(dir)}); got != want {
		t.Errorf("backend %s: its lifecycle's Written is %s, where its fork's writes land is %s", b.Name(), got, want)
	}
}

// TestAddingABackend follows docs/internals.md "Adding a fork backend"
// with a new backend, the walk macOS's reflink backend takes (clonefile,
// which Linux never takes on its own) forking copies: once implemented
// (clonewalk_test.go) and registered (in fork's registry and lifecycle's
// table, as a plain directory each session binds), it is a name that
// ByName, Select, Names and the settings ([agent] backend) accept, and it
// passes the conformance suite: the tree, hard links, modes (a clone comes
// read-only when its source is), times, refusals and cleanup.
func TestAddingABackend(t *testing.T) {
	b := fork.CloningWalk
	if _, err := fork.ByName(b.Name()); err == nil {
		t.Fatalf("ByName(%s) finds a backend before it is registered", b.Name())
	}
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, config.FileName), []byte("[agent]\nbackend = \""+b.Name()+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(root, config.OSEnv()); err == nil {
		t.Fatalf("ferry.toml with [agent] backend = %q loads before the backend is registered", b.Name())
	}
	t.Cleanup(fork.RegisterForTest(b))
	if _, err := lifecycle.For(b.Name()); err == nil {
		t.Fatalf("lifecycle.For(%s) finds a lifecycle before its line in the table", b.Name())
	}
	t.Cleanup(lifecycle.RegisterForTest(b.Name(), lifecycle.Bind{}))
	if l, err := lifecycle.For(b.Name()); err != nil {
		t.Fatalf("lifecycle.For(%s) once registered: %v", b.Name(), err)
	} else {
		checkLifecycleFits(t, b, l)
	}
	if got, err := fork.ByName(b.Name()); err != nil || got != b {
		t.Fatalf("ByName(%s) = %v, %v once registered", b.Name(), got, err)
	}
	if !slices.Contains(fork.Names(), b.Name()) {
		t.Errorf("Names() = %v, without %s", fork.Names(), b.Name())
	}
	if got, err := fork.Select(b.Name(), t.TempDir()); err != nil || got != b {
		t.Errorf("Select(%s) = %v, %v", b.Name(), got, err)
	}
	if s, err := config.Load(root, config.OSEnv()); err != nil || s.Backend != b.Name() {
		t.Errorf("ferry.toml with [agent] backend = %q: %v", b.Name(), err)
	}
	forktest.Run(t, b)
}
