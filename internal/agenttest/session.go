package agenttest

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Session is a long-lived process in an agent's sandbox: `ferry run NAME --
// sh -c SCRIPT`, whose script prints "ready" once it has done its setup.
type Session struct {
	cmd  *exec.Cmd
	out  *bufio.Reader
	done chan error
}

// Pid is the session's `ferry run` process.
func (s *Session) Pid() int { return s.cmd.Process.Pid }

// StartSession starts a session in agent name's sandbox and waits for its
// "ready".
func (w *World) StartSession(t *testing.T, name, script string) *Session {
	t.Helper()
	c := exec.Command(filepath.Join(w.Bin, "ferry"), "run", name, "--", "sh", "-c", script)
	c.Dir, c.Env = w.Repo.Dir, w.Env(nil)
	c.Stderr = os.Stderr
	stdout, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	s := &Session{cmd: c, out: bufio.NewReader(stdout), done: make(chan error, 1)}
	t.Cleanup(func() { s.Stop() })
	line := make(chan string, 1)
	go func() {
		l, _ := s.out.ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if strings.TrimSpace(l) != "ready" {
			t.Fatalf("session in %s: got %q before ready", name, l)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("session in %s never became ready", name)
	}
	go func() {
		io.Copy(io.Discard, s.out)
		s.done <- c.Wait()
	}()
	return s
}

func (s *Session) Stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
}

func (w *World) SpawnOverlay(t *testing.T, name string) AgentJSON {
	t.Helper()
	a := w.Spawn(t, name, "--backend", "overlay")
	var rec struct {
		Backend string `json:"backend"`
	}
	data, err := os.ReadFile(filepath.Join(w.StoreDir(t), "agents", name, "agent.json"))
	if err != nil || json.Unmarshal(data, &rec) != nil || rec.Backend != "overlay" {
		t.Fatalf("agent %s: backend %q (%v), want overlay", name, rec.Backend, err)
	}
	return a
}

// In runs sh -c script in agent name's sandbox and returns its stdout,
// trimmed; the test fails if the script does.
func (w *World) In(t *testing.T, name, script string) string {
	t.Helper()
	out, stderr, err := w.Ferry(w.Repo.Dir, nil, "run", name, "--", "sh", "-c", script)
	if err != nil {
		t.Fatalf("ferry run %s -- sh -c %q: %v\n%s%s", name, script, err, out, stderr)
	}
	return strings.TrimSpace(out)
}

// RunIn runs sh -c script in agent name's sandbox and returns its output
// (stdout, then stderr) and its exit error.
func (w *World) RunIn(name, script string) (string, error) {
	out, stderr, err := w.Ferry(w.Repo.Dir, nil, "run", name, "--", "sh", "-c", script)
	return out + stderr, err
}
