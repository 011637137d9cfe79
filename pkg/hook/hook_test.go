package hook

import (
	"os"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/failure"
)

// Every spelling of WorktreeCreate's and WorktreeRemove's payload Ferry
// knows of (the e2e scripts feed the same ones to the real binary).
func TestPayloadVariants(t *testing.T) {
	base := `"session_id":"5b3c9e2a-1111-4222-8333-944445555666","transcript_path":"/t.jsonl","cwd":"/repo"`
	for _, c := range []struct {
		name, json         string
		want, field, start string
		remove             string
	}{
		{"name (Claude Code 2.1)", `{` + base + `,"hook_event_name":"WorktreeCreate","name":"feature-auth"}`, "feature-auth", "name", "", ""},
		{"worktree_name, source_ref, base_path", `{` + base + `,"hook_event_name":"WorktreeCreate","worktree_name":"feat-auth","source_ref":"main","base_path":"/repo/.worktrees"}`, "feat-auth", "worktree_name", "main", ""},
		{"worktree_name, base_commit", `{` + base + `,"hook_event_name":"WorktreeCreate","worktree_name":"agent-a1b2","base_commit":"0123456789abcdef0123456789abcdef01234567"}`, "agent-a1b2", "worktree_name", "0123456789abcdef0123456789abcdef01234567", ""},
		{"worktree_path only", `{` + base + `,"hook_event_name":"WorktreeCreate","worktree_path":"/repo/.claude/worktrees/bold-oak-a3f2"}`, "bold-oak-a3f2", "worktree_path", "", "/repo/.claude/worktrees/bold-oak-a3f2"},
		{"worktree_path, base_ref", `{` + base + `,"hook_event_name":"WorktreeCreate","worktree_path":"/repo/.claude/worktrees/x/","base_ref":"main~1"}`, "x", "worktree_path", "main~1", "/repo/.claude/worktrees/x/"},
		{"branch_name, base_path", `{` + base + `,"hook_event_name":"WorktreeCreate","branch_name":"feat/04-config","base_path":"/repo"}`, "feat/04-config", "branch_name", "", ""},
		{"worktree object", `{` + base + `,"hook_event_name":"WorktreeCreate","worktree":{"name":"w1","path":"/elsewhere/w1","branch":"worktree-w1","originalRepoDir":"/repo"}}`, "w1", "worktree.name", "", "/elsewhere/w1"},
		{"remove: worktree_path", `{` + base + `,"hook_event_name":"WorktreeRemove","worktree_path":"/wt/a"}`, "a", "worktree_path", "", "/wt/a"},
		{"remove: path", `{` + base + `,"hook_event_name":"WorktreeRemove","path":"/wt/b"}`, "", "", "", "/wt/b"},
		{"unknown fields", `{"hook_event_name":"WorktreeCreate","name":"n","permission_mode":"default","agent_id":"x","future":{"a":[1]}}`, "n", "name", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := ParsePayload(strings.NewReader(c.json + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			if got, field := p.NameAsked(); got != c.want || field != c.field {
				t.Errorf("name %q from %q, want %q from %q", got, field, c.want, c.field)
			}
			if got := p.Start(); got != c.start {
				t.Errorf("start %q, want %q", got, c.start)
			}
			if got := p.RemovePath(); got != c.remove {
				t.Errorf("remove path %q, want %q", got, c.remove)
			}
		})
	}
}

// The payload's directories come first; a worktree object's repository is
// next; duplicates and empty ones are left out.
func TestPayloadDirs(t *testing.T) {
	p, _ := ParsePayload(strings.NewReader(`{"cwd":"/a","worktree":{"originalRepoDir":"/b"}}`))
	if got := strings.Join(p.Dirs("", "/a", "/c"), " "); got != "/a /b /c" {
		t.Errorf("dirs %q", got)
	}
}

// A payload is read up to its end: a tool that keeps stdin open does not
// block the hook. Nothing, or not JSON, is bad input.
func TestParsePayloadStopsAtTheObject(t *testing.T) {
	r, w := ioPipe(t)
	go w.Write([]byte(`{"name":"x"}`)) // and never closed
	p, err := ParsePayload(r)
	if err != nil || p.Name != "x" {
		t.Fatalf("%v %v", p, err)
	}
	for _, in := range []string{"", "   ", "not json", "[1]"} {
		if _, err := ParsePayload(strings.NewReader(in)); failure.KindOf(err) != failure.Usage {
			t.Errorf("%q: %v, want a usage error", in, err)
		}
	}
}

func TestCheckEvent(t *testing.T) {
	p := &Payload{Event: "WorktreeRemove"}
	if err := p.CheckEvent(EventWorktreeCreate); failure.KindOf(err) != failure.Usage {
		t.Errorf("mismatch: %v", err)
	}
	if err := (&Payload{}).CheckEvent(EventWorktreeCreate); err != nil {
		t.Errorf("no event named: %v", err)
	}
}

func TestAgentName(t *testing.T) {
	long := strings.Repeat("a", 70)
	for _, c := range []struct {
		in, session string
		n           int
		want        string
	}{
		{"feature-auth", "", 1, "feature-auth"},
		{"feature-auth", "", 3, "feature-auth-3"},
		{"Fix login!", "", 1, "Fix-login"},
		{"feat/04-product-config", "", 1, "feat-04-product-config"},
		{"../../etc/passwd", "", 1, "etc-passwd"},
		{"a..b", "", 1, "a.b"},
		{"x.lock", "", 1, "x"},
		{"x.lock.lock.", "", 1, "x"},
		{"-_.lead", "", 1, "lead"},
		{"über straße", "", 1, "ber-stra-e"},
		{"", "5b3c9e2a-1111-4222", 1, "claude-5b3c9e2a"},
		{"!!!", "", 1, "claude"},
		{"", "", 2, "claude-2"},
		{long, "", 1, strings.Repeat("a", 60)},
		{long, "", 100, strings.Repeat("a", 60) + "-100"},
		{"bold-oak-a3f2", "s", 1, "bold-oak-a3f2"},
		{"agent-ad9423367fb06a608", "s", 1, "agent-ad9423367fb06a608"},
	} {
		got := AgentName(c.in, c.session, c.n)
		if got != c.want {
			t.Errorf("AgentName(%q, %q, %d) = %q, want %q", c.in, c.session, c.n, got, c.want)
		}
		if err := agent.CheckName(got); err != nil {
			t.Errorf("AgentName(%q) = %q: %v", c.in, got, err)
		}
	}
}

func ioPipe(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}
