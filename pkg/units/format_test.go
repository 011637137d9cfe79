package units

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The threshold is strictly newer than a file created before it, and
// every file created after it is at least as new.
func TestThreshold(t *testing.T) {
	dir := t.TempDir()
	th, err := TakeThreshold(dir)
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(filepath.Join(dir, thresholdBefore))
	if err != nil {
		t.Fatal(err)
	}
	if !th.After(before.ModTime()) {
		t.Errorf("threshold %v is not after %v", th, before.ModTime())
	}
	after := filepath.Join(dir, "after")
	if err := os.WriteFile(after, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(after); fi.ModTime().Before(th) {
		t.Errorf("a file written after the threshold is older: %v < %v", fi.ModTime(), th)
	}
	if got, err := Threshold(dir); err != nil || !got.Equal(th) {
		t.Errorf("Threshold read back %v, %v; want %v", got, err, th)
	}
	if _, err := TakeThreshold(filepath.Join(dir, "missing")); err == nil {
		t.Error("a threshold was taken in a directory that does not exist")
	}
	if _, err := Threshold(t.TempDir()); err == nil {
		t.Error("a threshold was read where none was taken")
	}
}

// A record reads back as written; one cut short reads as a call that did
// not finish, a torn last line is ignored, anything else damaged says so.
func TestRecordRoundTrip(t *testing.T) {
	dir := t.TempDir()
	r, err := NewRecord(dir, Call{Dir: "/w", Args: []string{"build"}, Target: "/t"})
	if err != nil {
		t.Fatal(err)
	}
	msg := `{"reason":"compiler-artifact","package_id":"path+file:///w/app#0.1.0","target":{"kind":["bin"],"name":"app"},"profile":{"test":false},"filenames":["/t/debug/app"],"executable":"/t/debug/app","fresh":true}`
	reason, keep, paths, ok := ParseMessage([]byte(msg))
	if !ok || !keep || reason != ReasonArtifact || len(paths) != 1 || paths[0] != "/t/debug/app" {
		t.Fatalf("ParseMessage: %q %v %v %v", reason, keep, paths, ok)
	}
	if err := r.Message([]byte(msg), Stat(paths)); err != nil {
		t.Fatal(err)
	}
	name := r.f.Name()

	recs, err := ReadRecords(dir)
	if err != nil || len(recs) != 1 {
		t.Fatalf("%v %v", recs, err)
	}
	if got := recs[0]; got.Finished || got.Damaged != "" || len(got.Messages) != 1 || got.Messages[0].Files[0].Err == "" || got.Version != RecordVersion {
		t.Errorf("before its exit: %+v", got)
	}
	if err := r.Exit(Exit{Code: 101}); err != nil {
		t.Fatal(err)
	}
	r.Close()
	got, err := ReadRecord(name)
	if err != nil || !got.Finished || !got.Failed() || got.Damaged != "" || got.Args[0] != "build" {
		t.Errorf("after its exit: %+v %v", got, err)
	}

	data, _ := os.ReadFile(name)
	for _, c := range []struct {
		name, data string
		finished   bool
		damaged    string
	}{
		{"torn last line", string(data[:len(data)-5]), false, ""},
		{"damaged line", strings.Replace(string(data), `"msg":{`, `"msg":[`, 1), false, "line 2"},
		{"no header", string(data[strings.IndexByte(string(data), '\n')+1:]), false, "no header"},
		{"empty", "", false, "empty"},
	} {
		p := filepath.Join(t.TempDir(), "call-1-1.jsonl")
		os.WriteFile(p, []byte(c.data), 0o644)
		got, err := ReadRecord(p)
		if err != nil || got.Finished != c.finished || !strings.Contains(got.Damaged, c.damaged) || (c.damaged == "") != (got.Damaged == "") {
			t.Errorf("%s: finished %v, damaged %q, %v", c.name, got.Finished, got.Damaged, err)
		}
	}

	for _, l := range []string{"", "hello", `{"reason":`, `{"reason":"compiler-message","message":{}}`} {
		if _, keep, _, _ := ParseMessage([]byte(l)); keep {
			t.Errorf("ParseMessage(%q) keeps it", l)
		}
	}
	if _, _, _, ok := ParseMessage([]byte(`{"reason":"compiler-message"}`)); !ok {
		t.Error("a compiler message is not one of Cargo's")
	}
}

// The names Cargo gives units' directories, outputs and fingerprints.
func TestNames(t *testing.T) {
	for name, want := range map[string]string{
		"libcore_lib-1f12280f46cb27f2.rlib":  "1f12280f46cb27f2",
		"core_lib-1f12280f46cb27f2.d":        "1f12280f46cb27f2",
		"app-e46d6df83764497f":               "e46d6df83764497f",
		"libmac-04f22a132c39bb7d.so":         "04f22a132c39bb7d",
		"app":                                "",
		"libmac.so":                          "",
		"app-E46D6DF83764497F":               "",
		"x-1f12280f46cb27f2x":                "",
		"a-0123456789abcdef.long-type-1.txt": "0123456789abcdef",
	} {
		if got := fileHash(name); got != want {
			t.Errorf("fileHash(%q) = %q, want %q", name, got, want)
		}
	}
	for name, want := range map[string][2]string{
		"core-lib-1f12280f46cb27f2": {"core-lib", "1f12280f46cb27f2"},
		"a-0123456789abcdef":        {"a", "0123456789abcdef"},
		"-0123456789abcdef":         {},
		"core-lib":                  {},
	} {
		pkg, hash, ok := legacyName(name)
		if ok != (want[0] != "") || pkg != want[0] || hash != want[1] {
			t.Errorf("legacyName(%q) = %q %q %v", name, pkg, hash, ok)
		}
	}
	for id, want := range map[string]string{
		"path+file:///tmp/ws/app#0.1.0":                         "app",
		"path+file:///tmp/ws/lib#core-lib@0.1.0":                "core-lib",
		"registry+https://registry.invalid/index#memchr@2.5.0":  "memchr",
		"git+https://github.com/x/y.git?branch=main#z@1.0.0":    "z",
		"git+https://github.com/x/zz?rev=abc#0.2.0":             "zz",
		"serde 1.0.0 (registry+https://registry.invalid/index)": "serde",
	} {
		if got := PackageName(id); got != want {
			t.Errorf("PackageName(%q) = %q, want %q", id, got, want)
		}
	}
	for _, c := range []struct {
		kind string
		test bool
		doc  bool
		name string
		want string
	}{
		{"lib", false, false, "core_lib", "lib-core_lib"},
		{"proc-macro", false, false, "mac", "lib-mac"},
		{"cdylib", false, true, "c", "doc-lib-c"},
		{"lib", true, false, "core_lib", "test-lib-core_lib"},
		{"bin", true, false, "app", "test-bin-app"},
		{"test", true, false, "it", "test-integration-test-it"},
		{"bench", true, false, "b", "test-bench-b"},
		{"example", false, false, "ex", "example-ex"},
		{"custom-build", false, false, "build-script-build", "build-script-build-script-build"},
		{"bin", false, true, "app", "doc-bin-app"},
	} {
		var m message
		m.Target.Kind, m.Target.Name, m.Profile.Test = []string{c.kind}, c.name, c.test
		if got := fingerprintName(&m, c.doc); got != c.want {
			t.Errorf("fingerprintName(%s %s test=%v doc=%v) = %q, want %q", c.kind, c.name, c.test, c.doc, got, c.want)
		}
	}
}
