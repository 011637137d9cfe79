package ferrycmd

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/cli"
)

// An unknown command is a usage error (2) naming the command within a
// typo of it, as JSON under --json.
func TestUnknownCommandSaysWhatWasMeant(t *testing.T) {
	for _, tc := range []struct {
		args []string
		hint string // "" for no guess
	}{
		{[]string{"lsit"}, "did you mean `ferry list`?"},
		{[]string{"spwan", "a1"}, "did you mean `ferry spawn`?"},
		{[]string{"docter", "--json"}, "did you mean `ferry doctor`?"},
		{[]string{"frobnicate"}, ""},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(tc.args, cli.IO{Stdout: &stdout, Stderr: &stderr}); code != 2 {
			t.Fatalf("ferry %v: exit %d, want 2\n%s", tc.args, code, stderr.String())
		}
		if tc.hint != "" && !strings.Contains(stderr.String(), tc.hint) {
			t.Errorf("ferry %v: no %q in:\n%s", tc.args, tc.hint, stderr.String())
		}
		if tc.hint == "" && strings.Contains(stderr.String(), "did you mean") {
			t.Errorf("ferry %v: a guess at nothing close:\n%s", tc.args, stderr.String())
		}
		asJSON := cli.WantsJSON(tc.args)
		var out struct {
			Error struct{ Kind, Hint string }
		}
		if err := json.Unmarshal(stdout.Bytes(), &out); (err == nil) != asJSON {
			t.Errorf("ferry %v: standard output %q (JSON wanted: %v)", tc.args, stdout.String(), asJSON)
		} else if asJSON && (out.Error.Kind != "usage" || !strings.Contains(out.Error.Hint, tc.hint)) {
			t.Errorf("ferry %v: error object %+v", tc.args, out.Error)
		}
	}
}
