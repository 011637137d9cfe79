// Package testenv sets up what tests of Ferry's commands share: a generated
// fixture repository, a private store parent, and a way to run a command in a
// child process that behaves like the installed binary.
package testenv

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ferrydev/ferry/pkg/fixture"
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
