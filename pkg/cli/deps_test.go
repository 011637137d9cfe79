package cli

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/knobs"
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

// budgets are the binaries that start on every cargo or rustc call:
// cmd/<binary>/deps.txt lists every
// package `go list -deps` names for the binary, the standard library
// included, one a line, sorted. A change that adds a package to one (or
// drops one) fails TestHotBinariesKeepTheirBudget until deps.txt says so
// too, so the review sees it; a forbidden package (an import path, or a
// prefix ending in "/", with why) fails it whatever deps.txt says.
var budgets = []struct {
	cmd       string
	forbidden map[string]string
}{
	// The shim starts on every cargo call and initialises all it links
	// each time (its sandbox entry execs it again, but its C constructor
	// turns that exec into the command before any Go package starts).
	{"ferry-shim", map[string]string{
		"crypto/internal/fips140/":              fipsWhy,
		"github.com/ferrydev/ferry/pkg/agent":   "spawn, adopt and rm, and through them the base builder: the shim reads agent.json through package record and enters the sandbox through package session",
		"github.com/ferrydev/ferry/pkg/base":    "the base builder: the shim reads base.json through package record",
		"github.com/ferrydev/ferry/pkg/config":  "the settings, with the suggestions for ferry.toml's typos: an agent's calls follow its record, never the settings",
		"github.com/ferrydev/ferry/pkg/warmset": "what Ferry learns from the demand log (warm sets, hit rates, why): the shim only records, through package record/demand",
		"github.com/ferrydev/ferry/pkg/fork":    "making, folding and measuring forks: the shim uses an agent's fork through package lifecycle",
		"github.com/ferrydev/ferry/pkg/share":   "pulling and pushing bases between hosts",
		"github.com/nats-io/":                   "NATS, client or server: the shim reads state files directly and never dials the bus",
	}},
	{"ferry-rustc", map[string]string{
		"crypto/internal/fips140/":             fipsWhy,
		"github.com/ferrydev/ferry/pkg/config": "the settings: the wrapper takes what it needs from its environment",
		"github.com/pelletier/":                "a TOML parser: the wrapper parses no configuration",
	}},
}

// fipsWhy is why a per-call binary links no crypto/sha256.
const fipsWhy = "the standard library's FIPS module, which crypto/sha256 links (25 packages, AES-GCM and a DRBG among them, with their initializers): a per-call binary's names are sums of package digest"

// TestHotBinariesKeepTheirBudget holds each of budgets to its deps.txt.
// With FERRY_UPDATE_LISTS=1 (knobs.UpdateLists) it writes deps.txt instead,
// unless a forbidden package is linked.
//
// The list is taken for linux/amd64 with cgo, as make build builds the
// shim (its sandbox entry is a C constructor), so it is the same on every
// host. A Go release that moves packages of the standard library changes
// it: regenerate the lists then.
func TestHotBinariesKeepTheirBudget(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv(knobs.Require) == "1" {
			t.Fatal(err)
		}
		t.Skip("no go command to list the binaries' packages")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range budgets {
		got := linked(t, goBin, root, b.cmd)
		for _, p := range got {
			for f, why := range b.forbidden {
				if p == f || strings.HasSuffix(f, "/") && strings.HasPrefix(p, f) {
					t.Errorf("%s links %s, which it must not: %s", b.cmd, p, why)
				}
			}
		}
		if t.Failed() {
			continue
		}
		file := filepath.Join(root, "cmd", b.cmd, "deps.txt")
		if os.Getenv(knobs.UpdateLists) == "1" {
			if err := os.WriteFile(file, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		want := strings.Fields(string(data))
		slices.Sort(want)
		if added, removed := missing(want, got), missing(got, want); len(added)+len(removed) > 0 {
			t.Errorf("%s links other packages than cmd/%s/deps.txt lists:\n%s%s"+
				"if that is meant, rewrite the list (%s=1 go test -run TestHotBinariesKeepTheirBudget ./pkg/cli) and commit it with the change",
				b.cmd, b.cmd, lines("  + ", added), lines("  - ", removed), knobs.UpdateLists)
		}
	}
}

// linked is the sorted `go list -deps` of ./cmd/<binary> for linux/amd64
// with cgo.
func linked(t *testing.T, goBin, root, binary string) []string {
	t.Helper()
	cmd := exec.Command(goBin, "list", "-deps", "./cmd/"+binary)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/%s: %v\n%s", binary, err, stderr.String())
	}
	pkgs := strings.Fields(string(out))
	slices.Sort(pkgs)
	return pkgs
}

// missing returns the entries of b that sorted a lacks.
func missing(a, b []string) []string {
	var out []string
	for _, p := range b {
		if _, ok := slices.BinarySearch(a, p); !ok {
			out = append(out, p)
		}
	}
	return out
}

// lines is each of ps on a line of its own after prefix.
func lines(prefix string, ps []string) string {
	var s strings.Builder
	for _, p := range ps {
		s.WriteString(prefix + p + "\n")
	}
	return s.String()
}
