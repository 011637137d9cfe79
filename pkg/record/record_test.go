package record_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/record"
)

// testdata holds a base.json and an agent.json with every field set, as
// the Ferry before this package wrote them (its base.Record and
// agent.Record). Reading either and writing it back gives the same bytes,
// through this package's records and through package base's Record, which
// embeds record.Base: the move changed no format.
func TestFormatsUnchanged(t *testing.T) {
	for _, c := range []struct {
		file string
		rec  any
	}{
		{"base.json", &record.Base{}},
		{"base.json", &base.Record{}},
		{"agent.json", &record.Agent{}},
	} {
		want, err := os.ReadFile(filepath.Join("testdata", c.file))
		if err != nil {
			t.Fatal(err)
		}
		if err := atomicfile.ReadJSON(filepath.Join("testdata", c.file), c.rec); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), c.file)
		if err := atomicfile.WriteJSON(out, c.rec, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s read into %T and written back differs:\n%s\nwant:\n%s", c.file, c.rec, got, want)
		}
	}
}

// The test above covers only the fields testdata sets: a field added to a
// record needs a value there.
func TestTestdataSetsEveryField(t *testing.T) {
	for file, rec := range map[string]any{"base.json": &record.Base{}, "agent.json": &record.Agent{}} {
		if err := atomicfile.ReadJSON(filepath.Join("testdata", file), rec); err != nil {
			t.Fatal(err)
		}
		for _, f := range unset(reflect.ValueOf(rec).Elem(), "") {
			t.Errorf("testdata/%s leaves %s unset: give it a value", file, f)
		}
	}
}

// unset returns the fields of v (a struct of this package's) left zero,
// by path, looking into this package's structs it holds.
func unset(v reflect.Value, path string) []string {
	var out []string
	for i := range v.NumField() {
		f, name := v.Field(i), path+v.Type().Field(i).Name
		if f.IsZero() {
			out = append(out, name)
			continue
		}
		if f.Kind() == reflect.Pointer {
			f = f.Elem()
		}
		switch {
		case f.Kind() == reflect.Struct && f.Type().PkgPath() == v.Type().PkgPath():
			out = append(out, unset(f, name+".")...)
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Struct:
			for j := range f.Len() {
				out = append(out, unset(f.Index(j), name+"[].")...)
			}
		}
	}
	return out
}
