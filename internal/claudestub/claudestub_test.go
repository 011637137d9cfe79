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
	for name, want := range map[string]string{"CLAUDE_VERSION": Version, "CLAUDE_OLD_VERSION": OldVersion} {
		m := regexp.MustCompile(`(?m)^` + name + `\s*:=\s*(\S+)$`).FindSubmatch(data)
		if m == nil || string(m[1]) != want {
			t.Errorf("Makefile's %s is %q, want %s", name, m, want)
		}
	}
}
