package treetest

import (
	"os"
	"testing"
)

// No overlay on macOS: NeedOverlay skips every overlay test there (the
// probe names platform.NoNamespaces), before anything below is reached.

// InNamespace is false: macOS has no namespaces.
func InNamespace() bool { return false }

// Main runs the tests.
func Main(m *testing.M) { os.Exit(m.Run()) }

// RunInNamespace fails: macOS has no namespaces to run the test in.
func RunInNamespace(t *testing.T) { t.Fatal("macOS has no namespaces to run the test in") }

// MountView fails: macOS has no overlay to mount.
func MountView(t *testing.T, _, _, _ string) string {
	t.Fatal("macOS has no overlay to mount")
	return ""
}

// UnmountView fails: macOS has no overlay to unmount.
func UnmountView(t *testing.T, _ string) { t.Fatal("macOS has no overlay to unmount") }
