// Package inplace enters a bind-mount sandbox in the calling process
// itself, replacing it with the command, instead of starting a sandbox
// child. The shim links it: it runs on every cargo call an agent makes, and
// for reflink and copy agents this is most of what it adds to one.
//
// Why: a Go process is multi-threaded from its first instruction, so it
// cannot unshare a user namespace, and package sandbox starts a child in
// new namespaces that is this binary again, a second Go runtime, which does
// the mounts and execs the command. Measured on a 2-core machine, that
// child cost about 3.7 ms from the clone to its main function and 0.4 ms
// more to the command's exec, while the shim's own work (finding the agent,
// reading its records) took about 0.6 ms. A constructor in C runs before
// the Go runtime starts, while the process is still single-threaded: Exec
// re-executes this binary with the plan in its arguments, and the
// constructor (enter_linux.c) unshares the user and mount namespaces, maps
// the caller's uid and gid to themselves, makes the plan's bind mounts
// (below the store without following a link), seals the store, and execs
// the command, with no Go runtime started and no process left waiting. The
// command inherits the descriptors Exec was given (busy.lock), its exit
// status is the caller's, and signals reach it directly.
//
// Only the shim links this package (a cgo package makes a binary run C
// first in every process). An overlay's namespace is created once, by a
// sandbox child (it mounts the overlay and starts the namespace's holder),
// and joined by later calls (package lifecycle): ExecJoin joins it in place the
// same way, the constructor entering the namespace from the descriptors Go
// opened, checking the plan's mounts and the sealed store as a joined
// child's Go code does, and execing the command. (A sandbox child started
// with sandbox.JoinArg is joined by the constructor too, in place of
// nsenter.) A failure execs this binary once more with the step, errno and
// message, and Failure turns them into the sandbox.SetupError a sandbox
// child would have reported.
package inplace

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/sandbox"
)

// Exec replaces this process with c's command in a namespace of its own,
// entered in place. c must be a created command (sandbox.Command) whose
// plan has only bind mounts and an absolute command path; the files in its
// ExtraFiles stay open for the command, at their own numbers. Exec returns
// only on failure to exec.
func Exec(c *sandbox.Cmd) error {
	e, err := prepare(c, false)
	if err != nil {
		return err
	}
	return e.exec()
}

// ExecJoin replaces this process with c's command in the live namespace c
// joins (an overlay agent's): the constructor joins it, checks the plan's
// mounts and the sealed store there as a joined sandbox child does, and
// execs the command, so no child and no second Go runtime start. c must
// be a joining command (sandbox.Command with Plan.Join) with an absolute
// command path; the files in its ExtraFiles stay open for the command at
// their own numbers (busy.lock and mount.lock: the command holds them, as
// a child would), and the namespace's descriptors are closed before it
// runs. ExecJoin returns only on failure to exec.
func ExecJoin(c *sandbox.Cmd) error {
	e, err := prepare(c, true)
	if err != nil {
		return err
	}
	return e.exec()
}

// Start starts c's command as a child of this process, entering its
// sandbox the way Exec (join false) or ExecJoin (join true) would in this
// process, with stdout as its standard output and this process's standard
// input and error. The child keeps c's ExtraFiles at their own numbers, so
// it holds busy.lock (and an overlay's mount.lock) however this process
// ends. The caller waits for the returned process; its exit status is the
// command's, or the constructor's failure report's (printed by the child
// on its stderr, as the shim's own error).
func Start(c *sandbox.Cmd, join bool, stdout *os.File) (*os.Process, error) {
	e, err := prepare(c, join)
	if err != nil {
		return nil, err
	}
	top := 2
	for _, fd := range e.keep {
		top = max(top, int(fd))
	}
	files := make([]uintptr, top+1)
	for i := range files {
		files[i] = ^uintptr(0) // closed in the child
	}
	files[0], files[1], files[2] = os.Stdin.Fd(), stdout.Fd(), os.Stderr.Fd()
	for _, fd := range e.keep {
		if fd > 2 {
			files[fd] = fd
		}
	}
	pid, err := syscall.ForkExec("/proc/self/exe", e.args, &syscall.ProcAttr{Env: e.env, Files: files})
	if err != nil {
		return nil, &os.PathError{Op: "fork/exec", Path: "/proc/self/exe", Err: err}
	}
	return os.FindProcess(pid)
}

// entry is how this binary is run again for the constructor: its command
// line and environment, and the descriptors the command keeps.
type entry struct {
	args []string
	env  []string
	keep []uintptr
}

