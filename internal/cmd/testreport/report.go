package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64 // seconds, on a test's or package's pass, fail or skip
}

// run runs go test -json with args in dir (the current directory when
// empty), writes the report to stdout and returns go test's exit status.
func run(dir string, args []string, stdout, stderr io.Writer) int {
	cmd := exec.Command("go", append([]string{"test", "-json"}, args...)...)
	cmd.Dir = dir
	cmd.Stderr = stderr
	events, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(stderr, "testreport:", err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, "testreport:", err)
		return 1
	}
	r := newReport(stdout)
	sc := bufio.NewScanner(events)
	sc.Buffer(make([]byte, 1<<20), 64<<20) // a test may log long lines
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(stdout, sc.Text()) // not an event: pass it on
			continue
		}
		r.add(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(stderr, "testreport: reading go test's output:", err)
		io.Copy(io.Discard, events) // let go test finish
	}
	err = cmd.Wait()
	r.summary()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() > 0:
		return exit.ExitCode()
	default:
		fmt.Fprintln(stderr, "testreport: go test:", err)
		return 1
	}
}

type testID struct{ pkg, test string }

// skip is a skipped test and the lines it printed, the reason among them.
type skip struct {
	testID
	lines []string
}

// report turns the events into plain go test's output, and keeps the skips.
type report struct {
	out     io.Writer
	running map[testID][]string // output of tests still running
	skips   []skip
	failed  []testID
	counts  map[string]int // by action: pass, fail, skip
	timed   []timed        // top-level tests that ended, with their time
}

// timed is a top-level test and the seconds it took.
type timed struct {
	testID
	secs float64
}

// slowest is how many of the longest tests the summary names: where a
// suite's time goes, so a slow CI run points at its cause.
const slowest = 10

func newReport(out io.Writer) *report {
	return &report{out: out, running: map[testID][]string{}, counts: map[string]int{}}
}

func (r *report) add(e event) {
	id := testID{e.Package, e.Test}
	if e.Test != "" && !strings.Contains(e.Test, "/") && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip") {
		r.timed = append(r.timed, timed{id, e.Elapsed})
	}
	switch {
	case e.Action == "build-output":
		io.WriteString(r.out, e.Output)
	case e.Action == "output" && e.Test == "":
		// The package's own lines: "ok  pkg 1.2s", "FAIL", a panic outside
		// any test. Plain go test drops the binary's "PASS".
		if strings.HasPrefix(e.Output, "FAIL") {
			r.flush(e.Package) // before the verdict: tests a crash or timeout cut short
		}
		if e.Output != "PASS\n" {
			io.WriteString(r.out, e.Output)
		}
	case e.Action == "output":
		r.running[id] = append(r.running[id], e.Output)
	case e.Test == "" && e.Action == "fail":
		// A package whose build failed, or whose binary failed outside a
		// test (a crash, a timeout, TestMain), has no failed test to show.
		if !r.hasFailure(e.Package) {
			r.failed = append(r.failed, testID{e.Package, "(the package: see its output above)"})
		}
	case e.Test == "":
		// A package's start, pass or skip ("no test files").
	case e.Action == "pass":
		r.counts["pass"]++
		delete(r.running, id)
	case e.Action == "fail":
		// Plain go test puts the verdict line before the test's output.
		r.counts["fail"]++
		r.failed = append(r.failed, id)
		var verdict, rest []string
		for _, l := range printed(r.running[id]) {
			if strings.HasPrefix(strings.TrimSpace(l), "--- FAIL: ") {
				verdict = append(verdict, l)
			} else {
				rest = append(rest, l)
			}
		}
		r.print(append(verdict, rest...))
		delete(r.running, id)
	case e.Action == "skip":
		r.counts["skip"]++
		r.skips = append(r.skips, skip{id, printed(r.running[id])})
		delete(r.running, id)
	}
}

func (r *report) hasFailure(pkg string) bool {
	for _, id := range r.failed {
		if id.pkg == pkg {
			return true
		}
	}
	return false
}

// flush prints the output of pkg's tests that never finished.
func (r *report) flush(pkg string) {
	var ids []testID
	for id := range r.running {
		if id.pkg == pkg {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].test < ids[j].test })
	for _, id := range ids {
		fmt.Fprintf(r.out, "--- %s did not finish; its output:\n", id.test)
		r.print(r.running[id])
		delete(r.running, id)
	}
}

func (r *report) print(lines []string) {
	for _, l := range printed(lines) {
		io.WriteString(r.out, l)
	}
}

// printed drops the progress lines ("=== RUN" and the like) that plain go
// test does not print without -v.
func printed(lines []string) []string {
	var out []string
	for _, l := range lines {
		if !strings.HasPrefix(l, "=== ") {
			out = append(out, l)
		}
	}
	return out
}

// summary prints the counts, the failed tests (their output is above) and
// every skip, by package. Skips in a row with the same reason (up to
// temporary names and line numbers) share one copy of it.
func (r *report) summary() {
	fmt.Fprintf(r.out, "\ntests: %d passed, %d failed, %d skipped\n", r.counts["pass"], r.counts["fail"], r.counts["skip"])
	r.slowest()
	if len(r.failed) > 0 {
		fmt.Fprintf(r.out, "failed (the output is above):\n")
		for _, id := range r.failed {
			fmt.Fprintf(r.out, "  %s %s\n", id.pkg, id.test)
		}
	}
	if len(r.skips) == 0 {
		return
	}
	sort.SliceStable(r.skips, func(i, j int) bool { return r.skips[i].pkg < r.skips[j].pkg })
	fmt.Fprintf(r.out, "skipped, with the reasons the tests gave:\n")
	for i, s := range r.skips {
		if i == 0 || s.pkg != r.skips[i-1].pkg {
			fmt.Fprintf(r.out, "%s\n", s.pkg)
		}
		fmt.Fprintf(r.out, "  %s\n", s.test)
		next := i + 1
		if next < len(r.skips) && r.skips[next].pkg == s.pkg && alike(reason(r.skips[next]), reason(s)) {
			continue
		}
		for _, l := range reason(s) {
			fmt.Fprintf(r.out, "      %s\n", l)
		}
	}
}

// slowest prints the longest top-level tests, longest first.
func (r *report) slowest() {
	sort.SliceStable(r.timed, func(i, j int) bool { return r.timed[i].secs > r.timed[j].secs })
	n := min(len(r.timed), slowest)
	if n == 0 {
		return
	}
	fmt.Fprintf(r.out, "slowest tests:\n")
	for _, t := range r.timed[:n] {
		fmt.Fprintf(r.out, "  %7.1fs %s %s\n", t.secs, t.pkg, t.test)
	}
}

// maxReason bounds the lines shown for one skip: a test may log a lot
// before it skips, and the reason is what it said last.
const maxReason = 6

// reason is what a skipped test printed, without its verdict line.
func reason(s skip) []string {
	var lines []string
	for _, l := range s.lines {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--- SKIP: ") {
			lines = append(lines, t)
		}
	}
	if len(lines) > maxReason {
		lines = append([]string{"…"}, lines[len(lines)-maxReason:]...)
	}
	if len(lines) == 0 {
		lines = []string{"(no reason given)"}
	}
	return lines
}

// noise is what may differ between two reasons that say the same: long
// numbers (temporary names) and the line of the call that skipped.
var noise = regexp.MustCompile(`[0-9]{6,}|\.go:[0-9]+:`)

// alike reports whether two reasons differ at most in noise.
func alike(a, b []string) bool {
	mask := func(l []string) string { return noise.ReplaceAllString(strings.Join(l, "\n"), "#") }
	return mask(a) == mask(b)
}
