package oracle

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
)

func TestMain(m *testing.M) { Main(m) }

// TestFerryAgentsBuildTheirOwnCode is the oracle: agents spawned by Ferry
// from one base make random edits concurrently, and after every build each
// agent's binary and test output must equal a cold build of its own tree.
func TestFerryAgentsBuildTheirOwnCode(t *testing.T) { RunFerry(t, "auto") }

// TestSharedTargetDirIsCaught points the same harness at plain worktrees
// sharing one CARGO_TARGET_DIR and requires it to report mismatches: the
// oracle can fail. The first round is scripted and in lockstep: agent-0
// edits a member and builds; agent-1, unedited and with every file older than
// that build, builds and gets agent-0's code. So is the second's variant,
// a release build: agent-0's edit reaches agent-1's release binary too,
// which the variant check must catch.
func TestSharedTargetDirIsCaught(t *testing.T) {
	start := time.Now()
	setupPkg(t)
	cfg := loadConfig(t, 2, 2)
	cfg.agents, cfg.rounds = 2, 2 // fixed: the scripted scenario needs two agents
	repro := cfg.repro(t.Name())
	t.Logf("seed %d; reproduce with: %s", cfg.seed, repro)
	ctx := testContext(t)

	repo, err := fixture.Generate(filepath.Join(t.TempDir(), "repo"), fixture.Options{})
	if err != nil {
		t.Fatal(err)
	}
	template := waitTemplate(t)
	tmp := t.TempDir()
	target := filepath.Join(tmp, "shared-target")
	if err := copyTree(template, target, true, nil); err != nil {
		t.Fatal(err)
	}
	agents := make([]Agent, cfg.agents)
	for i := range agents {
		name := fmt.Sprintf("agent-%d", i)
		if agents[i], err = NewSharedTargetAgent(repo, name, filepath.Join(tmp, "worktrees", name), target, pkg.cargo, baseEnv()); err != nil {
			t.Fatal(err)
		}
	}
	refs := newReferences(t, cfg.agents, template)

	h := &Harness{Agents: agents, References: refs, Options: Options{
		Seed: cfg.seed, Rounds: cfg.rounds, Repro: repro, Logf: t.Logf, Lockstep: true,
		Script: func(agent, round int) ([]Kind, bool) {
			if agent == 0 {
				return []Kind{KindSource}, true
			}
			return nil, true // no edit: agent-1's tree is the base's, older than agent-0's builds
		},
		VariantScript: func(agent, round int) (Variant, bool) {
			return Variant{Release: round == 1}, true
		},
	}}
	rep, err := h.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rep.Errors {
		t.Errorf("harness error: %s", e)
	}
	t.Logf("%d builds checked, %d mismatches found with a shared target dir (seed %d), in %.1fs",
		rep.Checks, len(rep.Mismatches), cfg.seed, time.Since(start).Seconds())
	if len(rep.Mismatches) == 0 {
		t.Fatalf("the oracle found no mismatch with a shared CARGO_TARGET_DIR: it cannot fail (seed %d; %s)", cfg.seed, repro)
	}
	t.Logf("first mismatch, as the oracle reports it:\n%s", rep.Mismatches[0])
	found, release := false, false
	for _, m := range rep.Mismatches {
		found = found || (m.Agent == "agent-1" && m.Round == 0 && m.What == "app output")
		release = release || (m.Agent == "agent-1" && m.Round == 1 && m.What == "app output of "+Variant{Release: true}.String())
	}
	if !found {
		t.Errorf("no app output mismatch for agent-1 in round 0, the deterministic case (seed %d)", cfg.seed)
	}
	if !release {
		t.Errorf("no mismatch of agent-1's release build in round 1: the variant check cannot fail (seed %d)", cfg.seed)
	}
}
