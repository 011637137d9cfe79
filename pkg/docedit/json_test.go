package docedit

import (
	"strings"
	"testing"
)

// A document nobody changed is written back byte for byte, whatever its
// layout: indentation, key order, spacing around colons, a one-line
// object, escapes, numbers as written, and what surrounds the top value.
func TestJSONUnchangedIsTheSameBytes(t *testing.T) {
	for _, doc := range []string{
		"{}",
		"  {\n\t\"b\" :1,\"a\": [ 1,2 ,3 ],\n\t\"c\": {\"x\": \"\\u00e9\\n\"}\n}\n\n",
		`{"permissions":{"allow":["Bash(ls)"]},"n":1.50e+2,"t":true,"z":null}`,
		"[\n    {\"k\": \"v\"}\n]",
	} {
		d, err := ParseJSON([]byte(doc))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if got := string(d.Bytes()); got != doc {
			t.Errorf("written back as %q, read as %q", got, doc)
		}
	}
}

// Adding takes the layout of the neighbours (indentation, colon), and
// removing what was added gives back the document as it was.
func TestJSONAddThenRemoveGivesBackTheFile(t *testing.T) {
	doc := "{\n    \"model\" : \"opus\",\n    \"env\" : {\"A\": \"1\"}\n}\n"
	d, err := ParseJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	d.Root().Add("hooks", Object("SessionStart", Array(Object("type", "command", "command", "a && b <c>"))))
	got := string(d.Bytes())
	want := "{\n    \"model\" : \"opus\",\n    \"env\" : {\"A\": \"1\"},\n    \"hooks\" : {\n" +
		"        \"SessionStart\" : [\n            {\n                \"type\" : \"command\",\n" +
		"                \"command\" : \"a && b <c>\"\n            }\n        ]\n    }\n}\n"
	if got != want {
		t.Errorf("after Add:\n%s\nwant:\n%s", got, want)
	}
	again, err := ParseJSON([]byte(got))
	if err != nil {
		t.Fatalf("Add wrote invalid JSON: %v", err)
	}
	if s, ok := again.Root().Get("hooks").Get("SessionStart").At(0).Get("command").Str(); !ok || s != "a && b <c>" {
		t.Errorf("the added command reads back as %q, %v", s, ok)
	}
	again.Root().RemoveKey("hooks")
	if back := string(again.Bytes()); back != doc {
		t.Errorf("after removing what was added:\n%q\nwant:\n%q", back, doc)
	}
}

// Removing the first member hands its whitespace to the next, so the
// layout stays; a changed scalar keeps its place; an array empties to [].
func TestJSONRemoveAndSet(t *testing.T) {
	d, err := ParseJSON([]byte("{\n  \"a\": [\"x\", \"y\"],\n  \"b\": \"old\"\n}"))
	if err != nil {
		t.Fatal(err)
	}
	a := d.Root().Get("a")
	a.Remove(0)
	d.Root().Get("b").SetString("new")
	if got, want := string(d.Bytes()), "{\n  \"a\": [\"y\"],\n  \"b\": \"new\"\n}"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	a.Remove(0)
	if got, want := string(d.Bytes()), "{\n  \"a\": [],\n  \"b\": \"new\"\n}"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if a.Len() != 0 || !a.IsArray() || a.IsObject() || a.IsString() {
		t.Errorf("an emptied array reads as Len %d, array %v", a.Len(), a.IsArray())
	}
}

// An empty file is an empty object laid out as Claude Code writes its
// settings; invalid JSON is refused with where encoding/json found it.
func TestJSONEmptyAndInvalid(t *testing.T) {
	d, err := ParseJSON([]byte("  \n"))
	if err != nil {
		t.Fatal(err)
	}
	d.Root().Add("k", String("v"))
	if got, want := string(d.Bytes()), "{\n  \"k\": \"v\"\n}\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := ParseJSON([]byte(`{"a": 1,}`)); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Errorf("a trailing comma: %v", err)
	}
}
