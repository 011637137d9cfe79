package cli

import (
	"bytes"
	"encoding/json"
	"testing"
)

// A usage error is an {"error": ...} object on standard output under
// --json, as every other error is, though the flags did not parse; without
// --json (or with it after "--") standard output stays empty.
func TestUsageErrorIsJSONUnderJSON(t *testing.T) {
	var grammar struct {
		JSON bool   `name:"json"`
		Rev  string `name:"rev"`
	}
	for _, tc := range []struct {
		args     []string
		wantJSON bool
	}{
		{[]string{"--json", "--no-such-flag"}, true},
		{[]string{"--no-such-flag", "--json"}, true},
		{[]string{"--rev"}, false},
		{[]string{"--no-such-flag", "--", "--json"}, false},
	} {
		var stdout, stderr bytes.Buffer
		_, code, done := Parse("ferry test", "A test.", nil, &grammar, tc.args, IO{Stdout: &stdout, Stderr: &stderr})
		if !done || code != 2 {
			t.Fatalf("%q: done %v, exit %d; want a usage error (2)", tc.args, done, code)
		}
		if !tc.wantJSON {
			if stdout.Len() != 0 {
				t.Errorf("%q: standard output without --json: %s", tc.args, stdout.String())
			}
			continue
		}
		var out struct {
			Error struct {
				Kind     string `json:"kind"`
				ExitCode int    `json:"exit_code"`
				Hint     string `json:"hint"`
			} `json:"error"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
			t.Fatalf("%q: standard output is not JSON (%v): %q", tc.args, err, stdout.String())
		}
		if out.Error.Kind != "usage" || out.Error.ExitCode != 2 || out.Error.Hint == "" {
			t.Errorf("%q: error object %+v", tc.args, out.Error)
		}
	}
}
