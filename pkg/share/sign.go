package share

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/store"
)

// Signing. A runner installs what the bus serves and then runs it, so
// whoever can put an object in the bucket could run code on every runner.
// The bus's credentials are one gate; signatures are the other. A
// publishing host signs each base's metadata with its ed25519 key (the
// metadata holds the object's SHA-256 and its delta's, which a pull checks
// against the bytes it reads), and a runner installs only a base whose
// metadata carries a valid signature by a key it trusts ([share]
// trusted-keys, FERRY_TRUSTED_KEYS). An unsigned object, an unknown signer
// and a signature over other bytes are refused before anything is
// installed.
//
// The key lives in the store parent's keys/ (store.KeysDir), 0600 in a 0700
// directory, which no sandbox shows (store.Secrets). `ferry key` makes it
// and prints the public key; publishing makes it too when there is none.
// A public key is written "ferry-ed25519:" and the key's 32 bytes in
// unpadded base64url. Rotating is trusting the new key beside the old one
// on the runners, switching the publisher's key, republishing, and then
// dropping the old key.

const (
	// sigKey and signerKey are the object metadata keys of the signature
	// (unpadded base64url) and the signer's public key.
	sigKey    = "ferry-signature"
	signerKey = "ferry-signer"
	// KeyPrefix begins a public key as Ferry writes it.
	KeyPrefix = "ferry-ed25519:"
	// sigContext prefixes what is signed, so that a signature made for
	// anything else never verifies here.
	sigContext = "ferry base metadata, signature version 1\n"
	// keyFile is the private key's name in the keys dir.
	keyFile = "signing.key"
)

// Signer signs the metadata of the bases a host publishes.
type Signer struct {
	key  ed25519.PrivateKey
	Path string // the private key's file
}

// Public is the signer's public key as runners list it.
func (s *Signer) Public() string { return PublicKey(s.key.Public().(ed25519.PublicKey)) }

// PublicKey writes k as Ferry does.
func PublicKey(k ed25519.PublicKey) string {
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(k)
}

// ParsePublicKey reads a public key as Ferry writes it.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	enc, ok := strings.CutPrefix(strings.TrimSpace(s), KeyPrefix)
	if !ok {
		return nil, fmt.Errorf("%q is not a Ferry public key (it begins %s)", s, KeyPrefix)
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%q is not a Ferry public key (%d bytes of unpadded base64url after %s)", s, ed25519.PublicKeySize, KeyPrefix)
	}
	return ed25519.PublicKey(b), nil
}

// KeyPath is the signing key's file under store parent parent.
func KeyPath(parent string) string { return filepath.Join(store.KeysDir(parent), keyFile) }

// LoadSigner reads the signing key under store parent parent; a missing
// key is an error wrapping fs.ErrNotExist.
func LoadSigner(parent string) (*Signer, error) {
	p := KeyPath(parent)
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
		return nil, failure.New(failure.Refused, "chmod 600 "+p+" (and make sure nobody else could have read it; if someone could, make a new key)",
			"the signing key %s can be read by others (mode %v)", p, fi.Mode())
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	s, err := ParseSigner(data)
	if err != nil {
		// A key cannot be made again: what repairs a damaged one is a
		// backup, or a new key the runners are told to trust.
		return nil, failure.Damaged(p, err, "restore it from a backup; or move it aside (`mv "+p+" "+p+".damaged`), run `ferry key` for a new one, "+
			"and list its public key in the runners' [share] trusted-keys")
	}
	s.Path = p
	return s, nil
}

// ParseSigner reads a signing key as Ferry writes it (an ed25519 key in a
// PEM "PRIVATE KEY" block, PKCS #8): the file under keys/, or the same
// bytes kept elsewhere, as a CI secret.
func ParseSigner(data []byte) (*Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("not a PEM private key")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, errors.New("not an ed25519 key")
	}
	return &Signer{key: priv}, nil
}

// EnsureSigner reads the signing key under store parent parent, making one
// when there is none; created says whether it did.
func EnsureSigner(parent string) (s *Signer, created bool, err error) {
	s, err = LoadSigner(parent)
	if !errors.Is(err, fs.ErrNotExist) {
		return s, false, err
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, false, err
	}
	if err := (&Signer{key: priv}).WriteTo(parent); err != nil {
		return nil, false, err
	}
	s, err = LoadSigner(parent)
	return s, err == nil, err
}

// WriteTo writes the signer's key as the signing key under store parent
// parent (0600 in a 0700 keys dir), replacing any: how build hosts that
// publish for one fleet sign with one key, and how a key is rotated.
func (s *Signer) WriteTo(parent string) error {
	dir := store.KeysDir(parent)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(s.key)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(KeyPath(parent), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

// sign adds the signature of md's Meta (as stored, the exact bytes) to md.
func (s *Signer) sign(md map[string]string) {
	md[signerKey] = s.Public()
	md[sigKey] = base64.RawURLEncoding.EncodeToString(ed25519.Sign(s.key, []byte(sigContext+md[metaKey])))
}

// SignatureError is a published base a runner refuses for its signature.
type SignatureError struct {
	ID     string
	Signer string // the key it names, "" when unsigned
	Why    string
}

func (e *SignatureError) Error() string { return fmt.Sprintf("base %s %s", e.ID, e.Why) }

// verifySigned checks that the metadata md of object id carries a valid
// signature, by one of trusted, of its Meta; it returns the signer.
func verifySigned(id string, md map[string]string, trusted []string) (string, error) {
	const hint = "run `ferry key` on the build host that publishes it, and list the key it prints in this host's [share] trusted-keys (or FERRY_TRUSTED_KEYS)"
	refuse := func(signer, why, hint string) error {
		return failure.Wrap(failure.Refused, &SignatureError{ID: id, Signer: signer, Why: why}, hint+"; nothing was installed", "nothing to pull")
	}
	signer, sig := md[signerKey], md[sigKey]
	if signer == "" || sig == "" {
		return "", refuse("", "is not signed (published by a Ferry that does not sign, or its signature was removed)",
			"publish it again with this Ferry on its build host; "+hint)
	}
	if len(trusted) == 0 {
		return "", refuse(signer, "is signed by "+signer+", and this host trusts no key ([share] trusted-keys is empty)", hint)
	}
	known := false
	for _, k := range trusted {
		if strings.TrimSpace(k) == signer {
			known = true
		}
	}
	if !known {
		return "", refuse(signer, "is signed by "+signer+", which is not in [share] trusted-keys",
			"if that key is your build host's (`ferry key` there prints it), add it to [share] trusted-keys; otherwise someone else published this base")
	}
	pub, err := ParsePublicKey(signer)
	if err != nil {
		return "", refuse(signer, "names a signer that is not a key: "+err.Error(), hint)
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !ed25519.Verify(pub, []byte(sigContext+md[metaKey]), raw) {
		return "", refuse(signer, "carries a signature by "+signer+" that does not match its metadata: the metadata (its digest, what it was built with) was changed after it was signed",
			"do not use this object; publish the base again from its build host")
	}
	return signer, nil
}

// HostSigner is the signer of a publishing host whose store parent is
// parent, made when there is none; logf says so, with the public key the
// runners must trust.
func HostSigner(parent string, logf func(format string, args ...any)) (*Signer, error) {
	s, created, err := EnsureSigner(parent)
	if err != nil {
		return nil, fmt.Errorf("the signing key: %w", err)
	}
	if created {
		logf("made the signing key %s; runners install this host's bases only when they trust it: add %s to their [share] trusted-keys (or FERRY_TRUSTED_KEYS)", s.Path, s.Public())
	}
	return s, nil
}
