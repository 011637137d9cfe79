package relocate

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// The formats Compute reads, as Cargo 1.95 writes them
// (src/cargo/core/compiler/fingerprint/{mod,dep_info}.rs and
// custom_build.rs). What does not parse is removed: a new format costs a
// cold build, never a wrong one.

// rustcDepInfo is what a unit's rustc dep-info file (deps/<crate>-<hash>.d)
// records as its inputs: the files of its first rule and the values of the
// environment variables it read (# env-dep:NAME=VALUE). The rule's targets
// are the unit's own outputs, not inputs.
type rustcDepInfo struct {
	files []string
	env   []string // values
}

// parseRustcDepInfo parses a Makefile-style dep-info file as Cargo does:
// the first line with ": " lists the inputs (a backslash ending a word
// escapes the space after it); "# env-dep:" lines name variables with an
// escaped value; "# checksum:" lines name inputs too.
func parseRustcDepInfo(data []byte) (*rustcDepInfo, error) {
	d := &rustcDepInfo{}
	found := false
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		switch {
		case strings.HasPrefix(line, "# env-dep:"):
			_, val, ok := strings.Cut(strings.TrimPrefix(line, "# env-dep:"), "=")
			if !ok {
				continue
			}
			v, err := unescapeEnv(val)
			if err != nil {
				return nil, err
			}
			d.env = append(d.env, v)
		case strings.HasPrefix(line, "# checksum:"):
			parts := strings.SplitN(strings.TrimPrefix(line, "# checksum:"), " ", 3)
			if len(parts) == 3 {
				d.files = append(d.files, parts[2])
			}
		case strings.HasPrefix(line, "#"):
		default:
			i := strings.Index(line, ": ")
			if i < 0 || found {
				continue
			}
			found = true
			words := strings.Fields(line[i+2:])
			for j := 0; j < len(words); j++ {
				w := words[j]
				for strings.HasSuffix(w, `\`) {
					if j+1 >= len(words) {
						return nil, errors.New("dep-info ends in an escape")
					}
					j++
					w = strings.TrimSuffix(w, `\`) + " " + words[j]
				}
				d.files = append(d.files, w)
			}
		}
	}
	return d, nil
}

// unescapeEnv undoes rustc's escaping of env-dep values (\\, \n, \r).
func unescapeEnv(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		i++
		if i >= len(s) {
			return "", errors.New("env-dep value ends in an escape")
		}
		switch s[i] {
		case '\\':
			b.WriteByte('\\')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		default:
			return "", fmt.Errorf("env-dep value has an unknown escape \\%c", s[i])
		}
	}
	return b.String(), nil
}

// encodedDepInfo is Cargo's own dep-info (dep-<name> in a fingerprint
// dir): the paths are relative to the package or the build dir unless
// absolute, and the environment holds the variables Cargo did not set.
type encodedDepInfo struct {
	paths []string
	env   []string // values
}

// encodedDepInfoVersion is the format Cargo 1.95 writes, after its marker
// (a u32 1 and the invalid path type 0xff).
const encodedDepInfoVersion = 1

func parseEncodedDepInfo(data []byte) (*encodedDepInfo, error) {
	r := &reader{b: data}
	if r.u32() != 1 || r.u8() != 0xff {
		return nil, errors.New("no format marker (a Cargo older or newer than 1.95's)")
	}
	if v := r.u8(); v != encodedDepInfoVersion {
		return nil, fmt.Errorf("format version %d, not %d", v, encodedDepInfoVersion)
	}
	d := &encodedDepInfo{}
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		if ty := r.u8(); ty > 1 {
			return nil, fmt.Errorf("unknown path type %d", ty)
		}
		d.paths = append(d.paths, string(r.bytes()))
		if r.u8() != 0 {
			r.u64()
			r.bytes()
		}
	}
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		r.bytes() // the name
		switch r.u8() {
		case 0:
		case 1:
			d.env = append(d.env, string(r.bytes()))
		default:
			return nil, errors.New("unknown value tag")
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%d bytes after the end", len(r.b))
	}
	return d, nil
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil || n > len(r.b) || n < 0 {
		if r.err == nil {
			r.err = errors.New("truncated")
		}
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u8() byte {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *reader) bytes() []byte { return r.take(int(r.u32())) }

// fingerprintDeps returns the fingerprints a unit's <name>.json names as
// its dependencies, spelled as their hash files spell them (the u64's
// little-endian bytes in hex).
func fingerprintDeps(data []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var fp struct {
		Deps [][]json.RawMessage `json:"deps"`
	}
	if err := dec.Decode(&fp); err != nil {
		return nil, err
	}
	var out []string
	for _, d := range fp.Deps {
		if len(d) != 4 {
			return nil, fmt.Errorf("a dependency of %d fields, not 4", len(d))
		}
		v, err := strconv.ParseUint(string(d[3]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("a dependency's fingerprint: %w", err)
		}
		out = append(out, hashHex(v))
	}
	return out, nil
}

// hashHex spells a fingerprint as Cargo's hash files do.
func hashHex(v uint64) string { return fmt.Sprintf("%016x", bits.ReverseBytes64(v)) }

// directive is one instruction of a build script's output file.
type directive struct {
	key, value string
}

// parseDirectives returns the cargo: and cargo:: lines of a build
// script's output; Cargo ignores every other line.
func parseDirectives(data []byte) []directive {
	var out []directive
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		var rest string
		switch {
		case strings.HasPrefix(line, "cargo::"):
			rest = strings.TrimPrefix(line, "cargo::")
		case strings.HasPrefix(line, "cargo:"):
			rest = strings.TrimPrefix(line, "cargo:")
		default:
			continue
		}
		k, v, _ := strings.Cut(rest, "=")
		out = append(out, directive{key: strings.TrimSpace(k), value: v})
	}
	return out
}

// linkArg reports whether a directive's value goes to the linker as an
// argument, which a binary keeps (rustc-link-arg and its per-target
// forms, rustc-cdylib-link-arg): Cargo rewrites the old OUT_DIR in it,
// but what it linked before does not change.
func linkArg(key string) bool {
	return strings.HasPrefix(key, "rustc-link-arg") || key == "rustc-cdylib-link-arg"
}

// RustcDepInfoFiles returns the inputs a rustc dep-info file
// (deps/<crate>-<hash>.d) names, as rustc read them: relative to the
// directory rustc ran in, or absolute, and through any symlink on the way
// (Cargo's own dep-info records canonical paths instead). Freshness's
// link_rebuilds reads it.
func RustcDepInfoFiles(data []byte) ([]string, error) {
	d, err := parseRustcDepInfo(data)
	if err != nil {
		return nil, err
	}
	return d.files, nil
}
