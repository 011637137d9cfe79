package claudestub

import (
	"os"
	"regexp"
	"testing"
)

// The Makefile, which has script/bootstrap install Claude Code, pins the
// release this package's Version names.
func TestMakefilePinsVersion(t *testing.T) {
	data, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CLAUDE_VERSION\s*:=\s*(\S+)$`).FindSubmatch(data)
	if m == nil || string(m[1]) != Version {
		t.Fatalf("Makefile's CLAUDE_VERSION is %q, want %s", m, Version)
	}
}
