package share_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/share"
)

// A base as a file, with no bus: host A builds and exports its base; host
// B, a clone at another path with another store parent (a fresh machine
// or container), refuses a file that is no archive, cut short, changed,
// unsigned by a key it trusts or built with other warm commands, each
// with the reason and exit 6 and no base left; then imports the file,
// relocated, and an agent's first build compiles exactly the relocated
// units and prints what the sources say. Importing again reuses the base;
// a host that trusts no key installs it from stdin with --trust-unsigned.
func TestExportAndImportAcrossStores(t *testing.T) {
	bin := testenv.Binaries(t)
	root := t.TempDir()
	repoA := testenv.Repo(t, fixture.Options{})
	a := newHost(t, bin, repoA.Dir, filepath.Join(root, "a"), "")
	var built struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(a.must(t, "base", "--json")), &built); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "base.ferrybase")
	var ex struct {
		File   string `json:"file"`
		Signer string `json:"signer"`
		Bytes  int64  `json:"bytes"`
		Meta   struct {
			BaseID string `json:"base_id"`
			Bytes  int64  `json:"bytes"`
		} `json:"meta"`
		Seconds float64 `json:"seconds"`
	}
	if err := json.Unmarshal([]byte(a.must(t, "base", "export", "-o", file, "--json")), &ex); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Size() != ex.Bytes || ex.Meta.BaseID != built.ID || ex.Signer != a.trusted || ex.File != file {
		t.Fatalf("export: %+v (file %v, %v)", ex, fi, err)
	}
	t.Logf("exported %s: %d bytes of target as a %d-byte file in %.2fs", ex.Meta.BaseID, ex.Meta.Bytes, ex.Bytes, ex.Seconds)
	archive, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}

	repoB := filepath.Join(root, "b", "repo")
	clone(t, repoA.Dir, repoB)
	b := newHost(t, bin, repoB, filepath.Join(root, "b"), "")
	// The cache key is the same on both: the commit, after a fingerprint
	// of what the base is built with, which is the prefix.
	type cacheKey struct {
		Key    string `json:"key"`
		Prefix string `json:"prefix"`
		BaseID string `json:"base_id"`
	}
	var ka, kb cacheKey
	if err := json.Unmarshal([]byte(a.must(t, "base", "key", "--json")), &ka); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(b.must(t, "base", "key", "--json")), &kb); err != nil {
		t.Fatal(err)
	}
	commit, _, _ := strings.Cut(built.ID, "-")
	if ka != kb || ka.BaseID != built.ID || ka.Key != ka.Prefix+commit || !strings.HasPrefix(ka.Prefix, "ferry-base-") {
		t.Fatalf("cache keys: A %+v, B %+v (base %s)", ka, kb, built.ID)
	}
	variant := func(name string, data []byte) string {
		p := filepath.Join(root, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	changed := append([]byte(nil), archive...)
	changed[len(changed)-100] ^= 0xff // in the target's compressed bytes
	otherWarm := "[base]\nwarm = [\"cargo build --workspace\"]\n"
	// Another toolchain's base: the metadata says so, signed as it was.
	otherToolchain := resigned(t, archive, func(m *share.Meta) {
		m.Toolchain.Rustc += "\ncommit-hash: another build"
		m.Toolchain.RustcVersion = "1.94.0"
	})
	for _, c := range []struct {
		name    string
		file    string
		trusted string // FERRY_TRUSTED_KEYS
		toml    string // ferry.toml on B for this case, else the same as A's
		says    []string
	}{
		{"not an archive", variant("notes.txt", []byte("hello\n")), b.trusted, "", []string{"is not a base archive", "does not begin as one"}},
		{"cut short", variant("short.ferrybase", archive[:len(archive)/2]), b.trusted, "", []string{"is corrupt or cut short; nothing was installed"}},
		{"changed", variant("changed.ferrybase", changed), b.trusted, "", []string{"is corrupt or cut short; nothing was installed"}},
		{"no trusted key", file, "", "", []string{"refused", "this host trusts no key", "--trust-unsigned"}},
		{"other warm commands", file, b.trusted, otherWarm, []string{"does not match this host: warm commands"}},
		{"another toolchain", variant("toolchain.ferrybase", otherToolchain), b.trusted, "", []string{"does not match this host: toolchain: published with 1.94.0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.toml != "" {
				os.WriteFile(filepath.Join(repoB, "ferry.toml"), []byte(c.toml), 0o644)
				defer os.WriteFile(filepath.Join(repoB, "ferry.toml"), []byte(warmToml), 0o644)
			}
			trusted := b.trusted
			b.trusted = c.trusted
			_, stderr, err := b.ferry(repoB, nil, "base", "import", c.file)
			b.trusted = trusted
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 6 {
				t.Fatalf("import: %v, want exit 6:\n%s", err, stderr)
			}
			for _, want := range c.says {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			b.noBase(t, "a refused import")
			if cur, _ := filepath.Glob(filepath.Join(b.home, "repo-*", "current")); len(cur) != 0 {
				t.Error("a refused import set current")
			}
		})
	}

	var p pulled
	if err := json.Unmarshal([]byte(b.must(t, "base", "import", file, "--json")), &p); err != nil {
		t.Fatal(err)
	}
	t.Logf("imported %s in %.2fs", p.Record.ID, p.Seconds)
	if p.Record.ID != built.ID || p.Reused || p.Relocated == nil || p.Relocated.Paths == 0 {
		t.Fatalf("import into another store path: %+v", p)
	}
	compiled, marker, manifestDir, wt := b.agentRun(t, "b1")
	want, err := fixture.ExpectedMarker(wt)
	if err != nil {
		t.Fatal(err)
	}
	if marker != want {
		t.Fatalf("B's program prints\n%s\nwant\n%s", marker, want)
	}
	if got, want := strings.Join(compiled, " "), strings.Join(crates(p.Rebuilds), " "); len(compiled) == 0 || got != want {
		t.Fatalf("B's first agent build compiled [%s], want exactly the relocated units [%s]", got, want)
	}
	if !strings.HasPrefix(manifestDir, b.storeDir(t)) {
		t.Fatalf("B's program embeds manifest dir %s, not under B's store %s", manifestDir, b.storeDir(t))
	}
	if err := json.Unmarshal([]byte(b.must(t, "base", "import", file, "--json")), &p); err != nil || !p.Reused {
		t.Fatalf("second import: %+v (%v)", p, err)
	}

	// A delta: A refreshes after a leaf edit and exports the new base
	// against the first. B's copy of the first was relocated, so B
	// refuses the delta; a host at A's very paths (A's store wiped) takes
	// the full file and then the delta, and its agent compiles nothing.
	if err := repoA.Append(fixture.LibPath(fixture.ChainC), "\n// edited after the export\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := repoA.Commit("leaf edit"); err != nil {
		t.Fatal(err)
	}
	var next struct {
		ID   string `json:"id"`
		Seed string `json:"seed"`
	}
	if err := json.Unmarshal([]byte(a.must(t, "base", "--json")), &next); err != nil || next.Seed != built.ID {
		t.Fatalf("refresh after the leaf edit: %+v (%v)", next, err)
	}
	deltaFile := filepath.Join(root, "delta.ferrybase")
	var dx struct {
		Bytes int64 `json:"bytes"`
		Meta  struct {
			Delta struct {
				Seed   string `json:"seed"`
				Seeded int    `json:"seeded"`
			} `json:"delta"`
		} `json:"meta"`
	}
	if err := json.Unmarshal([]byte(a.must(t, "base", "export", "--against", built.ID, "-o", deltaFile, "--json")), &dx); err != nil {
		t.Fatal(err)
	}
	t.Logf("the refresh's delta against %s: %d bytes (the full file %d), %d target files named", dx.Meta.Delta.Seed, dx.Bytes, ex.Bytes, dx.Meta.Delta.Seeded)
	if dx.Meta.Delta.Seed != built.ID || dx.Meta.Delta.Seeded == 0 || dx.Bytes*2 > ex.Bytes {
		t.Fatalf("delta export: %+v (full file %d bytes)", dx, ex.Bytes)
	}
	if out, err := exec.Command("git", "-C", repoB, "fetch", "-q", "origin").CombinedOutput(); err != nil {
		t.Fatalf("git fetch: %v\n%s", err, out)
	}
	if _, stderr, err := b.ferry(repoB, nil, "base", "import", deltaFile); err == nil || !strings.Contains(stderr, "is a delta against base "+built.ID+", which is not ready here (or was relocated") {
		t.Fatalf("B imported a delta against its relocated base: %v\n%s", err, stderr)
	}
	if err := os.RemoveAll(a.storeDir(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := repoA.Git("worktree", "prune"); err != nil { // the wiped store's base checkouts
		t.Fatal(err)
	}
	a.must(t, "base", "import", file)
	var dp pulled
	if err := json.Unmarshal([]byte(a.must(t, "base", "import", deltaFile, "--json")), &dp); err != nil || dp.Record.ID != next.ID || dp.Relocated != nil {
		t.Fatalf("delta import at A's paths: %+v (%v)", dp, err)
	}
	compiled, marker, _, wt = a.agentRun(t, "a1")
	if want, err := fixture.ExpectedMarker(wt); err != nil || len(compiled) != 0 || marker != want {
		t.Fatalf("an agent of the imported delta compiled %v and printed\n%s\nwant\n%s (%v)", compiled, marker, want, err)
	}

	// C trusts no key: --trust-unsigned installs the file, read from stdin.
	repoC := filepath.Join(root, "c", "repo")
	clone(t, repoA.Dir, repoC)
	c := newHost(t, bin, repoC, filepath.Join(root, "c"), "")
	c.trusted = ""
	cmd := exec.Command(filepath.Join(bin, "ferry"), "base", "import", "-", "--trust-unsigned", "--json")
	cmd.Dir, cmd.Env = repoC, c.env(nil)
	cmd.Stdin = strings.NewReader(string(archive))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("import - --trust-unsigned: %v\n%s", err, out)
	}
	var q struct {
		Record struct {
			ID     string `json:"id"`
			Pulled struct {
				Archive string `json:"archive"`
				Signer  string `json:"signer"`
			} `json:"pulled"`
		} `json:"record"`
	}
	if err := json.Unmarshal(out, &q); err != nil || q.Record.ID != built.ID || q.Record.Pulled.Archive != "-" || q.Record.Pulled.Signer != "" {
		t.Fatalf("import from stdin: %s (%v)", out, err)
	}
}

// resigned is archive with its metadata changed by change and signed again
// by the test hosts' key, its object as it was.
func resigned(t *testing.T, archive []byte, change func(*share.Meta)) []byte {
	t.Helper()
	magic, rest, _ := bytes.Cut(archive, []byte("\n"))
	length, rest, _ := bytes.Cut(rest, []byte("\n"))
	n, err := strconv.Atoi(string(length))
	if err != nil {
		t.Fatal(err)
	}
	var md map[string]string
	if err := json.Unmarshal(rest[:n], &md); err != nil {
		t.Fatal(err)
	}
	var m share.Meta
	if err := json.Unmarshal([]byte(md["ferry-meta"]), &m); err != nil {
		t.Fatal(err)
	}
	change(&m)
	b, _ := json.Marshal(m)
	md["ferry-meta"] = string(b)
	signer, err := testSigner()
	if err != nil {
		t.Fatal(err)
	}
	signer.Sign(md)
	head, _ := json.Marshal(md)
	var out bytes.Buffer // a new slice: archive stays as it was
	fmt.Fprintf(&out, "%s\n%d\n%s", magic, len(head), head)
	out.Write(rest[n:])
	return out.Bytes()
}
