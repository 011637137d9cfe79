package base

import "syscall"

// hostWarmAttr is how a warm command runs without the sandbox: in a process
// group of its own (an interrupted build kills the group) that gets SIGKILL
// when this process dies, as the sandbox's PID namespace would.
func hostWarmAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
