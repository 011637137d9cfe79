//go:build !linux

// Package nouserns runs a command under a seccomp filter that denies
// creating user namespaces; seccomp is Linux's, so elsewhere Exec fails.
package nouserns

import (
	"fmt"
	"runtime"
)

// Exec fails: there is no seccomp outside Linux.
func Exec(argv []string) error { return fmt.Errorf("nouserns: no seccomp on %s", runtime.GOOS) }
