package hook

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferrydev/ferry/pkg/agent"
)

// Claude Code releases differ in what Ferry's hooks get. Found by driving
// each release with the real-client test (claude_real_test.go) against
// the stand-in API, and by reading the bundled CLI of the releases around
// each change:
//
//   - Before 2.1.50 there is no WorktreeCreate hook: `claude --worktree`
//     makes its own worktree, which stays cold.
//   - Before 2.1.83 the settings schema knows no CwdChanged event, and a
//     settings file naming one is dropped whole, WorktreeCreate and
//     SessionStart included: install leaves CwdChanged out for them.
//   - From 2.1.78 to 2.1.210 a --worktree session reads its settings
//     again from the worktree it moved into, so the main checkout's
//     .claude/settings.local.json (untracked, where install writes by
//     default) is not read there, no SessionStart runs, and the session's
//     shells never get the shim. Claude Code copies that file into the
//     worktrees it makes itself, not into a hook's; so for those releases
//     WorktreeCreate copies it (ClaudeSettingsCopy). From 2.1.211 the
//     session reads the main checkout's file, and deliberately no copy is
//     made (a copy would keep permissions the user later revokes).
//
// A hook finds the release in AI_AGENT, which Claude Code sets for its
// hooks from 2.1.120 on ("claude-code/2.1.120/harness", later
// "claude-code_2-1-197_harness"); without it the hook runs under an older
// release, or under no Claude Code at all (a hook run by hand), and asks
// `claude --version` ("2.1.197 (Claude Code)", 0.1-0.6 s).

// ClaudeVersion is a Claude Code release.
type ClaudeVersion struct{ Major, Minor, Patch int }

func (v ClaudeVersion) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Less reports whether v is an older release than o.
func (v ClaudeVersion) Less(o ClaudeVersion) bool {
	if v.Major != o.Major {
		return v.Major < o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor < o.Minor
	}
	return v.Patch < o.Patch
}

// The releases that changed what Ferry's hooks get (see above).
var (
	ClaudeWorktreeHook   = ClaudeVersion{2, 1, 50}
	ClaudeCwdChanged     = ClaudeVersion{2, 1, 83}
	ClaudeWorktreeReread = ClaudeVersion{2, 1, 78}
	ClaudeMainSettings   = ClaudeVersion{2, 1, 211}
)

var (
	agentVersion   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^claude-code[/_](\d+)[.-](\d+)[.-](\d+)(?:[/_]|$)`) })
	versionCommand = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)\b`) })
)

// ParseAIAgent reads the release from AI_AGENT's value.
func ParseAIAgent(v string) (ClaudeVersion, bool) {
	return parseVersion(agentVersion(), v)
}

// ParseClaudeVersion reads the release from `claude --version`'s output.
func ParseClaudeVersion(out string) (ClaudeVersion, bool) {
	return parseVersion(versionCommand(), strings.TrimSpace(out))
}

func parseVersion(re *regexp.Regexp, s string) (ClaudeVersion, bool) {
	m := re.FindStringSubmatch(s)
	if m == nil {
		return ClaudeVersion{}, false
	}
	var n [3]int
	for i := range n {
		var err error
		if n[i], err = strconv.Atoi(m[i+1]); err != nil {
			return ClaudeVersion{}, false
		}
	}
	return ClaudeVersion{n[0], n[1], n[2]}, true
}

// InstalledClaude asks `claude --version` of the claude on PATH (within
// five seconds); false when there is none or it says no release.
func InstalledClaude() (ClaudeVersion, string, bool) {
	bin, err := exec.LookPath("claude")
	if err != nil {
		return ClaudeVersion{}, "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return ClaudeVersion{}, bin, false
	}
	v, ok := ParseClaudeVersion(string(out))
	return v, bin, ok
}

// ClaudeEvents are the events Ferry installs hooks for under release v
// (all of Events when it is not known): without CwdChanged before it
// existed.
func ClaudeEvents(v ClaudeVersion, known bool) []string {
	if !known || !v.Less(ClaudeCwdChanged) {
		return Events
	}
	var evs []string
	for _, e := range Events {
		if e != EventCwdChanged {
			evs = append(evs, e)
		}
	}
	return evs
}

// NeedsSettingsCopy reports whether a worktree session of release v reads
// its settings from the worktree (ClaudeWorktreeReread to
// ClaudeMainSettings): an unknown release is taken as one that does not.
func NeedsSettingsCopy(v ClaudeVersion, known bool) bool {
	return known && !v.Less(ClaudeWorktreeReread) && v.Less(ClaudeMainSettings)
}

// SettingsCopy is what WorktreeCreate places in the worktrees it makes
// for a session of release v: the main checkout's (main's)
// .claude/settings.local.json, when v reads a worktree session's settings
// from the worktree (NeedsSettingsCopy) and the file is there; nothing
// otherwise.
func SettingsCopy(main string, v ClaudeVersion, known bool) ([]agent.Placed, error) {
	if !NeedsSettingsCopy(v, known) {
		return nil, nil
	}
	path, err := SettingsPath(ScopeLocal, main, "")
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rel, _ := filepath.Rel(main, path)
	return []agent.Placed{{Rel: filepath.ToSlash(rel), Data: data}}, nil
}

// HookClaude is the release a hook runs under: AI_AGENT's, else the
// installed claude's; false when neither tells.
func HookClaude(getenv func(string) string) (ClaudeVersion, bool) {
	if v, ok := ParseAIAgent(getenv("AI_AGENT")); ok {
		return v, true
	}
	v, _, ok := InstalledClaude()
	return v, ok
}

// ClaudeGaps says what release v lacks that Ferry's hooks rely on, each
// as a sentence with what Ferry does about it or what to do; none for a
// release that has it all.
func ClaudeGaps(v ClaudeVersion) []string {
	var gaps []string
	if v.Less(ClaudeWorktreeHook) {
		gaps = append(gaps, fmt.Sprintf("Claude Code %s has no WorktreeCreate hook (it came in %s): its worktrees stay cold; upgrade Claude Code, or run `eval \"$(ferry env)\"` in an agent made by `ferry spawn`", v, ClaudeWorktreeHook))
	}
	if v.Less(ClaudeCwdChanged) {
		gaps = append(gaps, fmt.Sprintf("Claude Code %s knows no CwdChanged hook (it came in %s) and drops a settings file that names one, so Ferry installs it without: a session that moves into an agent's worktree (EnterWorktree) gets the shim only from its next start; upgrade Claude Code", v, ClaudeCwdChanged))
	}
	if !v.Less(ClaudeWorktreeReread) && v.Less(ClaudeMainSettings) {
		gaps = append(gaps, fmt.Sprintf("Claude Code %s reads a worktree session's settings from the worktree (until %s): Ferry's WorktreeCreate hook copies .claude/settings.local.json into each worktree it makes, so its SessionStart runs there; with --scope user or project nothing is copied, nor needed", v, ClaudeMainSettings))
	}
	return gaps
}
