package fork

import "testing"

// No overlay on macOS: needOverlay skips every overlay test there (the
// probe names platform.NoNamespaces), before anything below is reached.

func inOverlayNS() bool { return false }

func runInOverlayNS(t *testing.T) { t.Fatal("macOS has no namespaces to run the test in") }

func mountView(t *testing.T, _ *OverlaySpec) string {
	t.Fatal("macOS has no overlay to mount")
	return ""
}

func unmountView(t *testing.T, _ string) { t.Fatal("macOS has no overlay to unmount") }
