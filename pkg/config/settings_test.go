package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Every key of the schema's tables is declared once in settings, and each
// entry's field is the field of its key: a key added to a table without an
// entry (or with another key's field) is never checked, laid over or
// applied. Every variable reads without a panic, whatever its text.
func TestSettingsAreDeclaredOnce(t *testing.T) {
	var leaves []string
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for name, f := range fieldsOf(typ) {
			for f.Kind() == reflect.Pointer {
				f = f.Elem()
			}
			if f.Kind() == reflect.Struct {
				walk(prefix+name+".", f)
				continue
			}
			leaves = append(leaves, prefix+name)
		}
	}
	walk("", reflect.TypeFor[tables]())
	slices.Sort(leaves)
	var declared []string
	for _, s := range settings {
		declared = append(declared, s.name())
	}
	sorted := slices.Sorted(slices.Values(declared))
	if !slices.Equal(sorted, leaves) {
		t.Errorf("the tables' keys are\n  %v\nsettings declares\n  %v", leaves, sorted)
	}
	if c := slices.Compact(slices.Clone(sorted)); len(c) != len(sorted) {
		t.Errorf("a key is declared twice: %v", sorted)
	}

	// Each entry's field: set through the entry, read back by the key.
	for _, s := range settings {
		var tb tables
		s.override(&tb, full(t))
		v := reflect.ValueOf(tb)
		for _, part := range strings.Split(s.name(), ".") {
			v = fieldByKey(t, v, part)
		}
		if v.IsNil() {
			t.Errorf("%s: its entry's field is not the key's", s.name())
		}
	}

	for _, name := range Variables() {
		for _, text := range []string{"x", "1", "-1", "/tmp/x", "true"} {
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("%s=%q: %v", name, text, p)
					}
				}()
				env := newEnv(map[string]string{name: text})
				(&Settings{}).applyEnv(env, &resolver{env: env, cwd: testCwd})
			}()
		}
	}
}

// full is a table with every key set.
func full(t *testing.T) *tables {
	t.Helper()
	tb := &tables{}
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		for i := range v.NumField() {
			f := v.Field(i)
			if f.Kind() == reflect.Struct {
				fill(f)
				continue
			}
			f.Set(reflect.New(f.Type().Elem()))
		}
	}
	fill(reflect.ValueOf(tb).Elem())
	return tb
}

func fieldByKey(t *testing.T, v reflect.Value, key string) reflect.Value {
	t.Helper()
	typ := v.Type()
	for i := range typ.NumField() {
		if name, _, _ := strings.Cut(typ.Field(i).Tag.Get("toml"), ","); name == key {
			return v.Field(i)
		}
	}
	t.Fatalf("no field %q in %s", key, typ)
	return reflect.Value{}
}

// What configuration.md shows for each key (its example) is the key's
// default: a ferry.toml that sets only that key to it loads as no file
// does.
func TestExamplesAreTheDefaults(t *testing.T) {
	env := newEnv(nil)
	none, err := load(writeRepo(t, noFile), env, "linux")
	if err != nil {
		t.Fatal(err)
	}
	// Keys left at zero here, whose default is decided where they are
	// used (Computed names the package): the docs test checks the fixed
	// ones against their packages. The other computed defaults give the
	// shown value in this environment (no XDG variables, a file without
	// a warm list).
	for _, k := range Keys() {
		if strings.HasPrefix(k.Computed, "pkg/") {
			continue
		}
		table, name, _ := strings.Cut(k.Name, ".")
		s, err := load(writeRepo(t, "["+table+"]\n"+name+" = "+k.Example+"\n"), env, "linux")
		if err != nil {
			t.Errorf("%s = %s: %v", k.Name, k.Example, err)
			continue
		}
		s.File = none.File
		// %v prints a nil list as an empty one: "no keys" either way.
		if got, want := fmt.Sprintf("%+v", *s), fmt.Sprintf("%+v", *none); got != want {
			t.Errorf("%s = %s is not the default:\n  got  %s\n  want %s", k.Name, k.Example, got, want)
		}
	}
}
