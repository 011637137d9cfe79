package hook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// A settings file is edited as a tree that remembers its own bytes: a value
// nobody changed is written back exactly as it was read, and a changed
// object or array keeps the whitespace around each member it already had.
// Only what is new gets fresh layout, indented like its neighbours. So
// installing and then uninstalling Ferry's hooks gives back the file byte
// for byte, whatever its key order and layout.

// jvalue is one JSON value of a document.
type jvalue struct {
	kind byte   // '{' object, '[' array, 0 anything else
	raw  []byte // the value's bytes as read; nil for a value made here
	// An object's members (keys set) or an array's elements.
	members []*jmember
	tail    []byte // whitespace between the last member and the closing bracket
	dirty   bool   // changed since read: written from members, not raw
}

// jmember is one member of an object (key set) or element of an array.
type jmember struct {
	lead  []byte // whitespace before it (after '{', '[' or ',')
	key   []byte // the key as written, quotes and escapes included; nil in an array
	name  string // the key, decoded
	colon []byte // what separates key and value, e.g. ": "
	val   *jvalue
	trail []byte // whitespace between the value and the comma after it
}

// jdoc is a whole file: the top-level value and what surrounds it, and
// the layout new members get.
type jdoc struct {
	before, after []byte
	root          *jvalue
	layout        layout
}

// parseDoc reads a JSON document. An empty (or blank) file is an empty
// object.
func parseDoc(data []byte) (*jdoc, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		d := &jdoc{root: &jvalue{kind: '{', dirty: true}, after: []byte("\n")}
		d.layout = d.style()
		return d, nil
	}
	if !json.Valid(data) {
		// Let encoding/json say where.
		var v any
		err := json.Unmarshal(data, &v)
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	p := &jparser{data: data}
	d := &jdoc{before: p.space()}
	root, err := p.value()
	if err != nil {
		return nil, err
	}
	d.root = root
	d.after = data[p.pos:]
	d.layout = d.style()
	return d, nil
}

// bytes writes the document.
func (d *jdoc) bytes() []byte {
	var b bytes.Buffer
	b.Write(d.before)
	d.root.write(&b, 0, d.layout)
	b.Write(d.after)
	return b.Bytes()
}

// layout is how new members are written: the indentation of one level
// ("" for a document written on one line) and the key separator.
type layout struct {
	indent  string
	colon   string
	oneLine bool
}

// style reads the layout of the document as read from its top-level
// object: the indentation before its first member and the separator after
// that key. A new or empty document gets two spaces, as Claude Code writes
// its settings.
func (d *jdoc) style() layout {
	st := layout{indent: "  ", colon: ": "}
	if d.root == nil || d.root.kind != '{' || len(d.root.members) == 0 {
		return st
	}
	first := d.root.members[0]
	if i := bytes.LastIndexByte(first.lead, '\n'); i >= 0 {
		st.indent = string(first.lead[i+1:])
		if st.indent == "" {
			st.indent = "  "
		}
	} else {
		st.oneLine = true
		st.indent = ""
	}
	if first.colon != nil {
		st.colon = string(first.colon)
	}
	return st
}

// changed reports whether v or anything in it changed since it was read.
func (v *jvalue) changed() bool {
	if v.dirty || v.raw == nil {
		return true
	}
	for _, m := range v.members {
		if m.val.changed() {
			return true
		}
	}
	return false
}

func (v *jvalue) write(b *bytes.Buffer, depth int, st layout) {
	if v.kind == 0 || !v.changed() {
		b.Write(v.raw)
		return
	}
	open, close := byte('{'), byte('}')
	if v.kind == '[' {
		open, close = '[', ']'
	}
	b.WriteByte(open)
	if len(v.members) == 0 {
		b.WriteByte(close)
		return
	}
	for i, m := range v.members {
		if i > 0 {
			b.WriteByte(',')
		}
		if m.lead != nil {
			b.Write(m.lead)
		} else if !st.oneLine {
			b.WriteString("\n" + strings.Repeat(st.indent, depth+1))
		}
		if v.kind == '{' {
			b.Write(m.key)
			if m.colon != nil {
				b.Write(m.colon)
			} else {
				b.WriteString(st.colon)
			}
		}
		m.val.write(b, depth+1, st)
		if i < len(v.members)-1 {
			b.Write(m.trail)
		}
	}
	if v.tail != nil {
		b.Write(v.tail)
	} else if !st.oneLine {
		b.WriteString("\n" + strings.Repeat(st.indent, depth))
	}
	b.WriteByte(close)
}

// get returns the value of an object's member name (the last one, as
// JSON.parse reads duplicates), or nil.
func (v *jvalue) get(name string) *jvalue {
	if v == nil || v.kind != '{' {
		return nil
	}
	for i := len(v.members) - 1; i >= 0; i-- {
		if v.members[i].name == name {
			return v.members[i].val
		}
	}
	return nil
}

