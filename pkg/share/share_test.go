package share_test

import (
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/internal/bustest"
	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/bus/embedded"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/share"
)

func TestMain(m *testing.M) {
	sandbox.Init()
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

const warmToml = "[base]\nwarm = [\"cargo build --workspace --all-targets\"]\n"

// host is one machine's view: a clone of the repository, a store parent
// and a worktree parent, sharing the test's bus.
type host struct {
	bin, repo, home, wts, busURL string
	extra                        []string // more environment
	// trusted is FERRY_TRUSTED_KEYS: every test host signs with
	// testSigner's key and trusts it, unless a test says otherwise.
	trusted string
}

// testSigner is the key test hosts sign the bases they publish with.
var testSigner = sync.OnceValues(func() (*share.Signer, error) {
	dir, err := os.MkdirTemp("", "ferry-test-key-")
	if err != nil {
		return nil, err
	}
	testenv.RemoveAtExit(dir)
	s, _, err := share.EnsureSigner(dir)
	return s, err
})

// fleet is a test's embedded bus and host A, which publishes, on it.
type fleet struct {
	bin  string
	bus  *embedded.Host
	url  string // the bus's URL with its token, for FERRY_NATS_URL
	root string // each host's directories are below it
	repo *fixture.Repo
	a    *host
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	f := &fleet{bin: testenv.Binaries(t), bus: bustest.Start(t), root: t.TempDir(), repo: testenv.Repo(t, fixture.Options{})}
	u, _ := url.Parse(f.bus.URL())
	u.User = url.User(f.bus.Token())
	f.url = u.String()
	f.a = newHost(t, f.bin, f.repo.Dir, filepath.Join(f.root, "a"), f.url)
	return f
}

func newHost(t *testing.T, bin, repo, root, busURL string) *host {
	t.Helper()
	h := &host{bin: bin, repo: repo, home: filepath.Join(root, "home"), wts: filepath.Join(root, "worktrees"), busURL: busURL}
	if err := os.WriteFile(filepath.Join(repo, "ferry.toml"), []byte(warmToml), 0o644); err != nil {
		t.Fatal(err)
	}
	signer, err := testSigner()
	if err == nil {
		err = signer.WriteTo(h.home)
	}
	if err != nil {
		t.Fatal(err)
	}
	h.trusted = signer.Public()
	return h
}

func (h *host) env(extra []string) []string {
	return append(os.Environ(), append([]string{"FERRY_HOME=" + h.home, "FERRY_WORKTREES=" + h.wts,
		"FERRY_NATS_URL=" + h.busURL, "FERRY_TRUSTED_KEYS=" + h.trusted, knobs.OverlayHold + "=0"}, append(h.extra, extra...)...)...)
}

func (h *host) ferry(dir string, extra []string, args ...string) (string, string, error) {
	c := exec.Command(filepath.Join(h.bin, "ferry"), args...)
	c.Dir = dir
	c.Env = h.env(extra)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	return stdout.String(), stderr.String(), err
}

func (h *host) must(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := h.ferry(h.repo, nil, args...)
	if err != nil {
		t.Fatalf("ferry %s: %v\n%s%s", strings.Join(args, " "), err, stderr, out)
	}
	return out
}

// cargo runs cargo through the shim in dir.
func (h *host) cargo(t *testing.T, dir string, args ...string) string {
	t.Helper()
	c := exec.Command(filepath.Join(h.home, "bin", "cargo"), args...)
	c.Dir = dir
	c.Env = h.env([]string{"PATH=" + filepath.Join(h.home, "bin") + ":" + os.Getenv("PATH")})
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("cargo %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stderr.String()
}

func (h *host) storeDir(t *testing.T) string {
	t.Helper()
	ents, _ := filepath.Glob(filepath.Join(h.home, "repo-*"))
	if len(ents) != 1 {
		t.Fatalf("store dirs under %s: %v", h.home, ents)
	}
	return ents[0]
}

// bases lists the host's bases as `ferry base list --json` does.
func (h *host) bases(t *testing.T) map[string]string {
	t.Helper()
	var list []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	if err := json.Unmarshal([]byte(h.must(t, "base", "list", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range list {
		out[e.ID] = e.State
	}
	return out
}

type pulled struct {
	Record struct {
		ID     string `json:"id"`
		Store  string `json:"store"`
		Target string `json:"target"`
		Pulled *struct {
			From string `json:"from"`
		} `json:"pulled"`
	} `json:"record"`
	Reused    bool `json:"reused"`
	Relocated *struct {
		Paths int `json:"paths"`
	} `json:"relocated"`
	Rebuilds    []string `json:"rebuilds"`
	Object      string   `json:"object"`
	Transferred int64    `json:"transferred"`
	Seeded      int      `json:"seeded"`
	Linked      int      `json:"linked"`
	Seconds     float64  `json:"seconds"`
}

func (h *host) pull(t *testing.T, args ...string) pulled {
	t.Helper()
	var p pulled
	if err := json.Unmarshal([]byte(h.must(t, append([]string{"base", "--pull", "--json"}, args...)...)), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// agentRun spawns an agent, builds it and returns what cargo compiled and
// what the program prints (the marker, and the manifest dir it embeds).
func (h *host) agentRun(t *testing.T, name string) (compiled []string, marker, manifestDir, worktree string) {
	t.Helper()
	var a struct {
		Worktree string `json:"worktree"`
	}
	if err := json.Unmarshal([]byte(h.must(t, "spawn", name, "--json")), &a); err != nil {
		t.Fatal(err)
	}
	stderr := h.cargo(t, a.Worktree, "build", "--workspace", "--all-targets")
	for _, m := range regexp.MustCompile(`(?m)^\s*Compiling (\S+) `).FindAllStringSubmatch(stderr, -1) {
		compiled = append(compiled, m[1])
	}
	sort.Strings(compiled)
	bin := filepath.Join(h.storeDir(t), "mnt", "target", "debug", fixture.BinName)
	run := func(args ...string) string {
		out, stderr, err := h.ferry(a.Worktree, nil, append([]string{"run", "--", bin}, args...)...)
		if err != nil {
			t.Fatalf("ferry run %s: %v\n%s", bin, err, stderr)
		}
		return strings.TrimSpace(out)
	}
	return compiled, run(), run("--manifest-dir"), a.Worktree
}

// crates names the crates of fingerprint dirs (debug/<crate>-<hash>).
func crates(units []string) []string {
	seen := map[string]bool{}
	for _, u := range units {
		name := filepath.Base(u)
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i]
		}
		seen[strings.ReplaceAll(name, "_", "-")] = true
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func clone(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("git", "clone", "-q", from, to).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
}

// Host A builds and publishes; host B, with another store parent and its
// own clone, pulls: the target is relocated (A's store paths are dead on
// B), and an agent on B compiles exactly the relocated units and prints
// what the sources say, with B's paths. Then a host with A's very paths
// pulls and its agent compiles nothing. The bus is deploy/nats/sharing.conf
// on loopback: TLS, A connects as its publisher, B and C as its runner,
// which may not publish, and a client without a user is refused.
func TestPublishAndPullAcrossStores(t *testing.T) {
	bin := testenv.Binaries(t)
	bus := startSharing(t)
	trust := []string{"SSL_CERT_FILE=" + bus.ca}
	root := t.TempDir()
	repoA := testenv.Repo(t, fixture.Options{})
	a := newHost(t, bin, repoA.Dir, filepath.Join(root, "a"), bus.publisher)
	a.extra = trust
	var built struct {
		ID        string `json:"id"`
		Published struct {
			Object string `json:"object"`
			Meta   struct {
				Compressed int64 `json:"compressed"`
				Bytes      int64 `json:"bytes"`
			} `json:"meta"`
			Seconds float64 `json:"seconds"`
		} `json:"published"`
	}
	if err := json.Unmarshal([]byte(a.must(t, "base", "--publish", "--json")), &built); err != nil {
		t.Fatal(err)
	}
	if built.Published.Object != built.ID {
		t.Fatalf("published object %q, want the base id %q", built.Published.Object, built.ID)
	}
	t.Logf("published %s: %d bytes of target as %d bytes in %.2fs", built.ID, built.Published.Meta.Bytes, built.Published.Meta.Compressed, built.Published.Seconds)

	// B: another clone, another store parent.
	repoB := filepath.Join(root, "b", "repo")
	clone(t, repoA.Dir, repoB)
	b := newHost(t, bin, repoB, filepath.Join(root, "b"), bus.runner)
	b.extra = trust
	// Without a user, or without trusting the server's CA, nothing.
	for _, env := range [][]string{{"FERRY_NATS_URL=" + bus.anonymous}, nil} {
		if out, stderr, err := b.ferry(repoB, append(env, "SSL_CERT_FILE="+filepath.Join(root, "none.pem")), "base", "--pull"); err == nil {
			t.Fatalf("pull with %v succeeded:\n%s", env, out)
		} else {
			t.Logf("pull with %v and no trusted CA:\n%s", env, stderr)
		}
	}
	if _, stderr, err := b.ferry(repoB, []string{"FERRY_NATS_URL=" + bus.anonymous}, "base", "--pull"); err == nil || !strings.Contains(stderr, "uthorization") {
		t.Fatalf("pull without a user: want an authorization failure, got %v\n%s", err, stderr)
	}
	p := b.pull(t)
	t.Logf("pulled and installed %s in %.2fs", p.Record.ID, p.Seconds)
	if p.Record.ID != built.ID || p.Reused || p.Record.Pulled == nil {
		t.Fatalf("pull: %+v", p)
	}
	if p.Relocated == nil || p.Relocated.Paths == 0 {
		t.Fatalf("pull into another store path relocated nothing: %+v", p)
	}
	compiled, marker, manifestDir, wt := b.agentRun(t, "b1")
	want, err := fixture.ExpectedMarker(wt)
	if err != nil {
		t.Fatal(err)
	}
	if marker != want {
		t.Fatalf("B's program prints\n%s\nwant\n%s", marker, want)
	}
	if len(compiled) == 0 {
		t.Fatal("B's first agent build compiled nothing: the relocated units were not rebuilt")
	}
	if got, want := strings.Join(compiled, " "), strings.Join(crates(p.Rebuilds), " "); got != want {
		t.Fatalf("B's first agent build compiled [%s], want exactly the relocated units [%s] (%v)", got, want, p.Rebuilds)
	}
	if !strings.HasPrefix(manifestDir, b.storeDir(t)) {
		t.Fatalf("B's program embeds manifest dir %s, not under B's store %s", manifestDir, b.storeDir(t))
	}
	// A second pull finds the base ready.
	if p := b.pull(t); !p.Reused {
		t.Fatalf("second pull: %+v", p)
	}
	// The runner may not write the bucket.
	if out, stderr, err := b.ferry(repoB, nil, "base", "--publish"); err == nil || !strings.Contains(strings.ToLower(stderr), "permission") {
		t.Fatalf("runner publishing: want a permissions violation, got %v\n%s%s", err, stderr, out)
	}

	// C: A's very paths (its repository and store parent), as on a fleet
	// configured alike: A's host is wiped and a fresh clone takes its place.
	origin := filepath.Join(root, "origin.git")
	if out, err := exec.Command("git", "clone", "-q", "--bare", repoA.Dir, origin).CombinedOutput(); err != nil {
		t.Fatalf("git clone --bare: %v\n%s", err, out)
	}
	storeA := a.storeDir(t)
	for _, d := range []string{repoA.Dir, a.home, a.wts} {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
	}
	clone(t, origin, repoA.Dir)
	c := newHost(t, bin, repoA.Dir, filepath.Join(root, "a"), bus.runner)
	c.extra = trust
	p = c.pull(t)
	if p.Relocated != nil || c.storeDir(t) != storeA {
		t.Fatalf("pull at the publisher's paths: relocated %+v, store %s (publisher's %s)", p.Relocated, c.storeDir(t), storeA)
	}
	compiled, marker, _, _ = c.agentRun(t, "c1")
	if len(compiled) != 0 || marker != want {
		t.Fatalf("agent at the publisher's paths compiled %v and printed %s", compiled, marker)
	}
}

// noBase checks that h has no base at all, ready or partial.
func (h *host) noBase(t *testing.T, what string) {
	t.Helper()
	if bs := h.bases(t); len(bs) != 0 {
		t.Fatalf("%s left bases %v", what, bs)
	}
}

// A pull that is refused or fails leaves no ready base and says why: a
// base built with other warm commands, one whose toolchain differs, an
// object of the previous format, a corrupted object, and a pull killed midway (which the next pull
// repairs). A pull of a commit nobody published pulls the nearest
// published ancestor and refreshes from it. gc deletes an object only on
// the host that published it.
func TestFailedPullsAndGC(t *testing.T) {
	f := newFleet(t)
	bin, root, repoA, a := f.bin, f.root, f.repo, f.a
	var built struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(a.must(t, "base", "--publish", "--json")), &built); err != nil {
		t.Fatal(err)
	}
	repoB := filepath.Join(root, "b", "repo")
	clone(t, repoA.Dir, repoB)
	b := newHost(t, bin, repoB, filepath.Join(root, "b"), f.url)
	refused := func(what, want string, extra ...string) string {
		t.Helper()
		out, stderr, err := b.ferry(b.repo, extra, "base", "--pull")
		if err == nil || !strings.Contains(stderr, want) {
			t.Fatalf("%s: want a failure saying %q, got %v\n%s%s", what, want, err, stderr, out)
		}
		b.noBase(t, what)
		t.Logf("%s:\n%s", what, stderr)
		return stderr
	}

	// Other warm commands: another fingerprint, and the refusal names them.
	if err := os.WriteFile(filepath.Join(repoB, "ferry.toml"), []byte("[base]\nwarm = [\"cargo build --workspace\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused("other warm commands", "warm commands: published")
	if err := os.WriteFile(filepath.Join(repoB, "ferry.toml"), []byte(warmToml), 0o644); err != nil {
		t.Fatal(err)
	}

	// Another toolchain: the object's metadata says so.
	_, obs, info := f.object(t, built.ID)
	original := info.ObjectMeta
	var m share.Meta
	if err := json.Unmarshal([]byte(original.Metadata["ferry-meta"]), &m); err != nil {
		t.Fatal(err)
	}
	other := m
	other.Toolchain.Rustc = strings.Replace(m.Toolchain.Rustc, m.Toolchain.RustcVersion, "1.0.0", 1)
	other.Toolchain.RustcVersion = "1.0.0"
	setMeta(t, obs, original, &other)
	refused("another toolchain", "toolchain: published with 1.0.0")
	// An object of the format before the digest was of the compressed
	// object: its digest would not match; the refusal says to publish it
	// again.
	old := m
	old.Format = 1
	setMeta(t, obs, original, &old)
	if stderr := refused("an object of the old format", "is of object format 1, published by an older Ferry"); !strings.Contains(stderr, "ferry base --publish") {
		t.Errorf("the old format's refusal gives no hint to publish again:\n%s", stderr)
	}
	setMeta(t, obs, original, &m)

	// A corrupted object: one byte of base.json changed, the object's
	// digest no longer matches.
	data := corruptObject(t, obs, original)
	refused("a corrupted object", "digest mismatch")
	if _, err := obs.Put(t.Context(), original, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}

	// A pull killed while it extracts leaves a partial base, not a ready
	// one; gc removes it, and so does the next pull, which installs the
	// base.
	killed := func() {
		t.Helper()
		_, stderr, err := b.ferry(b.repo, []string{knobs.Failpoint + "=share/pull-extracting"}, "base", "--pull")
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
			t.Fatalf("pull with the failpoint armed: want it killed, got %v:\n%s", err, stderr)
		}
		if bs := b.bases(t); bs[built.ID] != "partial" || len(bs) != 1 {
			t.Fatalf("killed pull left %v, want base %s partial", bs, built.ID)
		}
	}
	killed()
	b.must(t, "gc")
	b.noBase(t, "gc after a killed pull")
	killed()
	if p := b.pull(t); p.Record.ID != built.ID || p.Reused {
		t.Fatalf("pull after the killed one: %+v", p)
	}
	if bs := b.bases(t); bs[built.ID] != "ready" {
		t.Fatalf("after the second pull: %v", bs)
	}

	// gc: A builds and publishes the next commit; B pulls it and collects
	// the first base, whose object stays (B did not publish it); A
	// collects it too, and its object goes.
	if err := repoA.Append(fixture.LibPath(fixture.ChainC), "\n// next\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := repoA.Git("commit", "-q", "-m", "next", "--", fixture.LibPath(fixture.ChainC)); err != nil {
		t.Fatal(err)
	}
	var next struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(a.must(t, "base", "--publish", "--json")), &next); err != nil {
		t.Fatal(err)
	}
	// A commit nobody published: B pulls its nearest published ancestor
	// and refreshes from it.
	if err := repoA.Append(fixture.LibPath(fixture.ChainC), "\n// unpublished\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := repoA.Git("commit", "-q", "-m", "unpublished", "--", fixture.LibPath(fixture.ChainC)); err != nil {
		t.Fatal(err)
	}
	head, err := repoA.Git("rev-parse", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "-C", repoB, "pull", "-q", "--ff-only").CombinedOutput(); err != nil {
		t.Fatalf("git pull: %v\n%s", err, out)
	}
	var refreshed struct {
		Record struct {
			ID string `json:"id"`
		} `json:"record"`
		Refreshed struct {
			ID     string `json:"id"`
			Commit string `json:"commit"`
			Seed   string `json:"seed"`
		} `json:"refreshed"`
	}
	out := b.must(t, "base", "--pull", "--json")
	if err := json.Unmarshal([]byte(out), &refreshed); err != nil {
		t.Fatal(err)
	}
	if refreshed.Record.ID != next.ID || refreshed.Refreshed.Commit != strings.TrimSpace(head) || refreshed.Refreshed.Seed != next.ID {
		t.Fatalf("pull of an unpublished commit: want %s pulled and %s built from it, got\n%s", next.ID, strings.TrimSpace(head), out)
	}
	objects := func() map[string]bool {
		t.Helper()
		list, err := obs.List(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, o := range list {
			out[o.Name] = true
		}
		return out
	}
	b.must(t, "gc")
	if bs := b.bases(t); bs[built.ID] != "" {
		t.Fatalf("B's gc kept %s: %v", built.ID, bs)
	}
	if o := objects(); !o[built.ID] || !o[next.ID] {
		t.Fatalf("after B's gc the bucket holds %v, want both published bases (B published neither)", o)
	}
	a.must(t, "gc")
	if o := objects(); o[built.ID] || !o[next.ID] || !o[next.ID+share.DeltaSuffix] || len(o) != 2 {
		t.Fatalf("after A's gc the bucket holds %v, want only %s and its delta", o, next.ID)
	}
}

func setMeta(t *testing.T, obs jetstream.ObjectStore, meta jetstream.ObjectMeta, m *share.Meta) {
	t.Helper()
	b, _ := json.Marshal(m)
	md := map[string]string{}
	for k, v := range meta.Metadata {
		md[k] = v
	}
	md["ferry-meta"] = string(b)
	// Signed again with the test hosts' key: what is judged is the change.
	signer, err := testSigner()
	if err != nil {
		t.Fatal(err)
	}
	signer.Sign(md)
	meta.Metadata = md
	if err := obs.UpdateMeta(t.Context(), meta.Name, meta); err != nil {
		t.Fatal(err)
	}
}

// object dials the fleet's bus and returns the connection, the bucket and
// the info of its object name.
func (f *fleet) object(t *testing.T, name string) (*bus.Conn, jetstream.ObjectStore, *jetstream.ObjectInfo) {
	t.Helper()
	conn := bustest.Dial(t, f.bus, "test")
	obs, err := conn.JS.ObjectStore(t.Context(), share.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := obs.GetInfo(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return conn, obs, info
}

// corruptObject changes one byte of the base.json in the object meta
// names (stored again under the same metadata, so its digest no longer
// matches) and returns the object as it was.
func corruptObject(t *testing.T, obs jetstream.ObjectStore, meta jetstream.ObjectMeta) []byte {
	t.Helper()
	data, err := obs.GetBytes(t.Context(), meta.Name)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := zstdDecode(data)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(plain, []byte(`"warm"`))
	if i < 0 {
		t.Fatalf("no base.json in object %s", meta.Name)
	}
	plain[i+2] = 'A'
	if _, err := obs.Put(t.Context(), meta, bytes.NewReader(zstdEncode(t, plain))); err != nil {
		t.Fatal(err)
	}
	return data
}

func zstdDecode(b []byte) ([]byte, error) {
	d, err := zstd.NewReader(nil)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.DecodeAll(b, nil)
}

func zstdEncode(t *testing.T, b []byte) []byte {
	e, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	return e.EncodeAll(b, nil)
}
