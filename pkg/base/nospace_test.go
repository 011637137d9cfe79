package base_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/store"
)

// A warm build that fills the store's filesystem is reported as that (exit
// 8), with the filesystem's mount point and its free space when the build
// failed, and a hint to free space, not to look at the commit in a
// checkout; the partial base is discarded.
func TestWarmBuildOutOfSpace(t *testing.T) {
	home := testenv.SmallFS(t, "24m")
	e := setup(t, "cargo build --workspace --all-targets")
	e.home = home
	common, _ := e.g.CommonDir()
	var err error
	if e.store, err = store.Open(e.home, common, e.g.Top); err != nil {
		t.Fatal(err)
	}
	c := e.command("--json")
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err = c.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 8 {
		t.Fatalf("ferry-base on a full filesystem: %v, want exit 8:\n%s", err, tail(stderr.String()))
	}
	report := stderr.String()[strings.LastIndex(stderr.String(), "ferry-base: error:"):]
	for _, want := range []string{
		`error: warm command "cargo build --workspace --all-targets" ran out of space`,
		"caused by: no space left on " + home + ": ",
		" free of 24 MiB",
		"hint: free space on " + home,
		"the previous current base is unchanged",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "checkout") {
		t.Errorf("the report sends the user to a checkout:\n%s", report)
	}
	var out struct {
		Error struct {
			Kind    string `json:"kind"`
			NoSpace struct {
				MountPoint string `json:"mount_point"`
			} `json:"no_space"`
		} `json:"error"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || out.Error.Kind != "no-space" || out.Error.NoSpace.MountPoint != home {
		t.Errorf("--json: %v %s", err, stdout.String())
	}
	ents, _ := os.ReadDir(e.store.BasesDir())
	for _, d := range ents {
		if d.IsDir() {
			t.Errorf("the failed base left %s", d.Name())
		}
	}
}

func tail(s string) string {
	if len(s) > 3000 {
		return s[len(s)-3000:]
	}
	return s
}

// Under the free-space floor ([gc] min-free) a base build is refused before
// it starts: exit 8, the figures and the setting named, nothing made, and
// current unchanged; reusing a ready base writes nothing and is never
// refused.
func TestBuildRefusedUnderTheFloor(t *testing.T) {
	e := setupLight(t, "true")
	run := func(floor string) (string, string, error) {
		t.Helper()
		c := e.command("--json")
		if floor != "" {
			c.Env = append(c.Env, "FERRY_MIN_FREE="+floor)
		}
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		err := c.Run()
		return stdout.String(), stderr.String(), err
	}
	stdout, stderr, err := run("1000T")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 8 {
		t.Fatalf("ferry-base under the floor: %v, want exit 8:\n%s", err, stderr)
	}
	for _, want := range []string{"building the base of " + e.repo.Head[:12] + " refused: ", " free on ", "under the free-space floor of 1000 TiB",
		"hint: free space on ", "FERRY_MIN_FREE (now 1000 TiB"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if !strings.Contains(stdout, `"kind": "no-space"`) {
		t.Errorf("--json: %s", stdout)
	}
	if ents, _ := filepath.Glob(filepath.Join(e.store.Dir, "bases", "*")); len(ents) != 0 {
		t.Errorf("a refused build left %v", ents)
	}
	if cur, err := e.store.Current(); err == nil && cur != "" {
		t.Errorf("a refused build set current to %s", cur)
	}

	if _, stderr, err := run(""); err != nil {
		t.Fatalf("ferry-base with the default floor: %v\n%s", err, stderr)
	}
	stdout, stderr, err = run("1000T")
	if err != nil || !strings.Contains(stdout, `"reused": true`) {
		t.Fatalf("reusing the ready base under the floor: %v\n%s%s", err, stdout, stderr)
	}
}