func (e *entry) exec() error {
	for _, fd := range e.keep {
		if _, err := unix.FcntlInt(fd, unix.F_SETFD, 0); err != nil {
			return err
		}
	}
	err := syscall.Exec("/proc/self/exe", e.args, e.env)
	return &os.PathError{Op: "exec", Path: "/proc/self/exe", Err: err}
}

// prepare checks c and builds the constructor's command line: for a
// created command (a namespace of its own), or, with join, for one that
// joins a live namespace.
func prepare(c *sandbox.Cmd, join bool) (*entry, error) {
	if !Linked {
		return nil, errors.New("inplace: this binary was built without cgo: start a sandbox child")
	}
	var keep []uintptr
	for _, f := range c.ExtraFiles {
		keep = append(keep, f.Fd())
	}
	if !join {
		p, ok := c.Created()
		if !ok || len(p.Overlays) > 0 || p.Hold != nil || p.KillOnParentDeath || len(p.Argv) == 0 {
			return nil, errors.New("inplace: only a plan of bind mounts with a command enters in place")
		}
		args, err := arguments(p, c.Steps())
		if err != nil {
			return nil, err
		}
		return &entry{args: args, env: p.Env, keep: keep}, nil
	}
	p, ok := c.Joining()
	if !ok || p.Join == nil || p.Hold != nil || len(p.Argv) == 0 {
		return nil, errors.New("inplace: only a plan that joins a live namespace with a command joins in place")
	}
	// A private layer shows in the joined namespace as an overlay on its
	// root, checked as the fork's overlay is.
	overlays := append([]sandbox.Overlay{}, p.Overlays...)
	for _, l := range p.Private {
		overlays = append(overlays, sandbox.Overlay{Target: l.Root, Upper: l.Upper, Work: l.Work})
	}
	paths := []string{p.Dir, p.Argv[0]}
	for _, b := range p.Binds {
		paths = append(paths, b.Source, b.Target)
	}
	for _, o := range overlays {
		paths = append(paths, o.Target, o.Upper, o.Work)
		if o.View != "" {
			paths = append(paths, o.View)
		}
	}
	if p.Store != "" {
		paths = append(paths, p.Store)
	}
	paths = append(paths, p.Masked...)
	if err := clean(paths); err != nil {
		return nil, err
	}
	world := "0"
	if p.World {
		world = "1"
	}
	args := []string{os.Args[0], joinMarker, strconv.Itoa(int(p.Join.User.Fd())), strconv.Itoa(int(p.Join.Mount.Fd())),
		p.Dir, p.Store, world, strconv.Itoa(len(p.Binds))}
	for _, b := range p.Binds {
		args = append(args, b.Source, b.Target)
	}
	args = append(args, strconv.Itoa(len(overlays)))
	for _, o := range overlays {
		args = append(args, o.Target, o.View, o.Upper, o.Work)
	}
	args = append(args, strconv.Itoa(len(p.Masked)))
	args = append(args, p.Masked...)
	args = append(append(args, "--", p.Argv[0]), p.Argv...)
	keep = append([]uintptr{p.Join.User.Fd(), p.Join.Mount.Fd()}, keep...)
	return &entry{args: args, env: p.Env, keep: keep}, nil
}

// clean refuses a path the constructor must not be given: it takes paths
// as they are, and compares some byte for byte.
func clean(paths []string) error {
	for _, q := range paths {
		if !filepath.IsAbs(q) || filepath.Clean(q) != q {
			return errors.New("inplace: " + q + " is not a clean absolute path")
		}
	}
	return nil
}

// arguments is the constructor's command line for p, whose setup is
// steps (see enter_linux.c).
func arguments(p sandbox.Plan, steps []sandbox.Step) ([]string, error) {
	if err := clean([]string{p.Dir, p.Argv[0]}); err != nil {
		return nil, err
	}
	args := []string{os.Args[0], marker, p.Dir, strconv.Itoa(len(steps))}
	for _, st := range steps {
		args = append(args, st.Op, st.A, st.B, st.C, st.Name)
	}
	args = append(args, "--", p.Argv[0])
	return append(args, p.Argv...), nil
}

// Failure returns the setup error the constructor reported when args (the
// process's arguments after the program name) are its failure report, and
// nil otherwise. Call it first thing in main.
func Failure(args []string) error {
	if !Linked || len(args) != 5 || args[0] != failedMarker {
		return nil
	}
	errno, _ := strconv.Atoi(args[2])
	return sandbox.Reported(args[1], syscall.Errno(errno), args[4], args[3])
}
