package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/ferrydev/ferry/pkg/failure"
)

// A full filesystem is printed as its mount point and free space in place
// of the bare errno text, with a hint to free space before the error's own
// hint, exit code 8, and the figures in --json.
func TestReportNoSpace(t *testing.T) {
	dir := t.TempDir()
	err := failure.Wrap(failure.BuildFailed, fmt.Errorf("write state: %w", &os.PathError{Op: "write", Path: dir + "/x.json", Err: syscall.ENOSPC}),
		"the previous current base is unchanged", "could not finish")
	var stdout, stderr bytes.Buffer
	code := Print(IO{Stdout: &stdout, Stderr: &stderr}, "ferry-test", err, true)
	if code != 8 {
		t.Fatalf("exit %d, want 8", code)
	}
	got := stderr.String()
	full, _ := failure.Space(err)
	for _, want := range []string{
		"ferry-test: error: could not finish\n",
		"  caused by: no space left on " + full.MountPoint + ": ",
		" free of ",
		"  hint: free space on " + full.MountPoint,
		"        the previous current base is unchanged\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("stderr lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "caused by: no space left on device") {
		t.Errorf("the bare errno text is still printed:\n%s", got)
	}
	var out struct {
		Error struct {
			Kind    string `json:"kind"`
			NoSpace struct {
				MountPoint string `json:"mount_point"`
				Size       uint64 `json:"size_bytes"`
			} `json:"no_space"`
		} `json:"error"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || out.Error.Kind != "no-space" ||
		out.Error.NoSpace.MountPoint != full.MountPoint || out.Error.NoSpace.Size == 0 {
		t.Errorf("--json: %v %s", err, stdout.String())
	}
}

// A joined cause is printed as its parts, each once.
func TestReportJoined(t *testing.T) {
	err := failure.Wrap(failure.Refused, errors.Join(errors.New("first part"), errors.New("second part")), "", "it failed")
	var stderr bytes.Buffer
	Print(IO{Stdout: &bytes.Buffer{}, Stderr: &stderr}, "ferry-test", err, false)
	want := "ferry-test: error: it failed\n  caused by: first part\n  caused by: second part\n"
	if stderr.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", stderr.String(), want)
	}
}
