// Package nouserns runs a command under a seccomp filter that denies
// creating user namespaces, as the default seccomp profile of Docker and
// of Kubernetes' RuntimeDefault does: clone and unshare with
// CLONE_NEWUSER fail with EPERM, and clone3, whose flags a filter cannot
// read, fails with ENOSYS, so that libc falls back to clone. Tests run
// Ferry under it to meet a blocked host for real.
package nouserns

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Offsets in struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // the low 32 bits of args[0] on little-endian x86-64
)

// program is the filter, for x86-64 only.
func program() []unix.SockFilter {
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
	}
	const (
		ldW  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	eperm := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EPERM)
	enosys := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.ENOSYS)
	return []unix.SockFilter{
		stmt(ldW, offArch),                      // 0
		jump(jeq, unix.AUDIT_ARCH_X86_64, 1, 0), // 1
		stmt(ret, allow),                        // 2: another arch: not ours to judge
		stmt(ldW, offNr),                        // 3
		jump(jeq, unix.SYS_CLONE3, 0, 1),        // 4
		stmt(ret, enosys),                       // 5
		jump(jeq, unix.SYS_CLONE, 1, 0),         // 6
		jump(jeq, unix.SYS_UNSHARE, 0, 3),       // 7
		stmt(ldW, offArg0),                      // 8
		jump(jset, unix.CLONE_NEWUSER, 0, 1),    // 9
		stmt(ret, eperm),                        // 10
		stmt(ret, allow),                        // 11
	}
}

// Exec installs the filter on this process and every thread of it and
// execs argv, which keeps the filter, as does everything it starts.
func Exec(argv []string) error {
	if runtime.GOARCH != "amd64" {
		return fmt.Errorf("nouserns: the filter is written for amd64, not %s", runtime.GOARCH)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("nouserns: no_new_privs: %w", err)
	}
	prog := program()
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return fmt.Errorf("nouserns: install the filter: %w", e)
	}
	return syscall.Exec(path, argv, os.Environ())
}
