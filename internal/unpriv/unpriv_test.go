package unpriv

import (
	"reflect"
	"testing"
)

// Output of a test binary run with -test.v, as go 1.26 prints it: log
// lines stream after the test's "===" line, subtests' verdicts come at their
// parent's end, and parallel tests interleave under "=== NAME".
const verbose = `=== RUN   TestA
    a_test.go:10: no reflink filesystem here
--- SKIP: TestA (0.00s)
=== RUN   TestB
=== RUN   TestB/ext4
    b_test.go:20: checked ext4
=== RUN   TestB/tmpfs
    b_test.go:22: no writable tmpfs at /dev/shm
    b_test.go:23: second line
--- PASS: TestB (0.01s)
    --- PASS: TestB/ext4 (0.00s)
    --- SKIP: TestB/tmpfs (0.00s)
=== RUN   TestC
=== PAUSE TestC
=== RUN   TestD
=== PAUSE TestD
=== CONT  TestC
=== CONT  TestD
    d_test.go:5: user namespaces are blocked
=== NAME  TestC
    c_test.go:7: fine
--- SKIP: TestD (0.00s)
--- PASS: TestC (0.00s)
PASS
`

func TestSkips(t *testing.T) {
	want := []skipped{
		{"TestA", "a_test.go:10: no reflink filesystem here"},
		{"TestB/tmpfs", "b_test.go:22: no writable tmpfs at /dev/shm\nb_test.go:23: second line"},
		{"TestD", "d_test.go:5: user namespaces are blocked"},
	}
	if got := skips(verbose); !reflect.DeepEqual(got, want) {
		t.Errorf("skips:\n got %q\nwant %q", got, want)
	}
}
