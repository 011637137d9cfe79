package git

import (
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/failure"
)

// A branch name git refuses, or one git expands to an existing branch, is
// bad input in Ferry's words; a good one passes.
func TestCheckBranchName(t *testing.T) {
	dir, r := newRepo(t)
	if err := r.CheckBranchName("ferry/fix-parser.2"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"bad..name", "-x", "HEAD", "a b", "x.lock", "", "a@{b"} {
		err := r.CheckBranchName(bad)
		wantKind(t, err, failure.Usage)
		if !strings.Contains(err.Error(), "is not a valid branch name") || failure.HintOf(err) == "" {
			t.Errorf("%q: %v (hint %q)", bad, err, failure.HintOf(err))
		}
	}
	gitT(t, dir, "checkout", "-q", "-b", "other")
	gitT(t, dir, "checkout", "-q", "main")
	err := r.CheckBranchName("@{-1}")
	wantKind(t, err, failure.Usage)
	if !strings.Contains(err.Error(), `existing branch "other"`) {
		t.Errorf("@{-1}: %v", err)
	}
}

// git saying "No space left on device" is an ENOSPC, with the path it
// quoted (relative to its working directory) for the printer.
func TestNoSpacePath(t *testing.T) {
	for _, c := range []struct{ stderr, path string }{
		{"fatal: cannot update the ref 'refs/heads/b2': unable to append to '.git/logs/refs/heads/b2': No space left on device", "/repo/.git/logs/refs/heads/b2"},
		{"error: unable to create '/r/.git/packed-refs.lock': No space left on device", "/r/.git/packed-refs.lock"},
		{"fatal: unable to write loose object file: No space left on device", "/repo"},
		{"fatal: 'x' is not a valid branch name", ""},
	} {
		if got, _ := noSpacePath("/repo", c.stderr); got != c.path {
			t.Errorf("%q: %q, want %q", c.stderr, got, c.path)
		}
	}
}
