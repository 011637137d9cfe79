//go:build !linux

package platform

// openat2Missing is false where there are no namespaces to build in.
func openat2Missing() bool { return false }
