package hook

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The release is read from each spelling Claude Code has used: AI_AGENT
// as 2.1.120 and as 2.1.197 and later set it, and `claude --version`.
func TestClaudeVersions(t *testing.T) {
	for in, want := range map[string]ClaudeVersion{
		"claude-code/2.1.120/harness": {2, 1, 120},
		"claude-code_2-1-197_harness": {2, 1, 197},
		"claude-code_2-1-332_harness": {2, 1, 332},
	} {
		if v, ok := ParseAIAgent(in); !ok || v != want {
			t.Errorf("ParseAIAgent(%q) = %v, %v; want %v", in, v, ok, want)
		}
	}
	for _, in := range []string{"", "cursor/1.2.3", "claude-code", "claude-code/2.x/harness"} {
		if v, ok := ParseAIAgent(in); ok {
			t.Errorf("ParseAIAgent(%q) = %v, want none", in, v)
		}
	}
	if v, ok := ParseClaudeVersion("2.1.197 (Claude Code)\n"); !ok || v != (ClaudeVersion{2, 1, 197}) {
		t.Errorf("ParseClaudeVersion: %v, %v", v, ok)
	}

	// What each release gets: the events, the copy, the gaps named.
	cases := []struct {
		v          ClaudeVersion
		cwdChanged bool
		copy       bool
		gaps       []string
	}{
		{ClaudeVersion{2, 1, 49}, false, false, []string{"no WorktreeCreate hook", "no CwdChanged"}},
		{ClaudeVersion{2, 1, 77}, false, false, []string{"no CwdChanged"}},
		{ClaudeVersion{2, 1, 81}, false, true, []string{"no CwdChanged", "copies .claude/settings.local.json"}},
		{ClaudeVersion{2, 1, 197}, true, true, []string{"copies .claude/settings.local.json"}},
		{ClaudeVersion{2, 1, 210}, true, true, []string{"copies"}},
		{ClaudeVersion{2, 1, 211}, true, false, nil},
		{ClaudeVersion{3, 0, 0}, true, false, nil},
	}
	for _, c := range cases {
		if got := slices.Contains(ClaudeEvents(c.v, true), EventCwdChanged); got != c.cwdChanged {
			t.Errorf("%s: CwdChanged installed %v, want %v", c.v, got, c.cwdChanged)
		}
		if got := NeedsSettingsCopy(c.v, true); got != c.copy {
			t.Errorf("%s: settings copied %v, want %v", c.v, got, c.copy)
		}
		gaps := strings.Join(ClaudeGaps(c.v), "\n")
		for _, g := range c.gaps {
			if !strings.Contains(gaps, g) {
				t.Errorf("%s: the gaps do not say %q:\n%s", c.v, g, gaps)
			}
		}
		if c.gaps == nil && gaps != "" {
			t.Errorf("%s: gaps named for a release that has it all:\n%s", c.v, gaps)
		}
	}
	// Unknown: every event, no copy.
	if !slices.Equal(ClaudeEvents(ClaudeVersion{}, false), Events) || NeedsSettingsCopy(ClaudeVersion{2, 1, 197}, false) {
		t.Error("an unknown release is not served as a current one")
	}
}

// Installed for a release without CwdChanged, the file names no
// CwdChanged hook, and a Ferry CwdChanged hook installed before goes.
func TestInstallWithoutCwdChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.local.json")
	ed, err := Install(path, "/usr/bin/ferry", false)
	if err != nil || ed.Write() != nil {
		t.Fatal(err)
	}
	ed, err = InstallEvents(path, "/usr/bin/ferry", false, ClaudeEvents(ClaudeVersion{2, 1, 81}, true))
	if err != nil {
		t.Fatal(err)
	}
	if err := ed.Write(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ed.Removed, []string{EventCwdChanged}) {
		t.Errorf("removed %v, want CwdChanged", ed.Removed)
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), EventCwdChanged) {
		t.Errorf("the file still names CwdChanged:\n%s", data)
	}
	evs, err := InstalledEvents(path)
	if err != nil || !slices.Equal(evs, []string{EventWorktreeCreate, EventWorktreeRemove, EventSessionStart}) {
		t.Errorf("installed events %v (%v)", evs, err)
	}
}
