// Package claudestub drives the real Claude Code CLI in tests: a scripted
// stand-in for the Anthropic Messages API on loopback, and the environment
// and flags that make `claude -p` talk only to it.
//
// What the stand-in answers was found by running Claude Code 2.1.332
// against it with only loopback reachable: in -p mode, with nonessential
// traffic turned off, Claude Code sends POST /v1/messages (always
// streamed, as server-sent events) and nothing else. The conversation that
// carries the Bash tool is the session's; the stand-in answers its first
// turn with one scripted tool call and every later turn with text that
// echoes the tool's result, so the session's printed answer holds what the
// command printed. Claude Code puts role "system" messages between turns,
// so "the last turn" is the last one of another role.
package claudestub

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
)

// Version is the Claude Code release the tests pin (script/bootstrap
// installs it; the Makefile names it).
const Version = "2.1.332"

// Env names the claude binary for the tests (the Makefile sets it to
// what script/bootstrap installed).
const Env = "FERRY_TEST_CLAUDE"

// OldVersion is an old release the tests pin too: one whose worktree
// sessions read their settings from the worktree (2.1.78 to 2.1.210), and
// whose shells got no shim before Ferry's WorktreeCreate hook copied them
// in. OldEnv names its binary.
const (
	OldVersion = "2.1.197"
	OldEnv     = "FERRY_TEST_CLAUDE_OLD"
)

// Binary returns the claude binary the tests drive. Without one, under
// `make test` (fixture.Required) the test fails, since bootstrap installs
// it; under plain go test it skips, saying how to get one.
func Binary(t testing.TB) string {
	t.Helper()
	return binary(t, Env, Version)
}

// OldBinary returns the old release's binary (OldVersion), as Binary does.
func OldBinary(t testing.TB) string {
	t.Helper()
	return binary(t, OldEnv, OldVersion)
}

func binary(t testing.TB, env, version string) string {
	t.Helper()
	p := os.Getenv(env)
	if p != "" {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	msg := fmt.Sprintf("no Claude Code binary: set %s to one (script/bootstrap installs @anthropic-ai/claude-code@%s with npm; `make test` passes it on)", env, version)
	if p != "" {
		msg = fmt.Sprintf("%s=%s is not a file", env, p)
	}
	if fixture.Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// Script is what the stand-in has the session do.
type Script struct {
	// Bash is the command the session's Bash tool runs.
	Bash string
	// Subagent: the session starts a subagent isolated in a worktree
	// (the Agent tool, isolation "worktree"), and the subagent runs Bash.
	Subagent bool
}

// Server is a running stand-in.
type Server struct {
	URL    string
	script Script
	mu     sync.Mutex
	log    []string
}

// subagentMarker marks the subagent's task in its first message.
const subagentMarker = "FERRY-SUBAGENT-TASK"

// Start serves the stand-in on loopback until the test ends.
func Start(t testing.TB, s Script) *Server {
	t.Helper()
	srv := &Server{script: s}
	hs := httptest.NewServer(http.HandlerFunc(srv.serve))
	t.Cleanup(hs.Close)
	srv.URL = hs.URL
	return srv
}

// Log is what the stand-in was asked and answered, a line a request.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.log, "\n")
}

func (s *Server) logf(format string, a ...any) {
	s.mu.Lock()
	s.log = append(s.log, fmt.Sprintf(format, a...))
	s.mu.Unlock()
}

type block struct {
	Type    string          `json:"type"`
	Text    string          `json:"text,omitempty"`
	Content json.RawMessage `json:"content,omitempty"`
	IsError bool            `json:"is_error,omitempty"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type request struct {
	Model    string    `json:"model"`
	Stream   bool      `json:"stream"`
	Messages []message `json:"messages"`
	Tools    []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

// blocks reads a message's content, a string or a list of blocks.
func blocks(raw json.RawMessage) []block {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []block{{Type: "text", Text: s}}
	}
	var bs []block
	json.Unmarshal(raw, &bs)
	return bs
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		s.logf("%s %s: 404", r.Method, r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"type":"error","error":{"type":"not_found_error","message":"not served by the stand-in"}}`)
		return
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	content, stop := s.answer(&req)
	s.logf("POST /v1/messages: %d messages, %d tools -> %s", len(req.Messages), len(req.Tools), stop)
	write(w, req, content, stop)
}

