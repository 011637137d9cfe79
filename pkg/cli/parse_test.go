package cli

import (
	"bytes"
	"encoding/json"
	"strings"
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

// --help of a grammar with a default command shows that command's flags
// too; a subcommand's own --help shows only its own.
func TestHelpShowsTheDefaultCommandsFlags(t *testing.T) {
	var grammar struct {
		Build struct {
			Rev string `help:"Revision to build."`
		} `cmd:"" default:"withargs" help:"Build."`
		List struct {
			Long bool `help:"Long listing."`
		} `cmd:"" help:"List."`
	}
	help := func(args ...string) string {
		var stdout, stderr bytes.Buffer
		_, code, done := Parse("ferry test", "A test.", nil, &grammar, args, IO{Stdout: &stdout, Stderr: &stderr}, WithDefaultHelp("build"))
		if !done || code != 0 {
			t.Fatalf("%q: done %v, exit %d\n%s", args, done, code, stderr.String())
		}
		return stdout.String()
	}
	if out := help("--help"); !strings.Contains(out, "--rev") || !strings.Contains(out, "Without a command, ferry test runs build") || !strings.Contains(out, "list") {
		t.Errorf("ferry test --help:\n%s", out)
	}
	if out := help("list", "--help"); strings.Contains(out, "--rev") || !strings.Contains(out, "--long") {
		t.Errorf("ferry test list --help:\n%s", out)
	}
}
