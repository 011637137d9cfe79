//go:build !linux

package base

import "syscall"

// hostWarmAttr is how a warm command runs without the sandbox: in a process
// group of its own, which an interrupted build kills (no parent-death signal
// outside Linux).
func hostWarmAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
