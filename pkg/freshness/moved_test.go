package freshness

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// spawned is an agent checkout of the standard tree, stamped against its
// base and settled as spawn leaves it; it returns the checkout and its git
// directory.
func spawned(t *testing.T) (agent, gitDir, base string) {
	t.Helper()
	tr := newTestRepo(t)
	base = tr.base(tr.A)
	agent = tr.checkout("agent", tr.A)
	spawn(t, input(t, agent, base, tr.A), time.Now())
	gitDir = strings.TrimSpace(try(tr.r.Git("-C", agent, "rev-parse", "--absolute-git-dir")).must(t))
	check(t, Settle(agent, gitDir, gitDir))
	return agent, gitDir, base
}

// FreshenMoved finds exactly the tracked paths changed since the last
// check whose mtime did not follow, raises their mtime, and moves the
// mark; stamping's own changes, edits whose mtime followed, and what a
// check already freshened are not picked.
func TestFreshenMoved(t *testing.T) {
	agent, gitDir, base := spawned(t)
	at := func(rel string) string { return filepath.Join(agent, filepath.FromSlash(rel)) }
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

	mv := try(FreshenMoved(agent, gitDir, gitDir, base, nil)).must(t)
	if mv.Full || len(mv.Files)+len(mv.Links)+len(mv.Ends) != 0 {
		t.Fatalf("right after spawn: %+v, want nothing (stamping is not the agent's change)", mv)
	}
	if mv.Checked < len(testFiles)+len(testLinks) {
		t.Errorf("checked %d paths, the tree has more", mv.Checked)
	}

	// cp -p, touch -d: new bytes, an old mtime.
	check(t, os.WriteFile(at("src/lib.rs"), []byte("pub fn a() -> u32 { 2 }\n"), 0o644))
	check(t, os.Chtimes(at("src/lib.rs"), old, old))
	// mv from outside the checkout: a rename keeps the old mtime.
	outside := filepath.Join(t.TempDir(), "util.rs")
	check(t, os.WriteFile(outside, []byte("pub fn b() { }\n"), 0o644))
	check(t, os.Chtimes(outside, old, old))
	check(t, os.Rename(outside, at("src/util.rs")))
	// rsync -a --delete: a directory's old mtime restored over a deletion.
	check(t, os.Remove(at("d1/sub/y.txt")))
	check(t, os.Chtimes(at("d1/sub"), old, old))
	// A plain edit: its mtime follows, Cargo sees it.
	check(t, os.WriteFile(at("d2/x.txt"), []byte("edited\n"), 0o644))
	// A link retargeted to an existing (stamped) file.
	check(t, os.Remove(at("link")))
	check(t, os.Symlink("data/b.txt", at("link")))

	// The kernel stamps a raise from its coarse clock, up to a tick
	// behind time.Now: a raised mtime is at most that much before the
	// check started (and decades after the old time).
	before := time.Now()
	raisedBy := before.Add(-100 * time.Millisecond)
	mv = try(FreshenMoved(agent, gitDir, gitDir, base, nil)).must(t)
	if want := []string{"d1/sub", "src/lib.rs", "src/util.rs"}; !slices.Equal(mv.Files, want) {
		t.Errorf("files %q, want %q", mv.Files, want)
	}
	if want := []string{"link"}; !slices.Equal(mv.Links, want) {
		t.Errorf("links %q, want %q", mv.Links, want)
	}
	// Both ends: the new one, and the old one (where the unit's dep-info
	// recorded the input).
	if want := []string{"data/a.txt", "data/b.txt"}; !slices.Equal(mv.Ends, want) {
		t.Errorf("link ends %q, want %q", mv.Ends, want)
	}
	for _, rel := range []string{"d1/sub", "src/lib.rs", "src/util.rs", "data/a.txt", "data/b.txt"} {
		if m := mtime(t, at(rel)); m.Before(raisedBy) {
			t.Errorf("%s: mtime %v, not raised", rel, m)
		}
	}
	if !isStamped(t, agent, "d2/sub/y.txt") || !isStamped(t, agent, "Cargo.toml") {
		t.Errorf("an unchanged stamped file lost its stamp")
	}
	if m := mtime(t, filepath.Join(gitDir, MarkName)); m.After(before) {
		t.Errorf("mark %v is after the check's start %v: a change during the check would be missed", m, before)
	}

	// The next check: nothing new, and what was freshened is not picked
	// again (its mtime is its ctime).
	if got := try(FreshenMoved(agent, gitDir, gitDir, base, nil)).must(t); len(got.Files)+len(got.Links) != 0 {
		t.Errorf("second check: %+v, want nothing", got)
	}

	// Retargeted again: the old end is now the one the last check saw.
	check(t, os.Remove(at("link")))
	check(t, os.Symlink("d2/x.txt", at("link")))
	got := try(FreshenMoved(agent, gitDir, gitDir, base, nil)).must(t)
	if want := []string{"data/b.txt", "d2/x.txt"}; !slices.Equal(got.Ends, sorted(want)) {
		t.Errorf("second retarget: ends %q, want %q", got.Ends, sorted(want))
	}

	// Links the callback cannot handle yet, or fails on, are found again
	// by the next check; the links it is given are the changed ones.
	check(t, os.Remove(at("link")))
	check(t, os.Symlink("data/a.txt", at("link")))
	var given []string
	got = try(FreshenMoved(agent, gitDir, gitDir, base, func(l []string) error { given = l; return ErrLinksPending })).must(t)
	if !got.Pending || !slices.Equal(given, []string{"link"}) {
		t.Errorf("pending: %+v, callback given %q", got, given)
	}
	if _, err := FreshenMoved(agent, gitDir, gitDir, base, func([]string) error { return os.ErrPermission }); err == nil {
		t.Errorf("a failing callback: no error")
	}
	got = try(FreshenMoved(agent, gitDir, gitDir, base, nil)).must(t)
	if !slices.Equal(got.Links, []string{"link"}) {
		t.Errorf("after a pending and a failed check, links %q, want [link]", got.Links)
	}

	// A link replaced by a file: where it led counts too.
	check(t, os.Remove(at("link")))
	check(t, os.WriteFile(at("link"), []byte("now a file\n"), 0o644))
	got = try(FreshenMoved(agent, gitDir, gitDir, base, nil)).must(t)
	if !slices.Equal(got.Links, []string{"link"}) || !slices.Equal(got.Ends, []string{"data/a.txt"}) {
		t.Errorf("link replaced by a file: links %q, ends %q; want [link] and [data/a.txt]", got.Links, got.Ends)
	}

	// A tracked directory replaced by a link to one outside the checkout:
	// not entered, so nothing outside is changed.
	far := t.TempDir()
	check(t, os.MkdirAll(filepath.Join(far, "sub"), 0o755))
	for _, rel := range []string{"x.txt", "sub/y.txt"} {
		check(t, os.WriteFile(filepath.Join(far, rel), []byte("far\n"), 0o644))
		check(t, os.Chtimes(filepath.Join(far, rel), old, old))
	}
	check(t, os.RemoveAll(at("d2")))
	check(t, os.Symlink(far, at("d2")))
	got = try(FreshenMoved(agent, gitDir, gitDir, base, nil)).must(t)
	for _, rel := range []string{"x.txt", "sub/y.txt"} {
		if m := mtime(t, filepath.Join(far, rel)); !m.Equal(old) {
			t.Errorf("%s outside the checkout, reached through d2: mtime changed to %v", rel, m)
		}
	}
	if slices.Contains(got.Files, "d2/x.txt") {
		t.Errorf("d2/x.txt checked through the link d2: %q", got.Files)
	}

	// No mark (an agent spawned before Ferry kept one): every path whose
	// mtime trails its ctime counts, the stamped ones too.
	check(t, os.Remove(filepath.Join(gitDir, MarkName)))
	got = try(FreshenMoved(agent, gitDir, gitDir, base, nil)).must(t)
	if !got.Full || !slices.Contains(got.Files, "Cargo.toml") {
		t.Errorf("without a mark: full %v, files %q; want every stamped file", got.Full, got.Files)
	}
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }
