package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteFileReplacesAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	if err := WriteFile(p, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(p, map[string]int{"n": 2}, 0o600); err != nil {
		t.Fatal(err)
	}
	var got map[string]int
	if err := ReadJSON(p, &got); err != nil || got["n"] != 2 {
		t.Fatalf("ReadJSON = %v, %v", got, err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, %v; want 0600", fi.Mode(), err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want only the target", len(ents))
	}
}

func TestWriteFileFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state")
	if err := WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A directory in the target's place makes the rename fail.
	q := filepath.Join(dir, "sub")
	os.Mkdir(q, 0o755)
	os.WriteFile(filepath.Join(q, "x"), nil, 0o644)
	if err := WriteFile(q, []byte("new"), 0o644); err == nil {
		t.Fatal("rename over a non-empty directory succeeded")
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("temporary file %s left behind", e.Name())
		}
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("old file changed: %q", b)
	}
}

func TestReplaceJSON(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ns.json")
	for _, n := range []int{1, 2} {
		if err := ReplaceJSON(p, map[string]int{"n": n}, 0o644); err != nil {
			t.Fatal(err)
		}
		var got map[string]int
		if err := ReadJSON(p, &got); err != nil || got["n"] != n {
			t.Fatalf("after writing %d: ReadJSON = %v, %v", n, got, err)
		}
	}
	// A failed replacement keeps the old file and leaves no temporary one.
	q := filepath.Join(dir, "sub")
	os.Mkdir(q, 0o755)
	os.WriteFile(filepath.Join(q, "x"), nil, 0o644)
	if err := ReplaceJSON(q, 1, 0o644); err == nil {
		t.Fatal("rename over a non-empty directory succeeded")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Fatalf("directory holds %d entries, want ns.json and sub", len(ents))
	}
}
