package relocate

import (
	"bytes"
	"io"
	"path"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/store"
)

// A needle is the longest suffix of a root made only of bytes that no
// escaping rewrites ([A-Za-z0-9._/-]), so that every spelling of a path
// below the root (Debug, JSON, Make, percent encoded) contains it.
type needle struct {
	text  []byte
	store bool // a suffix of the store dir; else of the git dir (always a checkout)
}

// minNeedle is the shortest needle Compute trusts: shorter, and the plan
// empties the fork (the architecture's 8-byte-suffix rule).
const minNeedle = 8

// plain reports whether c is a byte no escaping rewrites.
func plain(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '/' || c == '-'
}

// plainSuffix returns the longest suffix of p made of plain bytes.
func plainSuffix(p string) string {
	i := len(p)
	for i > 0 && plain(p[i-1]) {
		i--
	}
	return p[i:]
}

// needles returns the needles of roots (each root as given and, when it
// differs, canonical: Cargo records some paths canonicalized), or why none
// can be trusted.
func needles(roots Roots) ([]needle, string) {
	var out []needle
	add := func(root string, isStore bool) string {
		spellings := []string{filepath.Clean(root)}
		if c, err := filepath.EvalSymlinks(root); err == nil && c != spellings[0] {
			spellings = append(spellings, c)
		}
		for _, s := range spellings {
			n := plainSuffix(strings.TrimRight(s, "/"))
			if len(n) < minNeedle {
				return "the path " + s + " has no plain suffix of " + "8 bytes" + " to search for"
			}
			out = append(out, needle{text: []byte(n), store: isStore})
		}
		return ""
	}
	if roots.Store == "" {
		return nil, "no store dir given"
	}
	if why := add(roots.Store, true); why != "" {
		return nil, why
	}
	if roots.GitDir != "" {
		if why := add(roots.GitDir, false); why != "" {
			return nil, why
		}
	}
	return out, ""
}

// restMax bounds what Compute reads after a needle to tell where a path
// leads (a checkout, a target dir, an OUT_DIR in it).
const restMax = 4096

// A hit is one occurrence of a needle: the plain bytes after it tell
// where the recorded path leads.
type hit struct {
	n    *needle
	rest string
}

// findHits calls visit for each needle occurrence in data whose start is
// before limit; a needle followed by a name byte (the root's name going
// on) is another path, not a hit.
func findHits(data []byte, limit int, ns []needle, visit func(hit)) {
	for i := range ns {
		n := &ns[i]
		for off := 0; off < limit; {
			j := bytes.Index(data[off:], n.text)
			if j < 0 || off+j >= limit {
				break
			}
			p := off + j
			off = p + 1
			end := p + len(n.text)
			if end < len(data) && plain(data[end]) && data[end] != '/' {
				continue
			}
			k := end
			for k < len(data) && k-end < restMax && plain(data[k]) {
				k++
			}
			visit(hit{n: n, rest: string(data[end:k])})
		}
	}
}

// hitsIn returns the hits in s.
func hitsIn(s string, ns []needle) []hit {
	var out []hit
	findHits([]byte(s), len(s), ns, func(h hit) { out = append(out, h) })
	return out
}

// chunk is how much of a file a scan holds at once: a library of gigabytes
// in an OUT_DIR costs time, not memory.
const chunk = 1 << 20

// scanner reads files a chunk at a time, keeping enough of the previous
// chunk that a needle (and what follows it) spanning the boundary is seen
// whole.
type scanner struct {
	buf   []byte
	chunk int
}

func newScanner() *scanner { return &scanner{chunk: chunk} }

// chunks calls f on r a chunk at a time: data holds the chunk after the
// last keep bytes of the one before, and f reports what starts before
// limit (the rest is seen again, whole, with the next chunk). It stops
// early when f returns false.
func (s *scanner) chunks(r io.Reader, keep int, f func(data []byte, limit int) bool) error {
	if len(s.buf) < s.chunk+keep {
		s.buf = make([]byte, s.chunk+keep)
	}
	carry := 0
	for {
		n, err := io.ReadFull(r, s.buf[carry:carry+s.chunk])
		data := s.buf[:carry+n]
		eof := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !eof {
			return err
		}
		limit := len(data)
		if !eof {
			limit = max(0, len(data)-keep)
		}
		if !f(data, limit) || eof {
			return nil
		}
		carry = copy(s.buf, data[limit:])
	}
}

// hits calls visit for every needle occurrence in r, until it returns false.
func (s *scanner) hits(r io.Reader, ns []needle, visit func(hit) bool) error {
	keep := restMax
	for _, n := range ns {
		keep = max(keep, len(n.text)+restMax)
	}
	return s.chunks(r, keep, func(data []byte, limit int) bool {
		stop := false
		findHits(data, limit, ns, func(h hit) {
			if !stop && !visit(h) {
				stop = true
			}
		})
		return !stop
	})
}

// names returns the first of names found in r, or "". Names sharing
// their first three bytes are looked for in one pass (the path variables
// are three: CARGO_…, OUT_DIR, PWD), which is most of R7's cost on a
// proc macro's library of megabytes.
func (s *scanner) names(r io.Reader, names []string) (string, error) {
	keep := 0
	anchors := map[string][]string{}
	var order []string
	for _, n := range names {
		keep = max(keep, len(n))
		a := n[:min(3, len(n))]
		if anchors[a] == nil {
			order = append(order, a)
		}
		anchors[a] = append(anchors[a], n)
	}
	found := ""
	err := s.chunks(r, keep, func(data []byte, limit int) bool {
		for _, a := range order {
			for off := 0; off < limit; {
				i := bytes.Index(data[off:], []byte(a))
				if i < 0 || off+i >= limit {
					break
				}
				for _, n := range anchors[a] {
					if bytes.HasPrefix(data[off+i:], []byte(n)) {
						found = n
						return false
					}
				}
				off += i + 1
			}
		}
		return true
	})
	return found, err
}

// A place is where a recorded path leads.
type place struct {
	target bool   // into a target dir; else a checkout (or the git dir)
	root   string // the target dir, relative to the store dir
	inner  string // the path inside it
}

// where tells where h leads. Anything under the store that is not a
// target dir counts as a checkout: an old path, whatever it is.
func where(h hit) place {
	if !h.n.store {
		return place{}
	}
	rel := strings.TrimPrefix(h.rest, "/")
	if rel == "" {
		return place{}
	}
	rel = path.Clean(rel)
	root, inner, ok := store.RecordedTarget(rel)
	if !ok {
		return place{}
	}
	return place{target: true, root: root, inner: inner}
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return dir != "" && (p == dir || strings.HasPrefix(p, dir+"/"))
}
