// Package sandbox runs a command inside a fresh user+mount namespace in which
// a worktree and a target dir appear at canonical paths.
//
// Cargo and rustc record absolute paths (dep-info, incremental state,
// env!("CARGO_MANIFEST_DIR")). Inside the sandbox every base and every agent
// sees its checkout at <store>/mnt/src and its target at <store>/mnt/target,
// so the paths recorded in one build are right for every fork of it. Host
// paths stay reachable: only the two mountpoints change.
//
// A Go process is multi-threaded, so it cannot unshare a user namespace
// itself. Command re-executes the current binary (/proc/self/exe) in new
// namespaces with a role marker; the child makes / recursively private, does
// the bind mounts, drops its capabilities and execs the command. Every binary
// that uses this package must call Init first thing in main (and test
// binaries in TestMain). The child reports a setup failure over a pipe, so
// Start returns either a running command or a typed *SetupError naming the
// step and, through package platform, the host setting that blocks it.
//
// A plan may also mount overlays (the overlay fork backend), or join a live
// namespace instead of creating one (Plan.Join), so that every process of an
// overlay agent sees its one overlay. Joining needs setns into a user
// namespace, which only a single-threaded process may do. Ferry runs
// util-linux nsenter with descriptors of the namespace, and nsenter execs
// this binary as the sandbox child, which checks that the joined namespace
// shows exactly the plan's mounts before it execs the command. The other
// way, a cgo constructor that calls setns before the Go runtime starts (as
// runc does), would save nsenter's exec but make every Ferry binary a cgo
// binary with C running first in each process. Measured with make bench on
// a 2-core machine: a shimmed cargo -V costs 23.1 ms joining through
// nsenter against 22.7 ms creating the namespace and 19.9 ms for a bind-mount
// sandbox (real cargo: 13.0 ms); create minus join stays within ±3 ms over
// runs. Joining is no dearer than creating, so this package stays pure Go.
// The one exception is the shim, which runs on every cargo call: package
// inplace links a C constructor into it alone. A bind-mount sandbox
// (reflink and copy agents) is entered in place from there, with the plan
// Command prepared (Created), and so is an overlay's live namespace, with
// the plan it prepared to join (Joining): the constructor joins, checks the
// mounts as the child would, and execs the command, so the shim starts no
// child at all. A sandbox child the shim does start (the namespace's first
// session) would join from the constructor too (JoinInConstructor),
// without nsenter: in a cgo binary each Go runtime start costs more (about
// 0.6 ms here), which made the nsenter join 1.3 ms dearer than in a pure Go
// shim.
package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/platform"
)

// childArg marks a re-executed process as a sandbox child.
const childArg = "__ferry_sandbox_child__"

// ChildArg is childArg, for package inplace's constructor to recognise.
const ChildArg = childArg

// joinedMark is what a joined child writes first on the status pipe;
// nsMark starts the line in which a child that mounted overlays names its
// namespaces ("N<user ns> <mount ns>\n").
const (
	joinedMark = "J"
	nsMark     = "N"
)

// planEnv carries the plan to the child; the child never passes it on.
const planEnv = "FERRY_SANDBOX_PLAN"

// Bind is one bind mount made inside the namespace.
type Bind struct {
	Source string `json:"source"` // host path
	Target string `json:"target"` // mountpoint; must exist
}

// Overlay is an overlayfs mounted inside the namespace, after the binds:
// Lower read-only, writes going to Upper, always with userxattr so it works
// unprivileged. Overlayfs cannot name a path holding , : or \ in its
// options; Command refuses one.
type Overlay struct {
	Lower  string `json:"lower"`
	Upper  string `json:"upper"`
	Work   string `json:"work"`
	Target string `json:"target"` // mountpoint; must exist
	// View, when set, is a second mountpoint (an existing directory) the
	// overlay is bound onto after it is mounted on Target: a path only
	// this overlay's namespace shows it at, so a host process that reaches
	// the namespace through /proc/<pid>/root can tell it from another
	// namespace's canonical Target (see the overlay backend's holder).
	View string `json:"view,omitempty"`
	// Volatile mounts without the sync of the upper's whole filesystem
	// that unmounting (and syncfs) otherwise does. The kernel leaves
	// work/work/incompat/volatile behind and refuses to mount over it
	// again: the caller decides whether the upper can be trusted (see
	// the overlay lifecycle's Enter in package lifecycle) and clears it. A kernel without the option gets the
	// mount without it.
	Volatile bool `json:"volatile"`
}