// answer scripts the reply to req.
func (s *Server) answer(req *request) ([]map[string]any, string) {
	has := func(name string) bool {
		for _, t := range req.Tools {
			if t.Name == name {
				return true
			}
		}
		return false
	}
	var last []block
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role != "system" {
			last = blocks(req.Messages[i].Content)
			break
		}
	}
	for _, b := range last {
		if b.Type == "tool_result" {
			var out []string
			for _, c := range blocks(b.Content) {
				if c.Type == "text" {
					out = append(out, c.Text)
				}
			}
			return text("TOOL RESULT:\n" + strings.Join(out, "\n")), "end_turn"
		}
	}
	called := false
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			for _, b := range blocks(m.Content) {
				called = called || b.Type == "tool_use"
			}
		}
	}
	sub := false
	if len(req.Messages) > 0 {
		for _, b := range blocks(req.Messages[0].Content) {
			sub = sub || strings.Contains(b.Text, subagentMarker)
		}
	}
	switch {
	case called:
		return text("done"), "end_turn"
	case s.script.Subagent && !sub && has("Agent"):
		return toolUse("Agent", map[string]any{"description": "build in a worktree", "prompt": subagentMarker + ": run the command",
			"subagent_type": "general-purpose", "isolation": "worktree", "run_in_background": false}), "tool_use"
	case has("Bash") && (sub || !s.script.Subagent):
		return toolUse("Bash", map[string]any{"command": s.script.Bash, "description": "run the scripted command"}), "tool_use"
	}
	return text("ok"), "end_turn"
}

func text(s string) []map[string]any { return []map[string]any{{"type": "text", "text": s}} }

var ids struct {
	sync.Mutex
	n int
}

func newID(prefix string) string {
	ids.Lock()
	defer ids.Unlock()
	ids.n++
	return fmt.Sprintf("%s_stub%06d", prefix, ids.n)
}

func toolUse(name string, input map[string]any) []map[string]any {
	in, _ := json.Marshal(input)
	return []map[string]any{{"type": "tool_use", "id": newID("toolu"), "name": name, "input": json.RawMessage(in)}}
}

// write sends content as a message, streamed as server-sent events when
// the request asked for a stream.
func write(w http.ResponseWriter, req request, content []map[string]any, stop string) {
	model := req.Model
	if model == "" {
		model = "stand-in"
	}
	id := newID("msg")
	usage := map[string]any{"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": id, "type": "message", "role": "assistant", "model": model,
			"content": content, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(event string, data map[string]any) {
		data["type"] = event
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	send("message_start", map[string]any{"message": map[string]any{"id": id, "type": "message", "role": "assistant", "model": model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": usage}})
	for i, c := range content {
		switch c["type"] {
		case "text":
			send("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			send("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "text_delta", "text": c["text"]}})
		case "tool_use":
			send("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "tool_use", "id": c["id"], "name": c["name"], "input": map[string]any{}}})
			send("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(c["input"].(json.RawMessage))}})
		}
		send("content_block_stop", map[string]any{"index": i})
	}
	send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 5}})
	send("message_stop", map[string]any{})
}

// Result is one `claude -p` run.
type Result struct {
	Stdout, Stderr string
	Err            error
	Took           time.Duration
}

// Run runs `claude -p PROMPT ARGS...` in dir against s, with env added to
// the process's environment: Claude Code's configuration in a directory of
// the test's own (no user settings or credentials reach it), only the
// stand-in reachable, no retries, and permission to run its tools without
// asking (the tests run as root, where that needs IS_SANDBOX).
func (s *Server) Run(t testing.TB, claude, dir string, env []string, args ...string) Result {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "claude-config")
	argv := append([]string{"-p", "do the task", "--dangerously-skip-permissions"}, args...)
	c := exec.Command(claude, argv...)
	c.Dir = dir
	c.Env = append(os.Environ(),
		"CLAUDE_CONFIG_DIR="+cfg,
		"ANTHROPIC_BASE_URL="+s.URL,
		"ANTHROPIC_API_KEY=sk-ferry-test",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_AUTOUPDATER=1",
		"CLAUDE_CODE_MAX_RETRIES=0",
		"IS_SANDBOX=1",
	)
	c.Env = append(c.Env, env...)
	var stdout, stderr strings.Builder
	c.Stdout, c.Stderr = &stdout, &stderr
	start := time.Now()
	done := make(chan error, 1)
	if err := c.Start(); err != nil {
		return Result{Err: err}
	}
	go func() { done <- c.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(3 * time.Minute):
		c.Process.Kill()
		err = fmt.Errorf("claude ran past 3 minutes: %v", <-done)
	}
	return Result{Stdout: stdout.String(), Stderr: stderr.String(), Err: err, Took: time.Since(start)}
}
