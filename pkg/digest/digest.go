// Package digest is SHA-256 (FIPS 180-4) for the names the per-call
// binaries derive: a store's key, a host directory's key, a recorded
// command's key, a cargo call's digest. Its sums are crypto/sha256's, byte
// for byte (the tests compare them), so the names are the ones every
// earlier Ferry made. It exists because crypto/sha256 links the standard
// library's FIPS module (25 packages, among them AES-GCM and a DRBG with
// package initializers), and the shim runs on every cargo call an agent
// makes. It names things and checks nothing: signatures and content sums
// stay with package crypto.
package digest

import (
	"encoding/binary"
	"math/bits"
)

// Size is the length of a sum in bytes.
const Size = 32

// BlockSize is the length of the blocks the sum is computed over.
const BlockSize = 64

// Sum256 returns the SHA-256 of b.
func Sum256(b []byte) [Size]byte {
	d := New()
	d.Write(b)
	var out [Size]byte
	d.Sum(out[:0])
	return out
}

// Digest is a running SHA-256; it implements hash.Hash.
type Digest struct {
	h   [8]uint32
	buf [BlockSize]byte
	nb  int    // bytes in buf
	len uint64 // bytes written
}

// New returns a Digest of nothing yet.
func New() *Digest {
	d := new(Digest)
	d.Reset()
	return d
}

// initial holds the square roots' fractional parts of the first 8 primes.
var initial = [8]uint32{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}

// k holds the cube roots' fractional parts of the first 64 primes.
var k = [64]uint32{
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}

// Reset makes d a digest of nothing.
func (d *Digest) Reset() {
	d.h = initial
	d.nb = 0
	d.len = 0
}

// Size returns Size.
func (d *Digest) Size() int { return Size }

// BlockSize returns BlockSize.
func (d *Digest) BlockSize() int { return BlockSize }

// Write adds p to the digest; it never fails.
func (d *Digest) Write(p []byte) (int, error) {
	n := len(p)
	d.len += uint64(n)
	if d.nb > 0 {
		c := copy(d.buf[d.nb:], p)
		d.nb += c
		p = p[c:]
		if d.nb < BlockSize {
			return n, nil
		}
		d.block(d.buf[:])
		d.nb = 0
	}
	for len(p) >= BlockSize {
		d.block(p[:BlockSize])
		p = p[BlockSize:]
	}
	d.nb = copy(d.buf[:], p)
	return n, nil
}

// Sum appends the digest of what was written to b; d is left as it was.
func (d *Digest) Sum(b []byte) []byte {
	c := *d
	// Padding: a one bit, zeros to 56 bytes mod 64, the length in bits.
	var pad [BlockSize + 8]byte
	pad[0] = 0x80
	n := 56 - int(c.len%BlockSize)
	if n <= 0 {
		n += BlockSize
	}
	bitLen := c.len * 8
	binary.BigEndian.PutUint64(pad[n:], bitLen)
	c.Write(pad[:n+8])
	for _, h := range c.h {
		b = binary.BigEndian.AppendUint32(b, h)
	}
	return b
}

// block runs the compression function over one 64-byte block.
func (d *Digest) block(p []byte) {
	var w [64]uint32
	for i := range 16 {
		w[i] = binary.BigEndian.Uint32(p[4*i:])
	}
	for i := 16; i < 64; i++ {
		s0 := bits.RotateLeft32(w[i-15], -7) ^ bits.RotateLeft32(w[i-15], -18) ^ w[i-15]>>3
		s1 := bits.RotateLeft32(w[i-2], -17) ^ bits.RotateLeft32(w[i-2], -19) ^ w[i-2]>>10
		w[i] = w[i-16] + s0 + w[i-7] + s1
	}
	a, b, c, e, f, g, h := d.h[0], d.h[1], d.h[2], d.h[4], d.h[5], d.h[6], d.h[7]
	dd := d.h[3]
	for i := range 64 {
		s1 := bits.RotateLeft32(e, -6) ^ bits.RotateLeft32(e, -11) ^ bits.RotateLeft32(e, -25)
		ch := e&f ^ ^e&g
		t1 := h + s1 + ch + k[i] + w[i]
		s0 := bits.RotateLeft32(a, -2) ^ bits.RotateLeft32(a, -13) ^ bits.RotateLeft32(a, -22)
		maj := a&b ^ a&c ^ b&c
		t2 := s0 + maj
		h, g, f, e, dd, c, b, a = g, f, e, dd+t1, c, b, a, t1+t2
	}
	d.h[0] += a
	d.h[1] += b
	d.h[2] += c
	d.h[3] += dd
	d.h[4] += e
	d.h[5] += f
	d.h[6] += g
	d.h[7] += h
}
