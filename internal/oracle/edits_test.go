package oracle

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/ferrydev/ferry/internal/fixture"
)

// TestEditsKeepTheTreeConsistent runs many random edits (no cargo needed) and
// checks after each one what the harness relies on: every manifest parses,
// the member graph the editor tracks is the manifests' and stays acyclic,
// fixture.ExpectedMarker can read the tree, every edit changes the marker
// (except rewriting the symlink's old target once the link points
// elsewhere), and a restore puts back the base's exact bytes.
func TestEditsKeepTheTreeConsistent(t *testing.T) {
	fixture.RequireGit(t)
	repo, err := fixture.Generate(filepath.Join(t.TempDir(), "repo"), fixture.Options{NoLockfile: true})
	if err != nil {
		t.Fatal(err)
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	// Like an odd agent of the oracle: the tree starts at a diverged commit,
	// reverts restore the base's bytes.
	base := filepath.Join(t.TempDir(), "base")
	if err := copyTree(repo.Dir, base, false, skipGitAndTarget); err != nil {
		t.Fatal(err)
	}
	before, err := fixture.ExpectedMarker(repo.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, descs, err := Diverge(repo, seed); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	} else if m, _ := fixture.ExpectedMarker(repo.Dir); m == before {
		t.Errorf("seed %d: the diverged commit (%v) has the base's marker", seed, descs)
	}
	if out, err := repo.Git("status", "--porcelain"); err != nil || out != "" {
		t.Errorf("Diverge left the tree dirty (%v): %s", err, out)
	}
	ed, err := newEditor(repo.Dir, base, "agent-0", rand.New(rand.NewPCG(seed, 1)))
	if err != nil {
		t.Fatal(err)
	}
	marker := func() string {
		t.Helper()
		m, err := fixture.ExpectedMarker(repo.Dir)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		return m
	}
	before = marker()
	counts := map[Kind]int{}
	for i := 0; i < 400; i++ {
		k := drawKind(ed.rng)
		if i < len(AllKinds()) {
			k = Kind(i)
		}
		e, err := ed.apply(k)
		if err != nil {
			t.Fatalf("seed %d, edit %d (%s): %v", seed, i, k, err)
		}
		counts[e.kind]++
		checkTree(t, ed, seed, e.desc)
		after := marker()
		if after == before && !sharedDataUnreached(t, repo.Dir, e.desc) {
			t.Errorf("seed %d, edit %d: %q did not change the marker", seed, i, e.desc)
		}
		before = after
		if e.restore == nil {
			continue
		}
		desc, err := e.restore()
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		rel := strings.TrimPrefix(desc, "restore the base's exact bytes of ")
		got, err := os.ReadFile(filepath.Join(repo.Dir, filepath.FromSlash(rel)))
		if err != nil || !bytes.Equal(got, ed.base[rel]) {
			t.Errorf("seed %d: after %q the bytes differ from the base's (%v)", seed, desc, err)
		}
		checkTree(t, ed, seed, desc)
		after = marker()
		if after == before && !sharedDataUnreached(t, repo.Dir, desc) {
			t.Errorf("seed %d: %q did not change the marker", seed, desc)
		}
		before = after
	}
	for _, k := range AllKinds() {
		if counts[k] == 0 && k != KindAssetEdit && k != KindAssetDelete {
			t.Errorf("seed %d: no %s edit in 400", seed, k)
		}
	}
}

// sharedDataUnreached reports whether desc edited SharedData while the
// symlink points elsewhere (an edit no build can see).
func sharedDataUnreached(t *testing.T, dir, desc string) bool {
	link, err := os.Readlink(filepath.Join(dir, filepath.FromSlash(fixture.SymlinkPath)))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(desc, fixture.SharedData) && link != fixture.SymlinkTarget
}

// checkTree checks the manifests and the member graph after an edit.
func checkTree(t *testing.T, ed *editor, seed uint64, desc string) {
	t.Helper()
	for _, rel := range append([]string{"Cargo.toml"}, manifestsOf(ed.members)...) {
		data, err := os.ReadFile(ed.path(rel))
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := toml.Unmarshal(data, &v); err != nil {
			t.Fatalf("seed %d: after %q, %s does not parse: %v\n%s", seed, desc, rel, err, data)
		}
	}
	for _, m := range ed.members {
		data, _ := os.ReadFile(ed.path(manifestPath(m)))
		deps, err := memberDeps(data, ed.members)
		if err != nil {
			t.Fatal(err)
		}
		if len(deps) != len(ed.deps[m]) {
			t.Fatalf("seed %d: after %q, %s depends on %v but the editor tracks %v", seed, desc, m, deps, ed.deps[m])
		}
		for d := range deps {
			if !ed.deps[m][d] {
				t.Fatalf("seed %d: after %q, %s depends on %s, untracked", seed, desc, m, d)
			}
			if ed.reaches(d, m) {
				t.Fatalf("seed %d: after %q, a dependency cycle through %s and %s", seed, desc, m, d)
			}
		}
	}
}

func manifestsOf(members []string) []string {
	out := make([]string, len(members))
	for i, m := range members {
		out[i] = manifestPath(m)
	}
	return out
}