// Options is the overlay's mount option string.
func (o Overlay) Options() string {
	opts := "lowerdir=" + o.Lower + ",upperdir=" + o.Upper + ",workdir=" + o.Work + ",userxattr"
	if o.Volatile {
		opts += ",volatile"
	}
	return opts
}

// VolatileMarker is the directory the kernel leaves in an overlay's work
// dir after a volatile mount.
func (o Overlay) VolatileMarker() string {
	return filepath.Join(o.Work, "work", "incompat", "volatile") // overlayfs's own layout: not a store path
}

// Namespace is a live user and mount namespace to join instead of creating
// one: descriptors of its /proc/<pid>/ns/user and ns/mnt, which keep it
// alive while they are open.
type Namespace struct {
	User  *os.File
	Mount *os.File
}

// Plan describes one sandboxed command.
type Plan struct {
	Binds    []Bind    `json:"binds"`
	Overlays []Overlay `json:"overlays"`
	// Join runs the command in an existing namespace whose mounts must
	// already be the plan's: the child checks every bind and overlay
	// instead of making it, and refuses to run when one differs.
	Join *Namespace `json:"-"`
	Dir  string     `json:"dir"`  // working directory inside the sandbox
	Argv []string   `json:"argv"` // nil: set up, then exit 0 (a probe)
	Env  []string   `json:"env"`  // the command's whole environment
	// KillOnParentDeath puts the command in a new PID namespace whose init
	// dies with the caller, so a SIGKILLed ferry-base leaves no compiler
	// behind writing into a directory about to be discarded.
	KillOnParentDeath bool `json:"kill_on_parent_death"`
	// Store, when set, is the directory Ferry keeps its state in (the store
	// parent, with symbolic links resolved). No symbolic link below it is
	// followed for a bind's source or target or an overlay's directories,
	// so a link planted in the store cannot redirect a mount into another
	// agent's fork. And the whole of it is read-only in the namespace: an
	// agent cannot write a base, another agent's fork, the shim or the bus.
	// The canonical mounts stay writable, and so does every path in
	// Writable. Nothing outside the namespace changes.
	Store string `json:"store,omitempty"`
	// World makes the whole host read-only in the namespace but for
	// Writable, Private, Fresh and the plan's mounts (confine.go). Without
	// it only Store is sealed, and Writable are the paths below it that
	// are not Ferry's.
	World    bool     `json:"world,omitempty"`
	Writable []string `json:"writable,omitempty"`
	// Private are private layers (overlays on host directories whose
	// writes land in the agent's upper), and ReadOnly the paths inside
	// them or inside Writable that stay the host's, read-only. Each needs
	// World.
	Private  []Layer  `json:"private,omitempty"`
	ReadOnly []string `json:"read_only,omitempty"`
	// Masked are paths below Store that the namespace hides once the
	// store is sealed: a directory behind an empty read-only filesystem,
	// a file behind /dev/null, read-only (the bus's token and address,
	// the signing keys: store.Secrets). One that does not exist is left
	// alone; a symbolic link is refused. A joined namespace must show
	// each one hidden.
	Masked []string `json:"masked,omitempty"`
	// Hold, for a created namespace with overlays, starts a holder that
	// keeps it alive after the command exits (see hold_linux.go).
	Hold *Hold `json:"hold,omitempty"`
}

// childPlan is what the child reads: the plan, and whether it runs in a
// joined namespace (checking the mounts) or a new one (making them).
type childPlan struct {
	Plan
	Joined bool   `json:"joined"`
	Steps  []Step `json:"steps,omitempty"` // a created namespace's setup (compile)
}

// SetupError is a failure to build the sandbox, before the command ran.
type SetupError struct {
	Step    string // "create the user namespace", "make / private", "bind-mount X on Y", ...
	Err     error
	Blocker *platform.Blocker // the host setting responsible, when one is known
	// Path is set when the failure is a path in the store that is not what
	// Ferry made (a symbolic link, a missing or foreign directory), not
	// something the host blocks: an unsafe state, refused.
	Path string
}

func (e *SetupError) Error() string {
	msg := "sandbox: " + e.Step + ": " + e.Err.Error()
	if e.Blocker != nil {
		msg += " (" + e.Blocker.Error() + ")"
	}
	return msg
}

