package knobs_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/internal/testenv"
)

// A release build (no ferrytest tag: make build, make install, go install)
// reads no test knob: no binary holds a knob's name, and `go version -m`
// shows no ferrytest tag. The tests' own build (testenv.Binaries) holds
// them, which shows the check can fail.
func TestReleaseBuildHasNoKnobs(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	release := t.TempDir()
	build := exec.Command("go", "build", "-o", release+"/", "./cmd/...")
	build.Dir = testenv.ModuleRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	found := func(dir string) map[string][]string {
		t.Helper()
		bins, err := filepath.Glob(filepath.Join(dir, "ferry*"))
		if err != nil || len(bins) < 7 {
			t.Fatalf("binaries in %s: %v (%v)", dir, bins, err)
		}
		out := map[string][]string{}
		for _, b := range bins {
			data, err := os.ReadFile(b)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range knobs.Read {
				if bytes.Contains(data, []byte(k)) {
					out[filepath.Base(b)] = append(out[filepath.Base(b)], k)
				}
			}
			v, err := exec.Command("go", "version", "-m", b).Output()
			if err != nil {
				t.Fatalf("go version -m %s: %v", b, err)
			}
			if strings.Contains(string(v), "ferrytest") {
				out[filepath.Base(b)] = append(out[filepath.Base(b)], "the ferrytest tag")
			}
		}
		return out
	}
	for bin, ks := range found(release) {
		t.Errorf("release build: %s holds %s", bin, strings.Join(ks, ", "))
	}
	tested := found(testenv.Binaries(t))
	if ks := tested["ferry-base"]; len(ks) < len(knobs.Read) {
		t.Errorf("the tests' build of ferry-base holds %v, want every knob it reads (%v): the check would find nothing", ks, knobs.Read)
	}
}
