package remap_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/remap"
)

// BenchmarkWrapperCost measures what ferry-rustc adds to one rustc call:
// the same compile command line (a workspace member of a remapped root,
// with Cargo's usual dozen paths below it) run through the wrapper and
// straight, with true(1) standing in for rustc, alternating so both see
// the same machine. It reports the median of each and their difference
// (wrapper-ms) per call.
func BenchmarkWrapperCost(b *testing.B) {
	wrapper := filepath.Join(testenv.Binaries(b), "ferry-rustc")
	rustc, err := exec.LookPath("true")
	if err != nil {
		b.Skip("no true(1)")
	}
	root := b.TempDir()
	if err := os.Symlink(b.TempDir(), filepath.Join(root, remap.Link)); err != nil {
		b.Fatal(err)
	}
	ws := filepath.Join(root, "crates", "app")
	os.MkdirAll(ws, 0o755)
	tgt := filepath.Join(root, remap.Link, "debug")
	args := []string{"--crate-name", "app", "--edition=2021", "src/main.rs", "--error-format=json", "--crate-type", "bin",
		"-C", "metadata=581e22ba8a018c0f", "--out-dir", tgt + "/deps", "-C", "incremental=" + tgt + "/incremental",
		"-L", "dependency=" + tgt + "/deps"}
	for i := range 8 {
		args = append(args, "--extern", "dep"+string(rune('a'+i))+"="+tgt+"/deps/libdep-0123456789abcdef.rlib")
	}
	run := func(argv ...string) time.Duration {
		c := exec.Command(argv[0], argv[1:]...)
		c.Dir = ws
		start := time.Now()
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", argv[:2], err, out)
		}
		return time.Since(start)
	}
	var through, straight []time.Duration
	b.ResetTimer()
	for b.Loop() {
		through = append(through, run(append([]string{wrapper, rustc}, args...)...))
		straight = append(straight, run(append([]string{rustc}, args...)...))
	}
	median := func(d []time.Duration) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[len(d)/2]) / float64(time.Millisecond)
	}
	t, s := median(through), median(straight)
	b.ReportMetric(t, "through-ms")
	b.ReportMetric(s, "straight-ms")
	b.ReportMetric(t-s, "wrapper-ms")
}