func (e *SetupError) Unwrap() error {
	if e.Blocker != nil {
		return e.Blocker.AsError()
	}
	if e.Path != "" {
		return storePathError(e.Path, e.Err)
	}
	return e.Err
}

// storePathError explains a store path the sandbox would not use.
func storePathError(path string, err error) error {
	switch {
	case errors.Is(err, syscall.ELOOP):
		return failure.Wrap(failure.Refused, err,
			"Ferry makes no symbolic links in its store and follows none: remove the link (or the agent, with `ferry rm --force NAME`) and try again",
			"store path %s is, or passes through, a symbolic link", path)
	case errors.Is(err, syscall.EXDEV):
		return failure.Wrap(failure.Refused, err, "remove what leads out of the store and try again",
			"store path %s leads out of the store", path)
	}
	return failure.Wrap(failure.Refused, err,
		"the store holds something Ferry did not make there: remove the agent with `ferry rm --force NAME` (or rebuild the base with `ferry base --rebuild`) and try again",
		"store path %s cannot be used", path)
}

// status is what the child reports when setup fails.
type status struct {
	Step  string `json:"step"`
	Errno int    `json:"errno"`
	Msg   string `json:"msg"`
	Path  string `json:"path,omitempty"` // a store path that is not what Ferry made
}

// Cmd is a command that runs in a sandbox.
type Cmd struct {
	*exec.Cmd
	// OnStart, when set, runs once the command is running in the sandbox
	// and before RunAsChild waits for it; an error kills the command.
	OnStart func(pid int) error

	leading []*os.File // descriptors placed right after the status pipe
	userNS  string     // as the child reported them (overlays only)
	mountNS string
	holder  int   // the holder's pid, as the child reported it (Plan.Hold)
	direct  bool  // runs in the caller's namespaces: see Inside
	created *Plan // the plan of a command in a namespace of its own
	joining *Plan // the plan of a command in a live namespace (Plan.Join)
	steps   []Step
}

// Inside prepares p's command to run in the caller's own namespaces, for a
// caller already inside the sandbox p describes (a `ferry run` from an
// agent's shell): nothing is mounted or checked, and the command sees what
// the caller sees. Its ExtraFiles start at fd 3.
func Inside(p Plan) (*Cmd, error) {
	if len(p.Argv) == 0 {
		return nil, errors.New("sandbox: nothing to run")
	}
	path, err := lookPath(p.Argv[0], p.Env)
	if err != nil {
		return nil, err
	}
	c := exec.Command(path, p.Argv[1:]...)
	c.Args[0] = p.Argv[0]
	c.Env, c.Dir = p.Env, p.Dir
	return &Cmd{Cmd: c, direct: true}, nil
}

// Namespaces returns the ids ("user:[4026532...]", "mnt:[...]") of the
// namespaces a started command with overlays runs in, as its child reported
// them before it exec'd the command; empty otherwise.
func (c *Cmd) Namespaces() (user, mount string) { return c.userNS, c.mountNS }

// Command prepares p. Set Stdin, Stdout and Stderr on the result before Start.
// Where there are no namespaces (macOS) it returns a *SetupError whose
// Blocker is platform.NoNamespaces.
func Command(p Plan) (*Cmd, error) {
	if err := namespaces(); err != nil {
		return nil, err
	}
	if len(p.Binds) == 0 && p.Argv == nil && p.Dir == "" {
		p.Dir = "/"
	}
	overlays := append([]Overlay{}, p.Overlays...)
	for _, l := range p.Private {
		overlays = append(overlays, l.Overlay())
	}
	for _, o := range overlays {
		for _, d := range []string{o.Lower, o.Upper, o.Work} {
			if strings.ContainsAny(d, ",:\\") {
				return nil, &SetupError{Step: "mount an overlay on " + o.Target,
					Err: fmt.Errorf("overlayfs cannot name %s in its mount options: it holds a comma, colon or backslash", d)}
			}
		}
	}
	if err := checkPaths(p); err != nil {
		return nil, err
	}
	if (p.covered() || len(p.ReadOnly) > 0) && !p.World {
		return nil, errors.New("sandbox: private layers and read-only paths need a read-only host (World)")
	}
	if p.Join != nil {
		if p.KillOnParentDeath {
			return nil, errors.New("sandbox: a joined command cannot get a PID namespace of its own (KillOnParentDeath)")
		}
		return joinCommand(p)
	}
	steps, err := prepareSteps(p)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(childPlan{Plan: p, Steps: steps})
	if err != nil {
		return nil, err
	}
	c := exec.Command("/proc/self/exe", childArg)
	c.Env = []string{planEnv + "=" + string(data)}
	c.SysProcAttr = namespaceAttr(p)
	return &Cmd{Cmd: c, created: &p, steps: steps}, nil
}

