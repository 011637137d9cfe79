// Package e2e runs Ferry's commands end to end as a person would at a
// terminal: testscript files under testdata/, with the real binaries (run
// in-process from this test binary), real git and real cargo.
package e2e

import (
	"os"
	"os/user"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/unpriv"
	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/shim"
)

func TestMain(m *testing.M) {
	sandbox.Init()
	testscript.Main(m, map[string]func(){
		"ferry":       func() { os.Exit(cli.Front(os.Args[1:], cli.StdIO())) },
		"ferry-base":  func() { os.Exit(cli.Base(os.Args[1:], cli.StdIO())) },
		"ferry-spawn": func() { os.Exit(cli.Spawn(os.Args[1:], cli.StdIO())) },
		"ferry-shim":  func() { os.Exit(shim.Main(os.Args[1:])) },
	})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata",
		Setup: func(env *testscript.Env) error {
			// $BIN holds the commands under test, for scripts that set PATH.
			env.Setenv("BIN", filepath.SplitList(env.Getenv("PATH"))[0])
			// Keep the user's git configuration out of the scripts.
			env.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
			env.Setenv("GIT_CONFIG_NOSYSTEM", "1")
			env.Setenv("HOME", filepath.Join(env.WorkDir, "userhome"))
			env.Setenv("TESTUSER", testUser())
			for _, k := range []string{"RUSTUP_HOME", "CARGO_HOME"} {
				if v := os.Getenv(k); v != "" {
					env.Setenv(k, v)
				}
			}
			return nil
		},
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "fixture":
				// git, cargo and the crate sources the fixture command
				// needs. Missing, they skip the script under plain go test
				// and fail it under make test (fixture.RequireEnv).
				err := fixture.CheckTools("")
				if err != nil && fixture.Required() {
					return false, err
				}
				return err == nil, nil
			case "otheruser":
				// Root, and the unprivileged test user ($TESTUSER) to give
				// files to: scripts play another user with exec chown.
				_, err := user.Lookup(testUser())
				return os.Geteuid() == 0 && err == nil, nil
			}
			return false, nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// fixture DIR: generate the test workspace repository at DIR.
			"fixture": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 1 {
					ts.Fatalf("usage: fixture DIR")
				}
				if _, err := fixture.Generate(ts.MkAbs(args[0]), fixture.Options{}); err != nil {
					ts.Fatalf("generate fixture: %v", err)
				}
			},
		},
	})
}

// testUser is the unprivileged user CI creates (FERRY_TEST_USER overrides).
func testUser() string {
	if u := os.Getenv("FERRY_TEST_USER"); u != "" {
		return u
	}
	return unpriv.DefaultUser
}
