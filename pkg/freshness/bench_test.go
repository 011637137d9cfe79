package freshness

import (
	"path/filepath"
	"testing"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/git"
)

// BenchmarkVerify is the comparison a refresh's stamping and every spawn
// make, over a checkout of the benchmark's large workspace (100 extra
// crates of 10 modules: about 1,250 tracked files) against a base's.
func BenchmarkVerify(b *testing.B) {
	fixture.RequireGit(b)
	tmp := b.TempDir()
	r, err := fixture.Generate(filepath.Join(tmp, "repo"), fixture.Options{ExtraCrates: 100, ModulesPerCrate: 10, NoLockfile: true})
	if err != nil {
		b.Fatal(err)
	}
	head, err := r.Git("rev-parse", "HEAD")
	if err != nil {
		b.Fatal(err)
	}
	dirs := map[string]string{}
	for _, name := range []string{"base", "agent"} {
		dirs[name] = filepath.Join(tmp, name)
		if _, err := r.Git("worktree", "add", "-q", "--detach", dirs[name], head); err != nil {
			b.Fatal(err)
		}
	}
	agent, err := git.Open(dirs["agent"])
	if err != nil {
		b.Fatal(err)
	}
	index, err := agent.LsFiles("")
	if err != nil {
		b.Fatal(err)
	}
	tree, err := agent.LsTree(head)
	if err != nil {
		b.Fatal(err)
	}
	in := Input{AgentDir: dirs["agent"], AgentIndex: index, BaseDir: dirs["base"], BaseTree: tree}
	b.ResetTimer()
	for b.Loop() {
		p, err := Verify(in)
		if err != nil {
			b.Fatal(err)
		}
		if len(p.Files()) < len(index)-1 { // the fixture's symlink is not stamped
			b.Fatalf("stamps %d of %d files: %v", len(p.Files()), len(index), p.Skipped())
		}
	}
}
