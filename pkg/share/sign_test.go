package share_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/share"
)

// A runner installs only a base signed by a key it trusts. With no trusted
// key, a foreign signer, an unsigned object, or a signature over other
// metadata, the pull is refused with the reason and leaves no base; a
// trusted signature installs it and the record names the signer. Keys
// rotate: with the old and the new key trusted, bases signed by either
// install; once only the new one is, the old one's are refused.
func TestPullTrustsOnlySignedBases(t *testing.T) {
	f := newFleet(t)
	bin, root, a := f.bin, f.root, f.a
	old, err := share.LoadSigner(a.home)
	if err != nil {
		t.Fatal(err)
	}
	var first struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(a.must(t, "base", "--publish", "--json")), &first); err != nil {
		t.Fatal(err)
	}
	repoB := filepath.Join(root, "b", "repo")
	clone(t, f.repo.Dir, repoB)
	b := newHost(t, bin, repoB, filepath.Join(root, "b"), f.url)
	pull := func(what string, trusted ...string) (string, error) {
		t.Helper()
		b.trusted = strings.Join(trusted, ",")
		out, stderr, err := b.ferry(b.repo, nil, "base", "--pull", "--json")
		if err != nil {
			b.noBase(t, what)
			return stderr, err
		}
		return out, nil
	}
	refused := func(what, want string, trusted ...string) {
		t.Helper()
		stderr, err := pull(what, trusted...)
		if err == nil || !strings.Contains(stderr, want) || !strings.Contains(stderr, "nothing was installed") {
			t.Fatalf("%s: want a refusal saying %q, got %v\n%s", what, want, err, stderr)
		}
	}
	other, _, err := share.EnsureSigner(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	refused("no trusted key", "this host trusts no key")
	refused("a foreign signer", "which is not in [share] trusted-keys", other.Public())

	// Unsigned, and signed over other metadata.
	_, obs, info := f.object(t, first.ID)
	original := info.ObjectMeta
	unsigned := original
	unsigned.Metadata = map[string]string{}
	for k, v := range original.Metadata {
		if k != "ferry-signature" && k != "ferry-signer" {
			unsigned.Metadata[k] = v
		}
	}
	if err := obs.UpdateMeta(t.Context(), original.Name, unsigned); err != nil {
		t.Fatal(err)
	}
	refused("an unsigned object", "is not signed", old.Public())
	var m share.Meta
	if err := json.Unmarshal([]byte(original.Metadata["ferry-meta"]), &m); err != nil {
		t.Fatal(err)
	}
	m.Host = "somewhere-else"
	forged := original
	forged.Metadata = map[string]string{}
	for k, v := range original.Metadata {
		forged.Metadata[k] = v
	}
	data, _ := json.Marshal(m)
	forged.Metadata["ferry-meta"] = string(data)
	if err := obs.UpdateMeta(t.Context(), original.Name, forged); err != nil {
		t.Fatal(err)
	}
	refused("a signature over other metadata", "does not match its metadata", old.Public())
	if err := obs.UpdateMeta(t.Context(), original.Name, original); err != nil {
		t.Fatal(err)
	}

	// Rotation: the publisher switches to a new key and publishes the
	// next commit; the runner trusts both, then only the new one.
	next, _, err := share.EnsureSigner(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := next.WriteTo(a.home); err != nil {
		t.Fatal(err)
	}
	// (ferry.toml stays untracked: B has its own.)
	if err := f.repo.Write("notes.txt", "rotated\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.repo.Git("add", "notes.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.repo.Git("commit", "-q", "-m", "after the key rotation"); err != nil {
		t.Fatal(err)
	}
	c2, err := f.repo.Git("rev-parse", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	c2 = strings.TrimSpace(c2)
	a.must(t, "base", "--publish", "--rev", c2)
	out, err := pull("both keys trusted: the old key's base", old.Public(), next.Public())
	if err != nil {
		t.Fatalf("pull with both keys trusted: %v\n%s", err, out)
	}
	var got struct {
		Record struct {
			ID     string `json:"id"`
			Pulled struct {
				Signer string `json:"signer"`
			} `json:"pulled"`
		} `json:"record"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Record.ID != first.ID || got.Record.Pulled.Signer != old.Public() {
		t.Fatalf("pulled %+v (%v), want base %s signed by the old key", got.Record, err, first.ID)
	}
	if o, err := exec.Command("git", "-C", repoB, "pull", "-q", "--ff-only", f.repo.Dir, "HEAD").CombinedOutput(); err != nil {
		t.Fatalf("git pull: %v\n%s", err, o)
	}
	out, err = pull("only the new key trusted: the new key's base", next.Public())
	if err != nil {
		t.Fatalf("pull with the new key trusted: %v\n%s", err, out)
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Record.Pulled.Signer != next.Public() {
		t.Fatalf("pulled %+v (%v), want a base signed by the new key", got.Record, err)
	}
	// The old key's base, once gc dropped it here, is refused.
	b.must(t, "gc")
	if bs := b.bases(t); len(bs) != 1 {
		t.Fatalf("gc left %v, want the new key's base alone", bs)
	}
	if _, stderr, err := b.ferry(b.repo, nil, "base", "--pull", "--rev", "HEAD~1"); err == nil || !strings.Contains(stderr, "is not in [share] trusted-keys") {
		t.Fatalf("the old key's base with only the new key trusted: %v\n%s", err, stderr)
	}
}

// The keys `ferry key` prints are the keys ferry.toml and FERRY_TRUSTED_KEYS
// take, and what they refuse is refused both ways.
func TestTrustedKeysSetting(t *testing.T) {
	s, _, err := share.EnsureSigner(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(s.Path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file %s: %v, %v; want mode 0600", s.Path, fi, err)
	}
	if d, err := os.Stat(filepath.Dir(s.Path)); err != nil || d.Mode().Perm() != 0o700 {
		t.Fatalf("the keys dir: %v, %v; want mode 0700", d, err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, config.FileName), []byte("[share]\ntrusted-keys = [\""+s.Public()+"\"]\n"), 0o644)
	env := testenv.NewEnv(dir, dir)
	got, err := config.Load(dir, env)
	if err != nil || len(got.TrustedKeys) != 1 || got.TrustedKeys[0] != s.Public() {
		t.Fatalf("config: %v, %v", got, err)
	}
	for _, bad := range []string{strings.TrimSuffix(s.Public(), s.Public()[len(s.Public())-2:]), "ssh-ed25519 AAAA", share.KeyPrefix} {
		if _, err := share.ParsePublicKey(bad); err == nil {
			t.Errorf("share accepts %q", bad)
		}
		benv := testenv.NewEnv(dir, dir)
		benv.Set("FERRY_TRUSTED_KEYS", bad)
		if _, err := config.Load(t.TempDir(), benv); err == nil {
			t.Errorf("config accepts %q", bad)
		}
	}
	os.Chmod(s.Path, 0o644)
	if _, err := share.LoadSigner(filepath.Dir(filepath.Dir(s.Path))); err == nil || !strings.Contains(err.Error(), "can be read by others") {
		t.Errorf("a key others can read: %v", err)
	}
}