// add adds member name with value val at the end of an object, taking the
// whitespace of its last member so it lines up with its neighbours.
func (v *jvalue) add(name string, val *jvalue) {
	key, _ := json.Marshal(name)
	m := &jmember{key: key, name: name, val: val}
	v.appendMember(m)
}

// push appends an element to an array.
func (v *jvalue) push(val *jvalue) { v.appendMember(&jmember{val: val}) }

func (v *jvalue) appendMember(m *jmember) {
	if n := len(v.members); n > 0 {
		last := v.members[n-1]
		m.lead, m.colon = last.lead, last.colon
	} else {
		// An empty container written as "{}" or "{ }": the new member and
		// the closing bracket get fresh layout.
		v.tail = nil
	}
	v.members = append(v.members, m)
	v.dirty = true
}

// remove deletes member i. Removing the first member gives its whitespace
// to the one that follows, so the layout stays as it was.
func (v *jvalue) remove(i int) {
	if i == 0 && len(v.members) > 1 {
		v.members[1].lead = v.members[0].lead
	}
	v.members = append(v.members[:i], v.members[i+1:]...)
	v.dirty = true
	if len(v.members) == 0 {
		v.tail = nil
	}
}

// str returns a string value, or "" and false.
func (v *jvalue) str() (string, bool) {
	if v == nil || v.kind != 0 || len(v.raw) == 0 || v.raw[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(v.raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// setRaw replaces a scalar's bytes.
func (v *jvalue) setRaw(raw []byte) {
	v.raw = raw
	v.dirty = true
}

// scalar makes a value from JSON bytes of a scalar.
func scalar(raw []byte) *jvalue { return &jvalue{raw: raw} }

// object makes a new object of the keys and values given in turn (a value
// is a *jvalue, or a string or number). New values have no bytes of their
// own and are laid out like the document.
func object(kv ...any) *jvalue {
	o := &jvalue{kind: '{', dirty: true}
	for i := 0; i+1 < len(kv); i += 2 {
		name := kv[i].(string)
		key, _ := json.Marshal(name)
		o.members = append(o.members, &jmember{key: key, name: name, val: toValue(kv[i+1])})
	}
	return o
}

func array(elems ...*jvalue) *jvalue {
	a := &jvalue{kind: '[', dirty: true}
	for _, e := range elems {
		a.members = append(a.members, &jmember{val: e})
	}
	return a
}

func toValue(x any) *jvalue {
	if v, ok := x.(*jvalue); ok {
		return v
	}
	raw, err := json.Marshal(x)
	if err != nil {
		panic(err) // only strings and numbers are passed
	}
	return scalar(raw)
}

// jparser reads valid JSON (json.Valid has checked it), keeping offsets.
type jparser struct {
	data []byte
	pos  int
}

func (p *jparser) space() []byte {
	start := p.pos
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
			continue
		}
		break
	}
	return p.data[start:p.pos]
}

func (p *jparser) value() (*jvalue, error) {
	if p.pos >= len(p.data) {
		return nil, fmt.Errorf("unexpected end of JSON")
	}
	start := p.pos
	switch c := p.data[p.pos]; c {
	case '{', '[':
		v := &jvalue{kind: c}
		p.pos++
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		lead := p.space()
		for p.data[p.pos] != closing {
			m := &jmember{lead: lead}
			if c == '{' {
				ks := p.pos
				if err := p.skipString(); err != nil {
					return nil, err
				}
				m.key = p.data[ks:p.pos]
				if err := json.Unmarshal(m.key, &m.name); err != nil {
					return nil, err
				}
				cs := p.pos
				p.space()
				p.pos++ // ':'
				p.space()
				m.colon = p.data[cs:p.pos]
			}
			val, err := p.value()
			if err != nil {
				return nil, err
			}
			m.val = val
			v.members = append(v.members, m)
			ws := p.space()
			if p.data[p.pos] == ',' {
				m.trail = ws
				p.pos++
				lead = p.space()
				continue
			}
			lead = ws
		}
		// Whitespace before the closing bracket: the container's tail (for
		// an empty container, all it holds).
		v.tail = lead
		p.pos++
		v.raw = p.data[start:p.pos]
		return v, nil
	case '"':
		if err := p.skipString(); err != nil {
			return nil, err
		}
	default:
		for p.pos < len(p.data) && !strings.ContainsRune(" \t\r\n,]}", rune(p.data[p.pos])) {
			p.pos++
		}
	}
	return &jvalue{raw: p.data[start:p.pos]}, nil
}

func (p *jparser) skipString() error {
	p.pos++ // opening quote
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case '\\':
			p.pos += 2
			continue
		case '"':
			p.pos++
			return nil
		}
		p.pos++
	}
	return fmt.Errorf("unterminated string")
}
