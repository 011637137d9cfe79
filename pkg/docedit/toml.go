package docedit

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
)

// A TOML file is edited as text: only the one string value that changes
// is rewritten (as a multi-line literal string), a missing key goes right
// under its table's header, and a missing table at the end of the file, so
// every other byte stays as it was. The result is parsed again and the
// value read back before it is used: what this small editor cannot place
// exactly is refused, never written.

var (
	tomlHeader = regexp.MustCompile(`^[ \t]*\[([^\[\]]+)\][ \t]*(#.*)?$`)
	tomlArrays = regexp.MustCompile(`^[ \t]*\[\[`)
)

// tomlSpan is where a table's key sits in a document: the bytes of its
// value (start, end), or, when the key is missing, where to insert it.
type tomlSpan struct {
	found      bool
	start, end int // the value's bytes
	insert     int // where a missing key's line goes (after the header)
	table      bool
}

// normTable is a table name without spaces around its dots or quotes on
// plain parts: "setup . linux" and setup.linux are one table.
func normTable(s string) string {
	parts := strings.Split(s, ".")
	for i, p := range parts {
		parts[i] = strings.Trim(strings.TrimSpace(p), `"'`)
	}
	return strings.Join(parts, ".")
}

// findTOML locates key in table of doc.
func findTOML(doc []byte, table, key string) (tomlSpan, error) {
	var sp tomlSpan
	off := 0
	inTable := false
	keyRe := regexp.MustCompile(`^[ \t]*` + regexp.QuoteMeta(key) + `[ \t]*=[ \t]*`)
	skipUntil := -1
	for off < len(doc) {
		end := bytes.IndexByte(doc[off:], '\n')
		next := len(doc)
		if end >= 0 {
			next = off + end + 1
		}
		line := strings.TrimRight(string(doc[off:next]), "\r\n")
		if off < skipUntil {
			off = next
			continue
		}
		if m := tomlHeader.FindStringSubmatch(line); m != nil && !tomlArrays.MatchString(line) {
			inTable = normTable(m[1]) == table
			if inTable {
				sp.table, sp.insert = true, next
			}
		} else if tomlArrays.MatchString(line) {
			inTable = false
		} else if inTable {
			if loc := keyRe.FindStringIndex(line); loc != nil {
				start := off + loc[1]
				vend, err := tomlValueEnd(doc, start)
				if err != nil {
					return sp, err
				}
				sp.found, sp.start, sp.end = true, start, vend
				return sp, nil
			}
		}
		// A multi-line string opened on this line hides what follows.
		if i := strings.Index(line, "="); i >= 0 {
			v := strings.TrimSpace(line[i+1:])
			if strings.HasPrefix(v, "'''") || strings.HasPrefix(v, `"""`) {
				if vend, err := tomlValueEnd(doc, off+strings.Index(line, v[:3])); err == nil && vend > next {
					skipUntil = vend
				}
			}
		}
		off = next
	}
	return sp, nil
}

// tomlValueEnd is the end of the string value starting at start.
func tomlValueEnd(doc []byte, start int) (int, error) {
	rest := string(doc[start:])
	for _, q := range []string{"'''", `"""`} {
		if strings.HasPrefix(rest, q) {
			i := 3
			for {
				j := strings.Index(rest[i:], q)
				if j < 0 {
					return 0, fmt.Errorf("unterminated %s string", q)
				}
				j += i
				if q == `"""` && escaped(rest, j) {
					i = j + 1
					continue
				}
				// Up to two more quotes belong to the string.
				k := j + 3
				for n := 0; n < 2 && k < len(rest) && rest[k] == q[0]; n++ {
					k++
				}
				return start + k, nil
			}
		}
	}
	if strings.HasPrefix(rest, "'") {
		j := strings.IndexAny(rest[1:], "'\n")
		if j < 0 || rest[1+j] != '\'' {
			return 0, fmt.Errorf("unterminated string")
		}
		return start + j + 2, nil
	}
	if strings.HasPrefix(rest, `"`) {
		for i := 1; i < len(rest); i++ {
			switch rest[i] {
			case '\\':
				i++
			case '"':
				return start + i + 1, nil
			case '\n':
				return 0, fmt.Errorf("unterminated string")
			}
		}
		return 0, fmt.Errorf("unterminated string")
	}
	return 0, fmt.Errorf("not a string")
}

func escaped(s string, i int) bool {
	n := 0
	for i > 0 && s[i-1] == '\\' {
		n++
		i--
	}
	return n%2 == 1
}

// TOMLString reads table.key of doc as a string ("", false when absent).
func TOMLString(doc []byte, table, key string) (string, bool, error) {
	var m map[string]any
	if err := toml.Unmarshal(doc, &m); err != nil {
		return "", false, err
	}
	var cur any = m
	for _, p := range strings.Split(table, ".") {
		t, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = t[p]
	}
	t, ok := cur.(map[string]any)
	if !ok {
		return "", false, nil
	}
	v, ok := t[key]
	if !ok {
		return "", false, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", false, fmt.Errorf("%s.%s is not a string", table, key)
	}
	return s, true, nil
}

// TOMLBasic is s as a one-line TOML basic string, for a value that is a
// name, not a script.
func TOMLBasic(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	escapeBasic(&b, s, `\n`)
	b.WriteByte('"')
	return b.String()
}

// escapeBasic writes s escaped for a TOML basic string, a newline as nl
// (itself in a multi-line string, escaped in a one-line one).
func escapeBasic(b *strings.Builder, s, nl string) {
	for _, r := range s {
		switch r {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\n':
			b.WriteString(nl)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
}

// tomlRaw is s as a TOML string: a multi-line literal when it can be one.
func tomlRaw(s string) string {
	if s == "" {
		return `""`
	}
	if !strings.Contains(s, "'''") && !strings.ContainsAny(s, "\r\x00\x7f") && !strings.HasSuffix(s, "'") {
		return "'''\n" + s + "'''"
	}
	var b strings.Builder
	b.WriteString(`"""` + "\n")
	escapeBasic(&b, s, "\n")
	b.WriteString(`"""`)
	return b.String()
}

// SetTOMLString sets table.key of doc to value, creating the key or the
// table when missing, and checks the result reads back.
func SetTOMLString(doc []byte, table, key, value string) ([]byte, error) {
	sp, err := findTOML(doc, table, key)
	if err != nil {
		return nil, fmt.Errorf("[%s] %s: %w", table, key, err)
	}
	raw := tomlRaw(value)
	var out []byte
	switch {
	case sp.found:
		out = append(append(append([]byte{}, doc[:sp.start]...), raw...), doc[sp.end:]...)
	case sp.table:
		line := key + " = " + raw + "\n"
		out = append(append(append([]byte{}, doc[:sp.insert]...), line...), doc[sp.insert:]...)
	default:
		out = append([]byte{}, doc...)
		if len(out) > 0 && !bytes.HasSuffix(out, []byte("\n")) {
			out = append(out, '\n')
		}
		if len(out) > 0 {
			out = append(out, '\n')
		}
		out = append(out, "["+table+"]\n"+key+" = "+raw+"\n"...)
	}
	got, ok, err := TOMLString(out, table, key)
	if err != nil || !ok || got != value {
		return nil, fmt.Errorf("[%s] %s could not be set in place (read back %q, %v)", table, key, got, err)
	}
	return out, nil
}
