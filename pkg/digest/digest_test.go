package digest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"math/rand/v2"
	"testing"
)

var _ hash.Hash = New()

// Every length across three blocks, and the padding's edges (55, 56, 63,
// 64 bytes), sums as crypto/sha256 does.
func TestSumsAsCryptoSHA256(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 3*BlockSize + 2 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if got, want := Sum256(b), sha256.Sum256(b); got != want {
			t.Fatalf("Sum256 of %d bytes = %x, want %x", n, got, want)
		}
	}
	// A known answer, so the comparison above is not of two wrong things.
	const abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	if got := Sum256([]byte("abc")); hex.EncodeToString(got[:]) != abc {
		t.Fatalf("Sum256(abc) = %x, want %s", got, abc)
	}
}

// Writes in pieces of any size sum as one write, Sum leaves the digest as
// it was, and Reset starts again.
func TestWritesInPieces(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 1000)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	want := sha256.Sum256(data)
	for range 200 {
		d := New()
		for p := data; len(p) > 0; {
			n := min(len(p), r.IntN(150))
			d.Write(p[:n])
			p = p[n:]
			if r.IntN(4) == 0 {
				d.Sum(nil) // must not disturb what follows
			}
		}
		if got := d.Sum([]byte("x")); !bytes.Equal(got[1:], want[:]) || got[0] != 'x' {
			t.Fatalf("pieces sum to %x, want %x appended to x", got, want)
		}
		d.Reset()
		d.Write([]byte("abc"))
		if got, want := d.Sum(nil), sha256.Sum256([]byte("abc")); !bytes.Equal(got, want[:]) {
			t.Fatalf("after Reset: %x, want %x", got, want)
		}
	}
}
