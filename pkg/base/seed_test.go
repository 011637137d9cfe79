package base_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/store"
)

// buildLogged builds rev into e's store (cold when asked) and returns the
// result and the build's log.
func (e *env) buildLogged(t *testing.T, s *store.Store, rev string, cold bool) (*base.Result, string) {
	t.Helper()
	settings, err := config.Load(e.repo.Dir, e.vars)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	res, err := base.Build(context.Background(), base.Options{
		Repo: e.g, Settings: settings, Store: s, Rev: rev, Cold: cold, Progress: &log,
	})
	if err != nil {
		t.Fatalf("build %s: %v\n%s", rev, err, log.String())
	}
	return res, log.String()
}

var compiling = regexp.MustCompile(`Compiling ([a-z0-9_-]+) v`)

func compiled(log string) []string {
	var out []string
	for _, m := range compiling.FindAllStringSubmatch(log, -1) {
		out = append(out, m[1])
	}
	sort.Strings(out)
	return out
}

// appOutput runs a base's binary, which prints the marker of the sources it
// was built from.
func appOutput(t *testing.T, r *base.Record) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(r.Target, "debug", fixture.BinName)).Output()
	if err != nil {
		t.Fatalf("run %s's app: %v", r.ID, err)
	}
	return strings.TrimSpace(string(out))
}

// A seeded base is what a cold build of its commit gives (invariant 1 holds
// for bases too), and costs only what the commit changed: along a history
// that edits a leaf crate, the build script's watched directory and the
// symlink's target, and reverts an edit, each seeded base prints the marker
// of its own sources, the same as a cold base of the same commit, and
// compiles only the crates the change reaches. A commit that changes a
// manifest has other unit inputs and builds cold.
func TestSeededBaseEqualsCold(t *testing.T) {
	e := setup(t, "cargo build --workspace --all-targets")
	cold := e.secondStore(t)
	first, _ := e.buildLogged(t, e.store, "HEAD", false)
	if first.Record.Seed != "" {
		t.Fatalf("the first base was seeded from %s", first.Record.Seed)
	}
	type step struct {
		name    string
		edit    func()
		seeded  bool
		compile []string // exactly these crates compile in the seeded build (nil: not checked)
	}
	leaf := fixture.LibPath(fixture.ChainC)
	original := string(must(readFile(e.repo.Path(leaf))))
	steps := []step{
		{"leaf edit", func() { e.repo.Append(leaf, "\n// edited\n") }, true,
			[]string{"app", "chain-a", "chain-b", "chain-c"}},
		{"build script input", func() { e.repo.Write(fixture.AssetsDir+"/extra.txt", "more\n") }, true, nil},
		{"symlink target", func() { e.repo.Write(fixture.SharedData, "changed shared data\n") }, true, nil},
		{"revert", func() { e.repo.Write(leaf, original) }, true, nil},
		{"manifest", func() { e.repo.Append(fixture.CrateDir(fixture.ChainC)+"/Cargo.toml", "\n# a comment\n") }, false, nil},
	}
	for _, s := range steps {
		s.edit()
		c, err := e.repo.Commit(s.name)
		if err != nil {
			t.Fatal(err)
		}
		res, log := e.buildLogged(t, e.store, c, false)
		r := res.Record
		if (r.Seed != "") != s.seeded {
			t.Errorf("%s: seed %q, want seeded=%v\n%s", s.name, r.Seed, s.seeded, log)
		}
		if s.compile != nil && strings.Join(compiled(log), " ") != strings.Join(s.compile, " ") {
			t.Errorf("%s: compiled %v, want %v", s.name, compiled(log), s.compile)
		}
		want, err := fixture.ExpectedMarker(r.Src)
		if err != nil {
			t.Fatal(err)
		}
		got := appOutput(t, r)
		if got != strings.TrimSpace(want) {
			t.Errorf("%s: the seeded base's app prints\n%s\nwant\n%s", s.name, got, want)
		}
		coldRes, _ := e.buildLogged(t, cold, c, true)
		if coldOut := appOutput(t, coldRes.Record); coldOut != got {
			t.Errorf("%s: seeded base prints %q, a cold base %q", s.name, got, coldOut)
		}
	}
}

// secondStore is a store of e's repository under another parent, for cold
// reference builds beside e's own.
func (e *env) secondStore(t *testing.T) *store.Store {
	t.Helper()
	common, _ := e.g.CommonDir()
	s, err := store.Open(filepath.Join(t.TempDir(), "cold-home"), common, e.g.Top)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func readFile(p string) ([]byte, error) { return os.ReadFile(p) }

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
