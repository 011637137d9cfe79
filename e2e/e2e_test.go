// Package e2e runs Ferry's commands end to end as a person would at a
// terminal: testscript files under testdata/, with the real binaries (run
// in-process from this test binary), real git and real cargo.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/internal/nouserns"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/cli/basecmd"
	"github.com/ferrydev/ferry/pkg/cli/ferrycmd"
	"github.com/ferrydev/ferry/pkg/cli/gccmd"
	"github.com/ferrydev/ferry/pkg/cli/spawncmd"
	"github.com/ferrydev/ferry/pkg/cli/watchcmd"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/shim"
)

func TestMain(m *testing.M) {
	sandbox.Init()
	testscript.Main(m, map[string]func(){
		"ferry":       func() { os.Exit(ferrycmd.Main(os.Args[1:], cli.StdIO())) },
		"ferry-base":  func() { os.Exit(basecmd.Main(cli.Name(os.Args[0]), os.Args[1:], cli.StdIO())) },
		"ferry-spawn": func() { os.Exit(spawncmd.Main(cli.Name(os.Args[0]), os.Args[1:], cli.StdIO())) },
		"ferry-gc":    func() { os.Exit(gccmd.Main(cli.Name(os.Args[0]), os.Args[1:], cli.StdIO())) },
		"ferry-watch": func() { os.Exit(watchcmd.Main(cli.Name(os.Args[0]), os.Args[1:], cli.StdIO())) },
		"ferry-shim":  func() { os.Exit(shim.Main(os.Args[1:])) },
		// nouserns CMD...: run CMD under a seccomp filter denying user
		// namespaces, as Docker's default profile does.
		"nouserns": func() {
			if err := nouserns.Exec(os.Args[1:]); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		},
	})
}

// required is a condition's answer when why (nil when it is met) says
// whether the host provides what it names: under make test
// (fixture.RequireEnv), a host without it fails the script, which would
// otherwise skip it, or the lines it guards, silently.
func required(cond string, why error) (bool, error) {
	if why == nil {
		return true, nil
	}
	if fixture.Required() {
		return false, fmt.Errorf("condition [%s] is required under %s=1, and this host fails it: %w", cond, fixture.RequireEnv, why)
	}
	return false, nil
}

func TestScripts(t *testing.T) {
	bin := testenv.Binaries(t)
	t.Cleanup(testenv.Cleanup)
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
			// $FERRYBIN holds Ferry's real binaries, for scripts that need
			// them as installed (the shim is found beside ferry).
			env.Setenv("FERRYBIN", bin)
			for _, k := range []string{"RUSTUP_HOME", "CARGO_HOME", knobs.TestXFS} {
				if v := os.Getenv(k); v != "" {
					env.Setenv(k, v)
				}
			}
			// HOME is the script's: keep rustup and cargo where they are.
			if home, err := os.UserHomeDir(); err == nil {
				for k, d := range map[string]string{"RUSTUP_HOME": ".rustup", "CARGO_HOME": ".cargo"} {
					if env.Getenv(k) == "" {
						if _, err := os.Stat(filepath.Join(home, d)); err == nil {
							env.Setenv(k, filepath.Join(home, d))
						}
					}
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
			case "userns":
				// The namespace sandbox can be built here. Under make
				// test, a host without it fails the script (required).
				return required(cond, sandbox.Probe())
			case "overlay":
				// An unprivileged overlay mounts in a user namespace here.
				b, err := platform.Real().OverlayBlocker(os.TempDir())
				if err == nil && b != nil {
					err = b
				}
				return required(cond, err)
			case "reflink":
				// $FERRY_TEST_XFS is a filesystem that clones files
				// (make test's bootstrap mounts one).
				if knobs.XFS() == "" {
					return required(cond, fmt.Errorf("%s is not set", knobs.TestXFS))
				}
				ok, err := fork.CanReflink(knobs.XFS())
				if err == nil && !ok {
					err = fmt.Errorf("%s (%s) does not clone files", knobs.TestXFS, knobs.XFS())
				}
				return required(cond, err)
			case "blockable":
				// A user namespace in which nested ones can be blocked the
				// way a restricted host blocks them: scripts run Ferry
				// under `unshare --user --map-root-user` with its
				// user.max_user_namespaces set to 0 (creating one then
				// fails with ENOSPC).
				err := exec.Command("unshare", "--user", "--map-root-user", "sh", "-c",
					"echo 0 > /proc/sys/user/max_user_namespaces && ! unshare --user true 2>/dev/null").Run()
				return err == nil, nil
			case "nightly":
				// rustup has a nightly toolchain (checksum freshness).
				// Bootstrap cannot install one (no network to rustup's
				// servers), so a script without it skips, saying so
				// (`[!nightly] skip`), under make test too.
				out, err := exec.Command("rustup", "toolchain", "list").Output()
				return err == nil && strings.Contains(string(out), "nightly"), nil
			case "seccomp":
				// nouserns's filter is written for x86-64 Linux.
				return runtime.GOOS == "linux" && runtime.GOARCH == "amd64", nil
			case "otheruser":
				// Root, and the unprivileged test user ($TESTUSER) to give
				// files to: scripts play another user with exec chown.
				_, err := user.Lookup(testUser())
				return os.Geteuid() == 0 && err == nil, nil
			}
			// An unknown condition would skip its script silently.
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// fixture [-noregistry] DIR: generate the test workspace
			// repository at DIR; -noregistry leaves out the registry
			// crates (fixture.Options.NoRegistry), most of a cold
			// build's work, where a script's subject does not depend on
			// where crates come from.
			"fixture": func(ts *testscript.TestScript, neg bool, args []string) {
				var opts fixture.Options
				if len(args) == 2 && args[0] == "-noregistry" {
					opts.NoRegistry, args = true, args[1:]
				}
				if len(args) != 1 {
					ts.Fatalf("usage: fixture [-noregistry] DIR")
				}
				if _, err := fixture.Generate(ts.MkAbs(args[0]), opts); err != nil {
					ts.Fatalf("generate fixture: %v", err)
				}
			},
		},
	})
}

// testUser is the unprivileged user CI creates (knobs.TestUser overrides).
func testUser() string { return knobs.User() }
