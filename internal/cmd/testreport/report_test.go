package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// sample is a module whose tests pass, fail, skip and log, in two packages.
var sample = map[string]string{
	"go.mod": "module sample\n\ngo 1.21\n",
	"a/a_test.go": `package a

import (
	"fmt"
	"testing"
	"time"
)

func TestPasses(t *testing.T) { t.Log("passing tests' logs are not printed") }

func TestSlow(t *testing.T) { time.Sleep(300 * time.Millisecond) }

func TestFails(t *testing.T) {
	t.Log("a failing test's log is printed")
	t.Error("boom")
}

func TestSkips(t *testing.T) {
	t.Log("logged before the skip")
	t.Skip("no reflink filesystem here")
}

func TestParent(t *testing.T) {
	t.Run("sub", func(t *testing.T) { t.Skipf("first line\nsecond line") })
	t.Run("ok", func(t *testing.T) {})
}

func TestAlike(t *testing.T) {
	for i := 0; i < 2; i++ {
		t.Run(fmt.Sprint(i), func(t *testing.T) { t.Skipf("no clones in /tmp/d-%d", 1000000+i) })
	}
	t.Run("2", func(t *testing.T) { t.Skipf("no clones in /tmp/d-%d", 1000002) })
}
`,
	"b/b_test.go": `package b

import "testing"

func TestB(t *testing.T) {}
`,
	"c/c.go": "package c\n",
}

func TestReport(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go command: %v", err)
	}
	dir := t.TempDir()
	for name, content := range sample {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	code := run(dir, []string{"-count=1", "./..."}, &stdout, &stderr)
	out := stdout.String()
	t.Logf("exit %d, output:\n%s\nstderr:\n%s", code, out, stderr.String())
	if code != 1 {
		t.Errorf("exit status %d, want go test's 1", code)
	}
	for _, want := range []string{
		"FAIL\tsample/a\t",
		"ok  \tsample/b\t",
		"?   \tsample/c\t[no test files]",
		"tests: 6 passed, 1 failed, 5 skipped\nslowest tests:\n",
		"failed (the output is above):\n  sample/a TestFails\n",
		"skipped, with the reasons the tests gave:\nsample/a\n" +
			"  TestSkips\n      a_test.go:19: logged before the skip\n      a_test.go:20: no reflink filesystem here\n" +
			"  TestParent/sub\n      a_test.go:24: first line\n      second line\n" +
			"  TestAlike/0\n  TestAlike/1\n  TestAlike/2\n      a_test.go:32: no clones in /tmp/d-1000002\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// As plain go test prints a failure: the verdict, then the test's output.
	failure := regexp.MustCompile(`(?m)^--- FAIL: TestFails \([0-9.]+s\)\n    a_test.go:14: a failing test's log is printed\n    a_test.go:15: boom\nFAIL\n`)
	if !failure.MatchString(out) {
		t.Errorf("output does not match %s", failure)
	}
	for _, unwanted := range []string{"=== RUN", "passing tests' logs", "--- PASS", "--- SKIP", "\nPASS\n"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("output has %q, which plain go test does not print", unwanted)
		}
	}
	// The longest test comes first among the slowest.
	if slow := regexp.MustCompile(`slowest tests:\n +[0-9]+\.[0-9]s sample/a TestSlow\n`); !slow.MatchString(out) {
		t.Errorf("output does not match %s", slow)
	}
	// Only the failing package's output comes before its verdict line.
	if i, j := strings.Index(out, "boom"), strings.Index(out, "FAIL\tsample/a"); i < 0 || j < i {
		t.Errorf("the failing test's output is not before its package's FAIL line")
	}

	stdout.Reset()
	if code := run(dir, []string{"-count=1", "./b"}, &stdout, &stderr); code != 0 {
		t.Errorf("a passing run exits %d, output:\n%s", code, stdout.String())
	}
	if code := run(dir, []string{"./nonexistent"}, &stdout, &stderr); code == 0 {
		t.Errorf("go test of a missing package exits 0")
	}

	// A package that does not build is listed among the failures.
	if err := os.WriteFile(filepath.Join(dir, "b", "b_test.go"), []byte("package b\n\nfunc TestB(t *testing.T) {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if code := run(dir, []string{"-count=1", "./b"}, &stdout, &stderr); code == 0 ||
		!strings.Contains(stdout.String(), "undefined: testing") ||
		!strings.Contains(stdout.String(), "failed (the output is above):\n  sample/b (the package: see its output above)\n") {
		t.Errorf("a package that does not build: exit %d, output:\n%s", code, stdout.String())
	}
}
