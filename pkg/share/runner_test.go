package share_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/testenv"
)

// Runner mode under deploy/nats/sharing.conf: a runner connected as the
// runner user (which cannot write the bucket) runs `ferry up --runner`, and
// installs the base the publisher publishes afterwards; its durable
// consumers on the events stream, its acknowledgements and its own
// base.ready are allowed (before this test, its durable was refused).
func TestRunnerModeUnderSharingConf(t *testing.T) {
	bin := testenv.Binaries(t)
	bus := startSharing(t)
	trust := []string{"SSL_CERT_FILE=" + bus.ca}
	root := t.TempDir()
	repoA := testenv.Repo(t, fixture.Options{})
	a := newHost(t, bin, repoA.Dir, filepath.Join(root, "a"), bus.publisher)
	a.extra = trust
	repoB := filepath.Join(root, "b", "repo")
	clone(t, repoA.Dir, repoB)
	b := newHost(t, bin, repoB, filepath.Join(root, "b"), bus.runner)
	b.extra = trust
	// A cheap warm command: this test is about the bus, not the build.
	for _, dir := range []string{repoA.Dir, repoB} {
		if err := os.WriteFile(filepath.Join(dir, "ferry.toml"), []byte("[base]\nwarm = [\"true\"]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	up := exec.Command(filepath.Join(bin, "ferry"), "up", "--runner")
	up.Dir, up.Env = repoB, b.env(nil)
	var out bytes.Buffer
	up.Stdout, up.Stderr = &out, &out
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		up.Process.Signal(os.Interrupt)
		up.Wait()
		t.Logf("ferry up --runner:\n%s", out.String())
	}()
	time.Sleep(time.Second) // the runner is waiting before anything is published

	var built struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(a.must(t, "base", "--publish", "--json")), &built); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for b.bases(t)[built.ID] != "ready" {
		if time.Now().After(deadline) {
			t.Fatalf("the runner did not install base %s; it has %v", built.ID, b.bases(t))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Started before anything was published, the runner found no
	// streams and may not create them (only the publisher may): it waited.
	// Nothing else it does is refused.
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "Permissions Violation") && !strings.Contains(line, "$JS.API.STREAM.CREATE.") {
			t.Errorf("the runner was refused: %s", line)
		}
	}
}
