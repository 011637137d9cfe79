package base_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/relocate"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
)

// manifestDir runs a base's app with fixture.ManifestDirFlag.
func manifestDir(t *testing.T, r *base.Record) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(r.Target, "debug", fixture.BinName), fixture.ManifestDirFlag).Output()
	if err != nil {
		t.Fatalf("run %s's app: %v", r.ID, err)
	}
	return strings.TrimSpace(string(out))
}

// A base built with sandbox mode off builds in its checkout at its host
// path into its own target (its app reports its own checkout), records the
// isolation, which gives it another id than the namespace base of the same
// commit, and stores its relocation plan, computed live, before base.json.
// A seeded refresh without the namespace applies a dead plan of the seed's
// target to its clone first: the crate that embeds its manifest dir is
// compiled again, and the new base reports its own checkout, never the
// seed's, which gc may collect.
func TestOffBaseBuildsAtHostPaths(t *testing.T) {
	e := setup(t, "cargo build --workspace --all-targets")
	e.vars.Set("FERRY_SANDBOX", "off")
	first, log := e.buildLogged(t, e.store, "HEAD", false)
	r := first.Record
	if r.Modes.Isolation != sandbox.IsolationOff || !r.HostPaths() {
		t.Fatalf("modes %+v", r.Modes)
	}
	if strings.Contains(log, "warning: user namespaces") {
		t.Errorf("mode off warned:\n%s", log)
	}
	if got, want := manifestDir(t, r), filepath.Join(r.Src, fixture.CrateDir(fixture.ManifestCrate)); got != want {
		t.Errorf("the base's app reports %s, want %s", got, want)
	}
	plan, err := relocate.Load(store.BaseFiles(r.Dir).Relocation)
	if err != nil {
		t.Fatalf("relocation.json: %v", err)
	}
	if !plan.Live || plan.Roots.Store != e.store.Dir || plan.Empty || len(plan.Remove) == 0 {
		t.Errorf("plan: live %t, roots %+v, empty %t, %d removals", plan.Live, plan.Roots, plan.Empty, len(plan.Remove))
	}
	if _, err := base.Relocation(r); err != nil {
		t.Errorf("base.Relocation: %v", err)
	}

	// The namespace base of the same commit is another base.
	if p, err := sandbox.Decide("auto"); err == nil && p.Isolation == sandbox.IsolationNamespace {
		e.vars.Set("FERRY_SANDBOX", "auto")
		ns, _ := e.buildLogged(t, e.store, "HEAD", false)
		if ns.Reused || ns.Record.ID == r.ID || ns.Record.Modes.Isolation != sandbox.IsolationNamespace {
			t.Errorf("the namespace base of HEAD is %s (%s), the off base %s", ns.Record.ID, ns.Record.Modes.Isolation, r.ID)
		}
		if _, err := os.Stat(store.BaseFiles(ns.Record.Dir).Relocation); !os.IsNotExist(err) {
			t.Errorf("a namespace base has a relocation.json: %v", err)
		}
		e.vars.Set("FERRY_SANDBOX", "off")
	}

	// A seeded refresh at host paths.
	e.repo.Append(fixture.LibPath(fixture.ChainC), "\n// edited\n")
	if _, err := e.repo.Commit("edit chain-c"); err != nil {
		t.Fatal(err)
	}
	second, log := e.buildLogged(t, e.store, "HEAD", false)
	s := second.Record
	if s.Seed != r.ID || s.Relocated == nil || s.Relocated.Paths == 0 {
		t.Fatalf("seed %q, relocated %+v; want seeded from %s and relocated\n%s", s.Seed, s.Relocated, r.ID, log)
	}
	if got, want := manifestDir(t, s), filepath.Join(s.Src, fixture.CrateDir(fixture.ManifestCrate)); got != want {
		t.Errorf("the seeded base's app reports %s, want %s (the seed's path is dead)", got, want)
	}
	if c := compiled(log); !contains(c, fixture.ManifestCrate) || contains(c, "serde") || contains(c, "regex") {
		t.Errorf("the seeded build compiled %v: want the manifest crate again, no registry crate", c)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
