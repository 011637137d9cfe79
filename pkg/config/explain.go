package config

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// Effective is a key of ferry.toml as Load resolved it: what `ferry
// config` shows.
type Effective struct {
	Key   string `json:"key"`
	Value string `json:"value"` // as ferry.toml writes it; "" when nothing sets it and the default is left to its package
	// From is where the value came from: "default" (the key's shown
	// default), "computed" (Computed says how), the FERRY_* variable, or
	// the file and line that set it.
	From     string `json:"from"`
	Variable string `json:"variable,omitempty"` // the variable that overrides the key
	Computed string `json:"computed,omitempty"`
	Doc      string `json:"doc,omitempty"`
}

// Explain says, for every key in settings' order, what s (which Load or
// LoadCommitted returned) holds and where it came from: data is the
// ferry.toml s.File names as it was read (nil when there was none), env
// the environment it was loaded under.
func Explain(s *Settings, env Env, data []byte) ([]Effective, error) {
	doc := &document{}
	if data != nil {
		var err error
		if doc, err = parseDocument(s.File, data); err != nil {
			return nil, err
		}
	}
	platform := platformName(runtime.GOOS)
	t := doc.effective(platform)
	var out []Effective
	for _, k := range settings {
		e := k.explain(s, &t, env)
		if e.From == fromFile { // the line that set it last
			e.From = s.File
			for _, at := range []string{"platform." + platform + "." + e.Key, e.Key} {
				if st, ok := doc.sites[at]; ok {
					e.From = fmt.Sprintf("%s:%d", s.File, st.line)
					break
				}
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// fromFile is explain's From for a value the file set, which Explain
// words with the file's name and the line.
const fromFile = "file"

// explain is the key's Effective; From is fromFile when the file set it.
func (d def[T]) explain(s *Settings, t *tables, env Env) Effective {
	e := Effective{Key: d.key, Variable: d.env, Doc: d.doc}
	if d.env != "" && env.Getenv(d.env) != "" {
		e.From, e.Value = d.env, env.Getenv(d.env)
		if _, ok := any(new(T)).(*string); ok {
			e.Value = strconv.Quote(e.Value)
		}
		return e
	}
	if v := *d.field(t); v != nil {
		e.Value, e.From = tomlValue(*v), fromFile
		return e
	}
	if d.computed == "" {
		e.Value, e.From = d.example, "default"
		return e
	}
	e.Computed, e.From = d.computed, "computed"
	if d.current != nil {
		e.Value = d.current(s)
	}
	return e
}

// tomlValue writes v as the right-hand side of a ferry.toml line, its
// strings quoted as configuration.md quotes them.
func tomlValue(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case []string:
		return tomlValue(anys(x))
	case []any:
		items := make([]string, len(x))
		for i, item := range x {
			items[i] = tomlValue(item)
		}
		return "[" + strings.Join(items, ", ") + "]"
	}
	b, err := toml.Marshal(struct{ V any }{v})
	if err != nil {
		return fmt.Sprint(v)
	}
	_, val, _ := strings.Cut(strings.TrimSpace(string(b)), " = ")
	return val
}

func anys(vs []string) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}
