// Package testenv sets up what tests of Ferry's commands share: a generated
// fixture repository, a private store parent, and a way to run a command in a
// child process that behaves like the installed binary.
package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/knobs"
)

// Repo generates the fixture repository (with opts) in a temporary directory.
func Repo(t testing.TB, opts fixture.Options) *fixture.Repo {
	t.Helper()
	fixture.RequireTools(t)
	r, err := fixture.Generate(filepath.Join(t.TempDir(), "repo"), opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Env is a config.Env with explicit values, for in-process calls.
type Env struct {
	Vars map[string]string
	Home string
	Dir  string
}

func (e Env) Getenv(k string) string   { return e.Vars[k] }
func (e Env) HomeDir() (string, error) { return e.Home, nil }
func (e Env) Getwd() (string, error)   { return e.Dir, nil }
func (e Env) Set(k, v string)          { e.Vars[k] = v }
func NewEnv(home, dir string) Env      { return Env{Vars: map[string]string{}, Home: home, Dir: dir} }
func (e Env) Environ() (out []string) {
	out = append(out, os.Environ()...)
	for k, v := range e.Vars {
		out = append(out, k+"="+v)
	}
	return out
}

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// Binaries builds Ferry's binaries once per test process into a temporary
// directory and returns it: tests of the per-call shim need the real thing
// on PATH. The directory is world-readable so unprivileged re-runs can use it.
func Binaries(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ferry-bin-")
		if err != nil {
			binErr = err
			return
		}
		os.Chmod(dir, 0o755)
		root, err := moduleRoot()
		if err != nil {
			binErr = err
			return
		}
		// With the test knobs (package knobs), which the crash tests arm.
		cmd := exec.Command("go", "build", "-tags", "ferrytest", "-o", dir+"/", "./cmd/...")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		binDir = dir
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

var (
	cleanupMu sync.Mutex
	cleanups  []string
)

// RemoveAtExit registers a directory for Cleanup to remove.
func RemoveAtExit(dir string) {
	cleanupMu.Lock()
	cleanups = append(cleanups, dir)
	cleanupMu.Unlock()
}

// Cleanup removes the binaries Binaries built and every directory given to
// RemoveAtExit. TestMain calls it after m.Run.
func Cleanup() {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	for _, d := range cleanups {
		os.RemoveAll(d)
	}
}

// Buffer is a bytes.Buffer safe for a child process's output read while it runs.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// NeedKnobs skips t, or fails it under make test (fixture.RequireEnv),
// unless this test binary reads the test knobs (built with -tags
// ferrytest): t arms a failpoint or another knob in this process or in a
// process it runs as this binary.
func NeedKnobs(t testing.TB) {
	t.Helper()
	if knobs.Enabled {
		return
	}
	msg := "this test binary was built without -tags ferrytest, so it reads no test knob (package knobs); make test builds with it"
	if os.Getenv(knobs.Require) == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// ModuleRoot is the directory of Ferry's go.mod, for tests that build or
// read the repository itself.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}