// prepareSteps compiles p's setup, with the mounts this process sees.
func prepareSteps(p Plan) ([]Step, error) {
	var mounts []string
	if p.covered() {
		ms, err := ReadMountinfo("/proc/self/mountinfo")
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			mounts = append(mounts, m.Point)
		}
	}
	return compile(p, mounts, hostExists), nil
}

// hostExists is exists on this host's files.
func hostExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// Created returns the plan of a command that gets a namespace of its own
// (not one joined or the caller's), for a caller that enters it in place
// instead of starting it (package inplace).
func (c *Cmd) Created() (Plan, bool) {
	if c.created == nil {
		return Plan{}, false
	}
	return *c.created, true
}

// Joining returns the plan of a command that joins a live namespace
// (Plan.Join), for a caller that joins it in place instead of starting a
// child (package inplace).
func (c *Cmd) Joining() (Plan, bool) {
	if c.joining == nil {
		return Plan{}, false
	}
	return *c.joining, true
}

const (
	capSysAdmin    = 21
	capDacOverride = 1
)

// nsenter is util-linux's nsenter, which joins a namespace from a
// single-threaded process (a Go process cannot setns into a user
// namespace). Tests may point it elsewhere.
var nsenter = "nsenter"

// JoinInConstructor is set (by package inplace, before main) in a binary
// whose C constructor joins the namespaces itself when a sandbox child is
// started with JoinArg after childArg: it saves nsenter's exec.
var JoinInConstructor bool

// JoinArg follows childArg for a child the constructor joins to the
// namespaces at fds 4 (user) and 5 (mount) before the Go runtime starts.
const JoinArg = "join"

// StepJoin is the setup step that joins a live namespace.
const StepJoin = "join the agent's namespace"

// joinCommand runs the sandbox child in p.Join's namespaces, through
// nsenter or, where JoinInConstructor, through this binary's constructor: fd 3 is the status pipe (added by Start), fds 4 and 5 the
// namespaces, and the caller's ExtraFiles follow from fd 6. The child is
// this binary again, so it can check the namespace's mounts and report a
// failure over the same pipe as a created sandbox.
func joinCommand(p Plan) (*Cmd, error) {
	if p.Join.User == nil || p.Join.Mount == nil {
		return nil, errors.New("sandbox: join: both the user and the mount namespace are needed")
	}
	data, err := json.Marshal(childPlan{Plan: p, Joined: true})
	if err != nil {
		return nil, err
	}
	var c *exec.Cmd
	if JoinInConstructor {
		c = exec.Command("/proc/self/exe", childArg, JoinArg)
	} else {
		path, err := exec.LookPath(nsenter)
		if err != nil {
			return nil, &SetupError{Step: StepJoin, Err: fmt.Errorf("util-linux nsenter is needed to join a namespace: %w", err)}
		}
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		c = exec.Command(path, "--user=/proc/self/fd/4", "--mount=/proc/self/fd/5", "--preserve-credentials", "--", exe, childArg)
	}
	c.Env = []string{planEnv + "=" + string(data)}
	return &Cmd{Cmd: c, leading: []*os.File{p.Join.User, p.Join.Mount}, joining: &p}, nil
}

