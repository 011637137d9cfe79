package share_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/share"
	"github.com/nats-io/nats.go/jetstream"
)

// A refresh is published with a delta against its seed base: a runner
// that has the seed ready at the publisher's paths pulls only the delta
// (the bytes read are the delta object's, a fraction of the full one's),
// copies the rest from the seed, and its agent compiles nothing and prints
// what the sources say. A corrupted delta is refused and leaves the base
// unready. A runner at another store path, whose seed the relocation
// pruned, pulls the full object instead.
func TestPullOfARefreshTransfersTheDelta(t *testing.T) {
	f := newFleet(t)
	bin, root, repoA, a := f.bin, f.root, f.repo, f.a
	type publishedBase struct {
		ID        string `json:"id"`
		Commit    string `json:"commit"`
		Seed      string `json:"seed"`
		Published struct {
			Meta share.Meta `json:"meta"`
		} `json:"published"`
	}
	publish := func(args ...string) publishedBase {
		t.Helper()
		var p publishedBase
		if err := json.Unmarshal([]byte(a.must(t, append([]string{"base", "--publish", "--json"}, args...)...)), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := publish()
	if first.Published.Meta.Delta != nil {
		t.Fatalf("a cold base was published with a delta: %+v", first.Published.Meta.Delta)
	}
	if err := repoA.Append(fixture.MainPath, "\n// edited\n"); err != nil {
		t.Fatal(err)
	}
	c2, err := repoA.Commit("edit app")
	if err != nil {
		t.Fatal(err)
	}
	second := publish("--rev", c2)
	d := second.Published.Meta.Delta
	if second.Seed != first.ID || d == nil || d.Seed != first.ID || d.Object != second.ID+share.DeltaSuffix {
		t.Fatalf("the refresh (seed %q) was published with delta %+v, want one against %s", second.Seed, d, first.ID)
	}
	full := second.Published.Meta.Compressed
	t.Logf("refresh %s: full object %d bytes, delta %d bytes (%d files, %d bytes from the seed)", second.ID, full, d.Compressed, d.Seeded, d.SeededBytes)
	if d.Seeded == 0 || d.Compressed*4 > full {
		t.Fatalf("delta of %d bytes taking %d files from the seed, for a full object of %d bytes", d.Compressed, d.Seeded, full)
	}

	// B: another store path. Its pulled first base lost the units the
	// relocation removed, so the delta cannot be assembled there: the
	// full object is pulled.
	repoB := filepath.Join(root, "b", "repo")
	clone(t, repoA.Dir, repoB)
	b := newHost(t, bin, repoB, filepath.Join(root, "b"), f.url)
	if p := b.pull(t, "--rev", first.Commit); p.Relocated == nil {
		t.Fatalf("B's pull of the first base was not relocated: %+v", p)
	}
	if p := b.pull(t, "--rev", c2); p.Record.ID != second.ID || p.Transferred != full {
		t.Fatalf("B's pull of the refresh: base %s, %d bytes read, want %s from its full object of %d bytes", p.Record.ID, p.Transferred, second.ID, full)
	}

	// C: A's very paths, with the first base pulled.
	origin := filepath.Join(root, "origin.git")
	if out, err := exec.Command("git", "clone", "-q", "--bare", repoA.Dir, origin).CombinedOutput(); err != nil {
		t.Fatalf("git clone --bare: %v\n%s", err, out)
	}
	for _, dir := range []string{repoA.Dir, a.home, a.wts} {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	clone(t, origin, repoA.Dir)
	c := newHost(t, bin, repoA.Dir, filepath.Join(root, "a"), f.url)
	seedPull := c.pull(t, "--rev", first.Commit)
	if seedPull.Relocated != nil || seedPull.Transferred != first.Published.Meta.Compressed {
		t.Fatalf("C's pull of the first base: %+v", seedPull)
	}

	// A corrupted delta: one byte of its stream changed.
	conn, obs, info := f.object(t, d.Object)
	data := corruptObject(t, obs, info.ObjectMeta)
	if out, stderr, err := c.ferry(c.repo, nil, "base", "--pull", "--rev", c2); err == nil || !bytes.Contains([]byte(stderr), []byte("digest mismatch")) {
		t.Fatalf("pull of a corrupted delta: want a digest mismatch, got %v\n%s%s", err, stderr, out)
	}
	if bs := c.bases(t); bs[second.ID] == "ready" || bs[first.ID] != "ready" {
		t.Fatalf("after the corrupted delta: %v", bs)
	}
	if _, err := obs.Put(t.Context(), info.ObjectMeta, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}

	p := c.pull(t, "--rev", c2)
	t.Logf("C pulled %s: %d bytes read, %d files from the seed (%d linked), %.2fs", p.Record.ID, p.Transferred, p.Seeded, p.Linked, p.Seconds)
	if p.Record.ID != second.ID || p.Object != d.Object || p.Transferred != d.Compressed || p.Seeded != d.Seeded {
		t.Fatalf("C's pull of the refresh: object %s, %d bytes read, %d files from the seed; want the delta %s, %d bytes, %d files",
			p.Object, p.Transferred, p.Seeded, d.Object, d.Compressed, d.Seeded)
	}
	// The seed's files with the published content, mode and mtime are
	// hard links of the seed's, not copies; the seed still verifies.
	if p.Linked == 0 || p.Linked > p.Seeded {
		t.Fatalf("C's delta pull linked %d of the %d files it took from the seed, want some and at most all", p.Linked, p.Seeded)
	}
	if n := sameInodes(t, seedPull.Record.Target, p.Record.Target); n < p.Linked {
		t.Fatalf("%d files of the pulled target share the seed's inode, want at least the %d linked", n, p.Linked)
	}
	c.must(t, "base", "verify")
	compiled, marker, _, wt := c.agentRun(t, "c1")
	want, err := fixture.ExpectedMarker(wt)
	if err != nil {
		t.Fatal(err)
	}
	if len(compiled) != 0 || marker != want {
		t.Fatalf("agent on the delta-pulled base compiled %v and printed\n%s\nwant\n%s", compiled, marker, want)
	}

	// The publisher's gc, collecting the refresh, deletes its delta too.
	deleted, err := share.Unpublish(t.Context(), conn, share.Bucket{}, second.Published.Meta.Store, []string{second.ID})
	if err != nil || len(deleted) != 1 {
		t.Fatalf("unpublish %s: deleted %v, %v", second.ID, deleted, err)
	}
	for _, name := range []string{second.ID, d.Object} {
		if _, err := obs.GetInfo(t.Context(), name); !errors.Is(err, jetstream.ErrObjectNotFound) {
			t.Errorf("object %s after its base was unpublished: %v", name, err)
		}
	}
}

// sameInodes counts the regular files of target b that are the file at
// the same path in target a (the same inode).
func sameInodes(t *testing.T, a, b string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(b, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(b, p)
		fb, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fa, err := os.Stat(filepath.Join(a, rel)); err == nil && os.SameFile(fa, fb) {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
