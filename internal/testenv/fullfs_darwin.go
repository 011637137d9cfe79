package testenv

import "testing"

// SmallFS skips the test on macOS: the small filesystem it fills is a
// Linux tmpfs mounted with a size.
func SmallFS(t testing.TB, size string) string {
	t.Helper()
	t.Skip("skipping: a small tmpfs the test can fill needs Linux")
	return ""
}

// Fill is only used on a SmallFS, which macOS does not have.
func Fill(t testing.TB, dir string, leave int64) string {
	t.Helper()
	t.Fatal("Fill needs a SmallFS, which needs Linux")
	return ""
}
