package base_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
)

// A build checks its commit out before its base id is known, guessing the
// current base's fingerprint. A wrong guess, and a guess the plan then
// refuses, leave nothing behind: no directory, lock file or registered
// worktree of the guessed base.
func TestWrongGuessLeavesNothing(t *testing.T) {
	e := setup(t, "cargo build -p "+fixture.ChainC)
	first, err := e.build(t, "")
	if err != nil {
		t.Fatal(err)
	}
	fp := first.Record.Fingerprint

	// Another commit, and other warm commands: the guess is the new
	// commit with the old fingerprint.
	if err := e.repo.Append(fixture.LibPath(fixture.ChainC), "\n// guessed\n"); err != nil {
		t.Fatal(err)
	}
	next, err := e.repo.Commit("guess wrong")
	if err != nil {
		t.Fatal(err)
	}
	e.setWarm(t, "cargo check -p "+fixture.ChainC)
	second, err := e.build(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if second.Record.Fingerprint == fp || second.Record.Commit != next {
		t.Fatalf("second base %s: want commit %s with a fingerprint other than %s", second.Record.ID, next, fp)
	}
	guessed := base.ID(next, fp)
	e.checkOnly(t, first.Record.ID, second.Record.ID)
	if got := e.registered(t); len(got) != 2 {
		t.Fatalf("registered worktrees %v, want the two bases'", got)
	}
	if _, err := os.Lstat(e.store.BaseDir(guessed)); err == nil {
		t.Fatalf("the wrong guess %s left its directory", guessed)
	}

	// A commit the plan refuses (no Cargo.toml at the root), guessed at
	// the current fingerprint while the plan resolved.
	if err := e.repo.Remove("Cargo.toml"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.repo.Commit("no manifest"); err != nil {
		t.Fatal(err)
	}
	_, err = base.Build(context.Background(), e.quiet(t))
	if failure.KindOf(err) != failure.Prereq {
		t.Fatalf("err = %v, want the missing Cargo.toml refused", err)
	}
	e.checkOnly(t, first.Record.ID, second.Record.ID)
	if got := e.registered(t); len(got) != 2 {
		t.Fatalf("registered worktrees %v after a refused commit, want the two bases'", got)
	}
	if cur, _ := e.store.Current(); cur != second.Record.ID {
		t.Fatalf("current = %q, want %q", cur, second.Record.ID)
	}
}

// checkOnly fails unless bases/ holds exactly the directories and lock
// files of ids.
func (e *env) checkOnly(t *testing.T, ids ...string) {
	t.Helper()
	var want, got []string
	for _, id := range ids {
		want = append(want, id, filepath.Base(e.store.BaseLock(id)))
	}
	ents, err := os.ReadDir(e.store.BasesDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ents {
		got = append(got, d.Name())
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("bases/ holds %s, want %s", strings.Join(got, " "), strings.Join(want, " "))
	}
}

// A base whose target changed after it was built seeds nothing, though it
// is current (Build checks the current base's seal while the plan
// resolves, and the seed's choice takes that check).
func TestChangedBaseSeedsNothing(t *testing.T) {
	e := changedBase(t)
	if err := e.repo.Append(fixture.LibPath(fixture.ChainC), "\n// after the change\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.repo.Commit("after the change"); err != nil {
		t.Fatal(err)
	}
	res, err := e.build(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Record.Seed != "" {
		t.Fatalf("the refresh was seeded from %s, whose target was changed", res.Record.Seed)
	}
}

// A ready base whose target was written on the host is not served again:
// building its commit is refused, naming the fix, until it is rebuilt.
func TestChangedBaseIsNotReused(t *testing.T) {
	e := changedBase(t)
	o := e.quiet(t)
	res, err := base.Build(context.Background(), o)
	if failure.KindOf(err) != failure.Refused || !strings.Contains(failure.HintOf(err), "--rebuild") {
		t.Fatalf("building the changed base's commit: %v (reused: %v), want a refusal naming --rebuild", err, res != nil)
	}
	o.Rebuild = true
	res, err = base.Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reused || base.Verify(res.Record) != nil {
		t.Fatalf("after --rebuild: reused %v, verify %v", res.Reused, base.Verify(res.Record))
	}
}

// changedBase builds a base and writes into its target on the host,
// outside any sandbox.
func changedBase(t *testing.T) *env {
	t.Helper()
	e := setup(t, "cargo build -p "+fixture.ChainC)
	first, err := e.build(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(first.Record.Target, "stray"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

// quiet is the options of a build of HEAD whose progress goes nowhere, for
// builds that may fail before they say anything.
func (e *env) quiet(t *testing.T) base.Options {
	t.Helper()
	settings, err := config.Load(e.repo.Dir, e.vars)
	if err != nil {
		t.Fatal(err)
	}
	return base.Options{Repo: e.g, Settings: settings, Store: e.store, Progress: io.Discard}
}