// Start starts the sandbox and returns once the command has been exec'd in it,
// or with a *SetupError if the sandbox could not be built.
func (c *Cmd) Start() error {
	if c.direct {
		return c.Cmd.Start()
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	// fd 3 in the child is the status pipe; the caller's files follow.
	c.ExtraFiles = append(append([]*os.File{w}, c.leading...), c.ExtraFiles...)
	if diesWithParent(c.SysProcAttr) {
		// The parent-death signal follows the thread that forked; keep this
		// goroutine's thread from being reused for the fork of another.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	err = c.Cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return &SetupError{Step: platform.StepCreate, Err: err,
			Blocker: platform.Real().ExplainUsernsFailure(platform.StepCreate, err)}
	}
	// fd 3 is close-on-exec in the child: EOF without a message means the
	// command is running.
	data, _ := io.ReadAll(r)
	r.Close()
	if len(c.leading) > 0 {
		// A joined child first says it runs in the namespace; without
		// that, nsenter failed (and said why on stderr).
		rest, ok := bytes.CutPrefix(data, []byte(joinedMark))
		var st status
		if !ok && len(data) > 0 && json.Unmarshal(data, &st) == nil {
			c.Cmd.Wait() // the constructor could not join, and said why
			return Reported(st.Step, syscall.Errno(st.Errno), st.Msg, st.Path)
		}
		if !ok {
			werr := c.Cmd.Wait()
			if werr == nil {
				werr = errors.New("nsenter exited without running the command")
			}
			return &SetupError{Step: StepJoin, Err: fmt.Errorf("nsenter: %w", werr)}
		}
		data = rest
	}
	if rest, ok := bytes.CutPrefix(data, []byte(nsMark)); ok {
		line, after, _ := bytes.Cut(rest, []byte("\n"))
		c.userNS, c.mountNS, _ = strings.Cut(string(line), " ")
		data = after
	}
	if rest, ok := bytes.CutPrefix(data, []byte(holdMark)); ok {
		line, after, _ := bytes.Cut(rest, []byte("\n"))
		c.holder, _ = strconv.Atoi(string(line))
		data = after
	}
	if len(data) == 0 {
		return nil
	}
	c.Cmd.Wait()
	var st status
	if err := json.Unmarshal(data, &st); err != nil {
		return &SetupError{Step: "start", Err: fmt.Errorf("bad report from sandbox child: %q", data)}
	}
	return Reported(st.Step, syscall.Errno(st.Errno), st.Msg, st.Path)
}

// Reported is the error for a setup failure a sandbox child reported: at
// step, errno (or, when 0, msg), and path when the failure is a store path
// that is not what Ferry made. The in-place entry (package inplace)
// reports its failures through it too, so both read the same.
func Reported(step string, errno syscall.Errno, msg, path string) *SetupError {
	var cause error = errors.New(msg)
	if errno != 0 {
		cause = errno
	}
	se := &SetupError{Step: step, Err: cause, Path: path}
	if step == platform.StepCreate || (path == "" && hostRefusal(step, cause)) {
		se.Blocker = platform.Real().ExplainUsernsFailure(step, cause)
	}
	return se
}

// hostRefusal reports whether a setup step failed the way a host that
// restricts namespaces or mounts makes it fail (EPERM, EACCES, EINVAL, or
// ENOSPC for a namespace or mount ceiling), so that the failure is worth
// explaining by the host's settings. A missing directory, a link or a
// read-only file system is not the host's policy and is reported as it is.
func hostRefusal(step string, err error) bool {
	if step == "exec" || step == "chdir" {
		return false
	}
	for _, e := range []syscall.Errno{syscall.EPERM, syscall.EACCES, syscall.EINVAL, syscall.ENOSPC} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Run starts the command and waits for it.
func (c *Cmd) Run() error {
	if err := c.Start(); err != nil {
		return err
	}
	return c.Wait()
}

// Probe builds a sandbox with the given binds and exits: it reports whether
// this host can run Ferry's sandbox, and if not, which setting blocks it.
func Probe(binds ...Bind) error {
	c, err := Command(Plan{Binds: binds})
	if err != nil {
		return err
	}
	return c.Run()
}

// RunAsChild runs the command as the foreground work of a wrapper (the
// shim, ferry run): termination signals sent to the wrapper are forwarded,
// SIGINT is left to the terminal (which delivers it to the command's process
// group as well), and the result is the command's exit status, 128+signal
// when it was killed.
func (c *Cmd) RunAsChild() (int, error) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	signal.Ignore(syscall.SIGINT)
	defer signal.Reset(syscall.SIGINT)
	defer signal.Stop(sigs)
	if err := c.Start(); err != nil {
		return 0, err
	}
	if c.OnStart != nil {
		if err := c.OnStart(c.Process.Pid); err != nil {
			c.Process.Kill()
			c.Wait()
			return 0, err
		}
	}
	go func() {
		for s := range sigs {
			c.Process.Signal(s)
		}
	}()
	err := c.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 0, err
}
