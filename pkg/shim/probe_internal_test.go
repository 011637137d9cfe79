package shim

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ferrydev/ferry/pkg/cli/report"
	"github.com/ferrydev/ferry/pkg/failure"
)

// A probe that reached a failing shim reads that shim's printed error
// back: its message with its causes, and its hint, whole.
func TestProbeFailureReadsThePrintedError(t *testing.T) {
	err := failure.Wrap(failure.Refused, errors.New("the store is not yours"),
		"remove the agent\nor run as its owner", "cargo reached the shim again")
	var stderr bytes.Buffer
	report.Print(report.IO{Stdout: &bytes.Buffer{}, Stderr: &stderr}, Prog, err, false)
	got := probeFailure("   Compiling x\n" + stderr.String() + "warning: after\n")
	if got == nil {
		t.Fatalf("no failure read from\n%s", stderr.String())
	}
	if want := "cargo reached the shim again: the store is not yours"; got.Error() != want {
		t.Errorf("message %q, want %q", got.Error(), want)
	}
	if h := failure.HintOf(got); h != "remove the agent\nor run as its owner" {
		t.Errorf("hint %q", h)
	}
	if probeFailure("   Compiling x\nerror: could not compile\n") != nil {
		t.Error("cargo's own error read as a shim's")
	}
}
