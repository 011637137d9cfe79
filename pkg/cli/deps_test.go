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

// TestHotBinariesLinkNoMetrics: the Prometheus client is for the stages
// that serve metrics (package metrics, through package pipeline); the shim
// and ferry-rustc, on every cargo and rustc call, never link it.
func TestHotBinariesLinkNoMetrics(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"ferry-shim", "ferry-rustc", "ferry-base"} {
		cmd := exec.Command("go", "list", "-deps", "./cmd/"+b)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps ./cmd/%s: %v\n%s", b, err, out)
		}
		linked := strings.Contains(string(out), "github.com/prometheus/client_golang/")
		if hot := b != "ferry-base"; hot && linked {
			t.Errorf("%s links the Prometheus client: it runs on every cargo or rustc call", b)
		} else if !hot && !linked {
			t.Errorf("%s does not link the Prometheus client: has serving metrics moved?", b)
		}
	}
}
