package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Each binary links what its one job needs (go list -deps). The shim and
// ferry-rustc run on every cargo and rustc call and link no NATS code at
// all; the one-shot tools publish events and link the NATS client only;
// ferry-watch alone hosts the bus and links the server.
var binaries = []struct {
	cmd            string
	client, server bool
}{
	{"ferry", true, false},
	{"ferry-base", true, false},
	{"ferry-spawn", true, false},
	{"ferry-gc", true, false},
	{"ferry-watch", true, true},
	{"ferry-shim", false, false},
	{"ferry-rustc", false, false},
}

func TestEachBinaryLinksWhatItsJobNeeds(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range binaries {
		cmd := exec.Command(goBin, "list", "-deps", "./cmd/"+b.cmd)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps ./cmd/%s: %v\n%s", b.cmd, err, out)
		}
		var client, server []string
		for _, p := range strings.Fields(string(out)) {
			switch {
			case strings.HasPrefix(p, "github.com/nats-io/nats-server/"):
				server = append(server, p)
			case strings.HasPrefix(p, "github.com/nats-io/nats.go"):
				client = append(client, p)
			}
		}
		if len(server) > 0 && !b.server {
			t.Errorf("%s links %d nats-server packages (%s): only ferry-watch hosts the bus", b.cmd, len(server), server[0])
		}
		if b.server && len(server) == 0 {
			t.Errorf("%s links no nats-server package: has the bus host moved?", b.cmd)
		}
		if len(client) > 0 && !b.client {
			t.Errorf("%s links the NATS client (%s): it runs on every cargo or rustc call", b.cmd, client[0])
		}
		t.Logf("%-12s %3d packages, %2d of the NATS client, %2d of the server", b.cmd, len(strings.Fields(string(out))), len(client), len(server))
	}
}

// TestOnlyStagesLinkMetrics: the Prometheus client is for the stages that
// serve metrics (ferry-watch, ferry-base, ferry-gc, through package
// metrics); the shim and ferry-rustc, on every cargo and rustc call, and
// the front and ferry-spawn, never link it (its package initialisation
// doubled ferry-spawn's start, 5 to 10 ms, when they did).
func TestOnlyStagesLinkMetrics(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range binaries {
		cmd := exec.Command("go", "list", "-deps", "./cmd/"+b.cmd)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps ./cmd/%s: %v\n%s", b.cmd, err, out)
		}
		linked := strings.Contains(string(out), "github.com/prometheus/client_golang/")
		switch stage := b.cmd == "ferry-watch" || b.cmd == "ferry-base" || b.cmd == "ferry-gc"; {
		case stage && !linked:
			t.Errorf("%s does not link the Prometheus client: has serving metrics moved?", b.cmd)
		case !stage && linked:
			t.Errorf("%s links the Prometheus client: only the stages serve metrics", b.cmd)
		}
	}
}
