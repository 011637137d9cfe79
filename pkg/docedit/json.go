package docedit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Value is one JSON value of a document.
type Value struct {
	kind byte   // '{' object, '[' array, 0 anything else
	raw  []byte // the value's bytes as read; nil for a value made here
	// An object's members (keys set) or an array's elements.
	members []*member
	tail    []byte // whitespace between the last member and the closing bracket
	dirty   bool   // changed since read: written from members, not raw
}

// member is one member of an object (key set) or element of an array.
type member struct {
	lead  []byte // whitespace before it (after '{', '[' or ',')
	key   []byte // the key as written, quotes and escapes included; nil in an array
	name  string // the key, decoded
	colon []byte // what separates key and value, e.g. ": "
	val   *Value
	trail []byte // whitespace between the value and the comma after it
}

// Doc is a whole file: the top-level value and what surrounds it, and
// the layout new members get.
type Doc struct {
	before, after []byte
	root          *Value
	layout        layout
}

// ParseJSON reads a JSON document. An empty (or blank) file is an empty
// object.
func ParseJSON(data []byte) (*Doc, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		d := &Doc{root: &Value{kind: '{', dirty: true}, after: []byte("\n")}
		d.layout = d.style()
		return d, nil
	}
	if !json.Valid(data) {
		// Let encoding/json say where.
		var v any
		err := json.Unmarshal(data, &v)
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	p := &parser{data: data}
	d := &Doc{before: p.space()}
	root, err := p.value()
	if err != nil {
		return nil, err
	}
	d.root = root
	d.after = data[p.pos:]
	d.layout = d.style()
	return d, nil
}

// Bytes writes the document: every byte as read, but for what changed.
func (d *Doc) Bytes() []byte {
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
func (d *Doc) style() layout {
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

// IsObject reports whether v is an object.
func (v *Value) IsObject() bool { return v != nil && v.kind == '{' }

// IsArray reports whether v is an array.
func (v *Value) IsArray() bool { return v != nil && v.kind == '[' }

// IsString reports whether v is a string.
func (v *Value) IsString() bool {
	_, ok := v.Str()
	return ok
}

// Len is the number of an object's members or an array's elements.
func (v *Value) Len() int {
	if v == nil {
		return 0
	}
	return len(v.members)
}

// At is the value of member (or element) i.
func (v *Value) At(i int) *Value { return v.members[i].val }

// NameAt is the name of an object's member i.
func (v *Value) NameAt(i int) string { return v.members[i].name }

// Root is the document's top-level value.
func (d *Doc) Root() *Value { return d.root }

// Changed reports whether v or anything in it changed since it was read.
func (v *Value) Changed() bool {
	if v.dirty || v.raw == nil {
		return true
	}
	for _, m := range v.members {
		if m.val.Changed() {
			return true
		}
	}
	return false
}

func (v *Value) write(b *bytes.Buffer, depth int, st layout) {
	if v.kind == 0 || !v.Changed() {
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

// Get returns the value of an object's member name (the last one, as
// JSON.parse reads duplicates), or nil.
func (v *Value) Get(name string) *Value {
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

// Add adds member name with value val at the end of an object, taking the
// whitespace of its last member so it lines up with its neighbours.
func (v *Value) Add(name string, val *Value) {
	key, _ := json.Marshal(name)
	m := &member{key: key, name: name, val: val}
	v.appendMember(m)
}

// Push appends an element to an array.
func (v *Value) Push(val *Value) { v.appendMember(&member{val: val}) }

func (v *Value) appendMember(m *member) {
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

// Remove deletes member i. Removing the first member gives its whitespace
// to the one that follows, so the layout stays as it was.
func (v *Value) Remove(i int) {
	if i == 0 && len(v.members) > 1 {
		v.members[1].lead = v.members[0].lead
	}
	v.members = append(v.members[:i], v.members[i+1:]...)
	v.dirty = true
	if len(v.members) == 0 {
		v.tail = nil
	}
}

// RemoveKey deletes every member of an object named name.
func (v *Value) RemoveKey(name string) {
	for i := len(v.members) - 1; i >= 0; i-- {
		if v.members[i].name == name {
			v.Remove(i)
		}
	}
}

// Str returns a string value, or "" and false.
func (v *Value) Str() (string, bool) {
	if v == nil || v.kind != 0 || len(v.raw) == 0 || v.raw[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(v.raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// SetString makes a scalar the string str.
func (v *Value) SetString(str string) {
	v.raw = stringJSON(str)
	v.dirty = true
}

// String makes a string value. It is written as JSON, without escaping
// <, > and & (a command line reads better as it is).
func String(str string) *Value { return &Value{raw: stringJSON(str)} }

func stringJSON(str string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(str) // a string always encodes
	return bytes.TrimRight(b.Bytes(), "\n")
}

// Object makes a new object of the keys and values given in turn (a value
// is a *Value, or a string or number). New values have no bytes of their
// own and are laid out like the document.
func Object(kv ...any) *Value {
	o := &Value{kind: '{', dirty: true}
	for i := 0; i+1 < len(kv); i += 2 {
		name := kv[i].(string)
		key, _ := json.Marshal(name)
		o.members = append(o.members, &member{key: key, name: name, val: toValue(kv[i+1])})
	}
	return o
}

// Array makes a new array of elems.
func Array(elems ...*Value) *Value {
	a := &Value{kind: '[', dirty: true}
	for _, e := range elems {
		a.members = append(a.members, &member{val: e})
	}
	return a
}

func toValue(x any) *Value {
	switch x := x.(type) {
	case *Value:
		return x
	case string:
		return String(x)
	}
	raw, err := json.Marshal(x)
	if err != nil {
		panic(err) // only strings and numbers are passed
	}
	return &Value{raw: raw}
}

// parser reads valid JSON (json.Valid has checked it), keeping offsets.
type parser struct {
	data []byte
	pos  int
}

func (p *parser) space() []byte {
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

func (p *parser) value() (*Value, error) {
	if p.pos >= len(p.data) {
		return nil, fmt.Errorf("unexpected end of JSON")
	}
	start := p.pos
	switch c := p.data[p.pos]; c {
	case '{', '[':
		v := &Value{kind: c}
		p.pos++
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		lead := p.space()
		for p.data[p.pos] != closing {
			m := &member{lead: lead}
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
	return &Value{raw: p.data[start:p.pos]}, nil
}

func (p *parser) skipString() error {
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
