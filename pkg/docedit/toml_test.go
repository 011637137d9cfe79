package docedit

import (
	"strings"
	"testing"
)

// Setting a string rewrites only its value; a missing key goes under its
// table's header and a missing table at the end; everything else,
// comments included, stays byte for byte, and the value reads back.
func TestTOMLSetKeepsTheRest(t *testing.T) {
	doc := "# the project's setup\nname = \"web\"  # shown in the app\n\n[setup]\nscript = \"npm ci\"\n\n[other]\nx = 1\n"
	out, err := SetTOMLString([]byte(doc), "setup", "script", "npm ci\nferry adopt\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# the project's setup\nname = \"web\"  # shown in the app\n\n[setup]\nscript = '''\nnpm ci\nferry adopt\n'''\n\n[other]\nx = 1\n"
	if string(out) != want {
		t.Errorf("set an existing key:\n%s\nwant:\n%s", out, want)
	}
	out, err = SetTOMLString([]byte(doc), "other", "teardown", "ferry rm")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), doc[:strings.Index(doc, "[other]\n")+len("[other]\n")]+"teardown = '''\nferry rm'''\nx = 1\n") {
		t.Errorf("a missing key is not right under its header:\n%s", out)
	}
	out, err = SetTOMLString([]byte(doc), "scripts", "archive", "ferry rm")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), doc) || !strings.HasSuffix(string(out), "\n[scripts]\narchive = '''\nferry rm'''\n") {
		t.Errorf("a missing table is not appended:\n%s", out)
	}
	if s, ok, err := TOMLString(out, "setup", "script"); !ok || err != nil || s != "npm ci" {
		t.Errorf("the untouched setup.script reads %q, %v, %v", s, ok, err)
	}
}

// A value that cannot be a multi-line literal is written as an escaped
// basic string and still reads back; a name is a one-line basic string.
func TestTOMLQuoting(t *testing.T) {
	for _, v := range []string{"", "it's'", "a '''quoted''' run", "tab\there\r\n", `back\slash "q"`} {
		out, err := SetTOMLString(nil, "t", "k", v)
		if err != nil {
			t.Errorf("%q: %v", v, err)
			continue
		}
		if s, ok, err := TOMLString(out, "t", "k"); !ok || err != nil || s != v {
			t.Errorf("%q reads back as %q, %v, %v from:\n%s", v, s, ok, err, out)
		}
	}
	if got := TOMLBasic("my \"app\"\n"); got != `"my \"app\"\n"` {
		t.Errorf("TOMLBasic = %s", got)
	}
}

// A key the editor cannot place exactly (here, set in an inline table) is
// refused rather than written somewhere it would not be read.
func TestTOMLRefusesWhatItCannotPlace(t *testing.T) {
	doc := "setup = { script = \"npm ci\" }\n"
	if out, err := SetTOMLString([]byte(doc), "setup", "script", "x"); err == nil {
		t.Errorf("set inside an inline table gave:\n%s", out)
	}
	if _, _, err := TOMLString([]byte("[a]\nk = 1\n"), "a", "k"); err == nil {
		t.Error("a number read as a string")
	}
}
