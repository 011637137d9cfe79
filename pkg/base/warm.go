package base

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/cargoenv"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/remap"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/store"
	"github.com/ferrydev/ferry/pkg/toolchain"
)

// A warm command that fails does not always make the base useless. Cargo
// under --keep-going builds every unit that does not depend on a failed
// one, and what it built is as correct as after a clean run: the base is a
// cache. What decides is which targets failed, read from cargo's own
// report of them (see the package doc for the rule and its reasons).

// warmOne runs warm command w of plan p into the base r describes and
// appends how it went to r.Warm. A failure that leaves the base usable is
// recorded in r.Incomplete and r.Warnings and is not an error; any other
// failure is the error that discards the base.
func warmOne(ctx context.Context, o Options, p *Plan, r *Record, w WarmCommand, shimDir string) error {
	out := o.progress()
	// Lint failures of a clippy command count as lints only after a build:
	// every command before this one passed or was kept, so any of them
	// that is not clippy compiled what the commit's libraries need.
	built := false
	for _, prev := range r.Warm {
		built = built || !clippyCommand(prev.Command)
	}
	log := &targetLog{w: out}
	var rustcCache rustcInfo
	if clippyCommand(w.Command) {
		rustcCache = saveRustcInfo(r)
	}
	start := time.Now()
	code, signs, cpu, err := runWarm(ctx, o, r, w.Command, shimDir, log)
	w.Seconds, w.CPU, w.ExitCode = since(start), cpu, code
	if rerr := rustcCache.restore(); rerr != nil && err == nil {
		err = rerr
	}
	failed := log.targets()
	if code != 0 {
		for _, f := range failed {
			w.Failed = append(w.Failed, f.String())
		}
	}
	r.Warm = append(r.Warm, w)
	if err != nil {
		return err
	}
	if code == 0 {
		return nil
	}
	if err := noSpace(r, w.Command, code, signs); err != nil {
		// Not the commit's fault: no checkout would show why, and
		// a generated clippy command cannot be skipped past it.
		return err
	}
	werr := &WarmError{Command: w.Command, ExitCode: code, Seconds: w.Seconds, Failed: w.Failed}
	blocking, keep := judge(w, failed, built)
	later := !keep && laterCommand(o, p, w)
	if !keep && !later {
		hint := discardHint(p, w, failed, blocking, clippyCommand(w.Command) && built)
		return failure.Wrap(failure.BuildFailed, werr, hint, "the base of %s was not built", short(p.Commit))
	}

	verb := "did not compile"
	if clippyCommand(w.Command) {
		verb = "failed clippy"
	}
	var msg string
	if len(failed) == 0 {
		// The generated clippy command, whose failure has always only
		// warned, or a later command of a progressive plan.
		msg = fmt.Sprintf("warm command %q exited with status %d after %.1fs; the base is ready without it", w.Command, code, w.Seconds)
		r.Incomplete = append(r.Incomplete, w.Command)
	} else {
		msg = fmt.Sprintf("warm command %q exited with status %d after %.1fs; the base is kept without what %s: %s",
			w.Command, code, w.Seconds, verb, strings.Join(w.Failed, ", "))
		for _, f := range w.Failed {
			r.Incomplete = append(r.Incomplete, fmt.Sprintf("%s %s (%s)", f, verb, w.Command))
		}
	}
	if len(failed) > 0 && !strings.Contains(" "+w.Command+" ", keepGoingWord) {
		// Cargo stops scheduling at the first failure without the flag:
		// targets it had not started are missing too, and no line names them.
		r.Incomplete = append(r.Incomplete, fmt.Sprintf("%s: without --keep-going cargo stopped at the first failure, so targets it had not started are not warm", w.Command))
		if testCommand(w.Command) {
			msg += " (and cargo stopped at the first failure: cargo test has no --keep-going; a build of every target before it builds everything else that compiles)"
		} else {
			msg += " (and cargo stopped at the first failure: add --keep-going to the command to build everything else)"
		}
	}
	if later {
		msg += fmt.Sprintf(" (a progressive base is kept once its first command, %q, is warm; what failed is recorded as incomplete)", p.Warm[p.first].Command)
	}
	r.Warnings = append(r.Warnings, msg)
	o.say("warning: %s", msg)
	return nil
}

// laterCommand reports whether w is a warm command of a progressive plan
// other than its first: a base the first command warmed serves agents, so
// a later command that fails does not hold it back. It is recorded as
// incomplete, and the commands after it warm as they would have. Only the
// first command's failure discards the base.
func laterCommand(o Options, p *Plan, w WarmCommand) bool {
	return o.Settings.Progressive && len(p.Warm) > 1 && w.Command != p.Warm[p.first].Command
}

// Cargo caches what it learns by running rustc (rustc -vV, the target
// probe) in .rustc_info.json at the top of each target dir, keyed on the
// compiler and the rustc wrappers (Cargo's util/rustc.rs: the path, size
// and times of rustc, RUSTC_WRAPPER and RUSTC_WORKSPACE_WRAPPER, and
// rustup's toolchain). A file keyed on other wrappers is discarded whole.
// cargo clippy runs with clippy-driver as the workspace wrapper, so a base
// whose last warm command is clippy would hand every agent a cache its
// first cargo build throws away, running rustc three more times (measured
// on the large bench workspace: 9 execs against 6 in the second build).
// Builds, tests and checks are what agents run first, so a clippy command
// leaves each cache file as it found it.

// rustcInfo holds the rustc-info cache files of a base's target, by path
// inside it.
type rustcInfo struct {
	r     *Record
	files map[string][]byte
}

// rustcInfoName is Cargo's cache file in a target (build) dir.
const rustcInfoName = ".rustc_info.json"

// saveRustcInfo reads the rustc-info cache of r's target and of every
// nested workspace's target in it, as the warm build sees them (r.shown).
// What cannot be read is not kept.
func saveRustcInfo(r *Record) rustcInfo {
	saved := rustcInfo{r: r, files: map[string][]byte{}}
	nested, _ := filepath.Rel(r.Target, store.NestedTargets(r.Target))
	for _, rel := range append([]string{rustcInfoName}, namesBelow(r.targetRoots(), nested, rustcInfoName)...) {
		if p, ok := r.shown(rel); ok {
			if b, err := os.ReadFile(p); err == nil {
				saved.files[rel] = b
			}
		}
	}
	return saved
}

// restore writes back each saved file that changed since.
func (saved rustcInfo) restore() error {
	for rel, b := range saved.files {
		if p, ok := saved.r.shown(rel); ok {
			if now, err := os.ReadFile(p); err == nil && bytes.Equal(now, b) {
				continue
			}
		}
		p, err := saved.r.writable(rel)
		if err == nil {
			err = atomicfile.WriteFile(p, b, 0o644)
		}
		if err != nil {
			return fmt.Errorf("restore Cargo's rustc-info cache after clippy: %w", err)
		}
	}
	return nil
}

// testCommand reports whether shell command cmd runs cargo test, which
// takes no --keep-going.
func testCommand(cmd string) bool {
	return strings.Contains(" "+cmd+" ", " cargo test ")
}

// keepGoingWord is cargo's flag, as a word of a command.
const keepGoingWord = " --keep-going "

// judge decides whether a failed warm command w, whose output named the
// failed targets, keeps the base; built says whether a command that is not
// clippy passed before it. When it does not, blocking are the failures
// that decided it (none when nothing was named, or w does not keep going).
func judge(w WarmCommand, failed []failedTarget, built bool) (blocking []failedTarget, keep bool) {
	switch {
	case w.Generated:
		// The generated clippy command only warns (seed, ferry base step
		// 5): it runs after the generated build, which decided.
		return nil, true
	case !w.KeepGoing:
		return nil, false
	case len(failed) == 0:
		// It failed without naming a target: a manifest error, a failed
		// run, a crash. Nothing says the base is usable.
		return nil, false
	case clippyCommand(w.Command) && built:
		// After a build, what clippy rejects is lints.
		return nil, true
	}
	for _, f := range failed {
		if f.blocks() {
			blocking = append(blocking, f)
		}
	}
	return blocking, len(blocking) == 0
}

// discardHint says what to do about a failed warm command that discards
// the base; lints says it is a clippy command after a build.
func discardHint(p *Plan, w WarmCommand, failed, blocking []failedTarget, lints bool) string {
	see := fmt.Sprintf("run it in a checkout of %s to see why (git worktree add /tmp/check %s); the previous current base is unchanged",
		short(p.Commit), short(p.Commit))
	if len(blocking) == 0 && !lints {
		// judge stopped early (w does not keep going): would it have kept the base?
		for _, f := range failed {
			if f.blocks() {
				blocking = append(blocking, f)
			}
		}
	}
	switch {
	case len(blocking) > 0:
		names := make([]string, len(blocking))
		for i, f := range blocking {
			names[i] = f.String()
		}
		return fmt.Sprintf("the commit does not build (%s): agents would rebuild it and everything that depends on it, so no base is kept; fix it, or %s",
			strings.Join(names, ", "), see)
	case !w.KeepGoing && len(failed) > 0:
		return "with keep-going = true in ferry.toml's [base] table (and --keep-going in the command) the base would be kept without what failed; " + see
	}
	return see
}

// clippyCommand reports whether every cargo call in shell command cmd is
// cargo clippy (cargo [+toolchain] [global options] clippy, or cargo-clippy),
// and there is one: a command that also builds is judged as a build.
func clippyCommand(cmd string) bool {
	words := strings.FieldsFunc(cmd, func(r rune) bool {
		return unicode.IsSpace(r) || strings.ContainsRune(";&|()`'\"", r)
	})
	found := false
	for i := 0; i < len(words); i++ {
		switch path.Base(words[i]) {
		case "cargo-clippy":
			found = true
			continue
		case "cargo":
		default:
			continue
		}
		j := i + 1
		for j < len(words) && (strings.HasPrefix(words[j], "+") || strings.HasPrefix(words[j], "-")) {
			switch words[j] {
			case "--config", "-Z", "--color", "-C", "--explain":
				j++ // the option's value
			}
			j++
		}
		if j >= len(words) || words[j] != "clippy" {
			return false
		}
		found = true
		i = j
	}
	return found
}

// failedTarget is a target cargo reported it could not build.
type failedTarget struct {
	crate string // the package
	// desc is cargo's name of the target: lib, bin "x", test "x", bench
	// "x", example "x" or build script, followed by " test" when it was
	// compiled as a test harness; "" when cargo named none (before 1.72).
	desc string
	run  bool // a build script that compiled and failed when run
}

// blocks reports whether the failure means the commit does not build: a
// library (proc macros included), a binary or a build script, of a member
// or a dependency. Every unit depending on it went unbuilt, and agents'
// builds would fail the same way. Tests, benches and examples, and any
// target compiled as a test harness, are leaves nothing else depends on.
// A target cargo did not name counts as blocking.
func (f failedTarget) blocks() bool {
	if f.run {
		return true
	}
	kind, _, _ := strings.Cut(f.desc, " ")
	switch {
	case strings.HasSuffix(f.desc, " test"):
		return false
	case kind == "test", kind == "bench", kind == "example":
		return false
	}
	return true
}

// String names the target for people: bench "foo" of crate bar.
func (f failedTarget) String() string {
	if f.run {
		return "build script of crate " + f.crate + " (when run)"
	}
	d, test := strings.CutSuffix(f.desc, " test")
	kind, name, _ := strings.Cut(d, " ")
	what := d
	switch kind {
	case "":
		return "crate " + f.crate
	case "lib":
		what = "library"
	case "bin":
		what = "binary " + name
	}
	if test {
		what = "unit tests of the " + what
	}
	return what + " of crate " + f.crate
}

// Cargo's report of a target it could not build, as printed since 1.72:
//
//	error: could not compile `foo` (bench "bar") due to 1 previous error
//	error: failed to run custom build command for `foo v0.1.0 (/path)`
var (
	couldNotCompile = regexp.MustCompile("^error: could not compile `([^`]+)`(?: \\(([^)]*)\\))?")
	buildScriptRun  = regexp.MustCompile("^error: failed to run custom build command for `([^` ]+)")
	colour          = regexp.MustCompile("\x1b\\[[0-9;]*[A-Za-z]")
)

// targetLog passes a warm command's output on as it arrives and records
// the targets cargo reports it could not build. Lines are read whole, up
// to maxLine bytes; the tail of a longer line is passed on and not read.
type targetLog struct {
	w      io.Writer
	mu     sync.Mutex
	line   []byte
	failed []failedTarget
}

const maxLine = 4096

func (l *targetLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			l.add(rest)
			break
		}
		l.add(rest[:i])
		l.end()
		rest = rest[i+1:]
	}
	l.mu.Unlock()
	return l.w.Write(p)
}

func (l *targetLog) add(b []byte) {
	if room := maxLine - len(l.line); room > 0 {
		l.line = append(l.line, b[:min(len(b), room)]...)
	}
}

// end reads the line collected so far.
func (l *targetLog) end() {
	line := strings.TrimRight(colour.ReplaceAllString(string(l.line), ""), "\r")
	l.line = l.line[:0]
	if m := couldNotCompile.FindStringSubmatch(line); m != nil {
		l.failed = append(l.failed, failedTarget{crate: m[1], desc: m[2]})
	} else if m := buildScriptRun.FindStringSubmatch(line); m != nil {
		l.failed = append(l.failed, failedTarget{crate: m[1], run: true})
	}
}

// targets returns the failures reported so far, a last line without a
// newline included.
func (l *targetLog) targets() []failedTarget {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.line) > 0 {
		l.end()
	}
	seen := map[failedTarget]bool{}
	var out []failedTarget
	for _, f := range l.failed {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

// WarmError is a warm command that failed, in the chain of the error Build
// returns, so that whoever reports the failure can name the command.
type WarmError struct {
	Command  string
	ExitCode int
	Seconds  float64  // how long it ran
	Failed   []string // the targets cargo said it could not build
	Err      error    // why, when Ferry knows more than the status (a full disk)
}

func (e *WarmError) Error() string {
	msg := fmt.Sprintf("warm command %q failed with exit status %d", e.Command, e.ExitCode)
	if e.Seconds > 0 {
		msg += fmt.Sprintf(" after %.1fs", e.Seconds)
	}
	if len(e.Failed) > 0 {
		msg += "; did not compile: " + strings.Join(e.Failed, ", ")
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *WarmError) Unwrap() error { return e.Err }

// FailedCommand is the warm command a failed Build names, or "".
func FailedCommand(err error) string {
	var we *WarmError
	if errors.As(err, &we) {
		return we.Command
	}
	return ""
}

// runWarm runs one warm command in the sandbox at the canonical paths (or,
// for a base built without it, in the checkout at its host path), its
// output going to output, and returns its exit status and, when it failed,
// the signs of a full filesystem it left. The error is for failures to run
// it at all.
//
// cpu is the CPU time the command and everything it waited for used (user
// and system): what demand's budget weighs, since unlike the wall time it
// does not grow with what else the host runs.
func runWarm(ctx context.Context, o Options, r *Record, command, shimDir string, output io.Writer) (code int, signs spaceSigns, cpu float64, err error) {
	wrapper := ""
	if r.Modes.Remap {
		wrapper = o.Store.RemapWrapper()
	}
	return runWarmIn(ctx, o, r, command, warmEnv(o.env(), r, shimDir, wrapper), "", output)
}

// runWarmIn is runWarm with env as the command's environment, and, when
// cargoHome is set, the host's $CARGO_HOME writable from its sandbox
// (prefetch).
func runWarmIn(ctx context.Context, o Options, r *Record, command string, env []string, cargoHome string, output io.Writer) (code int, signs spaceSigns, cpu float64, err error) {
	c, err := warmCommand(o, r, command, env, cargoHome)
	if err != nil {
		return 0, spaceSigns{}, 0, err
	}
	// stdout is the caller's answer channel: the build's output goes to stderr.
	tail := &outputTail{w: output}
	c.Stdout = tail
	c.Stderr = tail
	stopWatch := watchFree(r.Dir) // the target's filesystem; a layered refresh has no target yet
	if err := c.Start(); err != nil {
		stopWatch()
		return 0, spaceSigns{}, 0, err
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			// The init of the PID namespace, or without the sandbox the
			// leader of the command's process group: everything dies.
			if c.SysProcAttr != nil && c.SysProcAttr.Setpgid {
				syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			}
			c.Process.Kill()
		case <-done:
		}
	}()
	err = c.Wait()
	close(done)
	least, watched := stopWatch()
	if ps := c.ProcessState; ps != nil {
		cpu = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	if ctx.Err() != nil {
		return 0, spaceSigns{}, cpu, interrupted(ctx.Err())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code := ee.ExitCode()
		if code < 0 {
			code = 128 + 9
		}
		return code, spaceSigns{said: tail.lastLine(noSpaceTexts), bus: tail.lastLine(busTexts), least: least, watched: watched}, cpu, nil
	}
	return 0, spaceSigns{}, cpu, err
}

// warmCommand prepares a warm command: in the sandbox, the checkout and
// target bind-mounted at the canonical paths in a sealed store, in a PID
// namespace that dies with this process; without it, in the checkout at its
// host path, in a process group of its own that is killed on interruption
// and gets SIGKILL when this process dies.
func warmCommand(o Options, r *Record, command string, env []string, cargoHome string) (*sandbox.Cmd, error) {
	src, _ := r.BuildPaths()
	if r.HostPaths() {
		c, err := sandbox.Inside(sandbox.Plan{Dir: src, Argv: []string{"sh", "-c", command}, Env: env})
		if err != nil {
			return nil, err
		}
		c.SysProcAttr = hostWarmAttr()
		return c, nil
	}
	seal, err := o.Store.Seal()
	if err != nil {
		return nil, err
	}
	binds := []sandbox.Bind{{Source: r.Src, Target: r.MntSrc}}
	var overlays []sandbox.Overlay
	if l := r.layer; l != nil {
		// A layered refresh: the seed's target under the base's layer.
		if err := resetLayerWork(r); err != nil {
			return nil, err
		}
		overlays = append(overlays, sandbox.Overlay{Lower: l.Lower, Upper: l.Upper, Work: layerWork(r), Target: r.MntTarget, Volatile: true})
	} else {
		binds = append(binds, sandbox.Bind{Source: r.Target, Target: r.MntTarget})
	}
	plan := sandbox.Plan{
		Store:             seal.Root,
		Masked:            seal.Masked,
		Binds:             binds,
		Overlays:          overlays,
		Dir:               src,
		Argv:              []string{"sh", "-c", command},
		Env:               env,
		KillOnParentDeath: true,
	}
	// The shim records the warm build's cargo calls in the base's
	// warm-units/, which must stay writable.
	writable := []string{store.BaseFiles(r.Dir).WarmUnits}
	if r.Confinement == nil || !r.Confinement.World {
		writable = append(seal.Writable, writable...)
	}
	if err := confined(r, &plan, o.Store.MntTmp(), writable, cargoHome); err != nil {
		return nil, err
	}
	return sandbox.Command(plan)
}

// warmEnv is the environment of a warm command: the caller's, with every
// variable that could send Cargo's output elsewhere replaced (invariant 3);
// in remap mode, with rustc run through wrapper (remap.Env).
func warmEnv(env []string, r *Record, shimDir, wrapper string) []string {
	// The bus's variables too: nothing a build runs reaches the bus.
	out := config.WithoutBus(cargoenv.Without(env, "PWD", "OLDPWD", "FERRY_AGENT", "FERRY_WARM_SRC", "FERRY_WARM_TARGET", "FERRY_WARM_UNITS", "FERRY_WARM_CARGO", "PATH"))
	if r.Modes.Remap {
		out = append(cargoenv.Without(out, remap.EnvWrapper, remap.EnvChannel), remap.Env(wrapper, toolchain.Channel(r.Toolchain.RustcVersion))...)
	}
	path := cargoenv.Get(env, "PATH")
	if shimDir != "" {
		path = shimDir + string(filepath.ListSeparator) + path
	}
	out = append(out, "PATH="+path)
	src, target := r.BuildPaths()
	if shimDir != "" {
		out = append(out, "FERRY_WARM_SRC="+src, "FERRY_WARM_TARGET="+target, "FERRY_WARM_UNITS="+store.BaseFiles(r.Dir).WarmUnits,
			"FERRY_WARM_CARGO="+r.Toolchain.CargoVersion)
	}
	out = append(out, cargoenv.Target(target)...)
	out = cargoenv.WithFreshness(out, r.FreshnessEnv())
	return append(out,
		"CARGO_BUILD_WARNINGS=warn",
		"PWD="+src,
	)
}

// prepareRemap lays out a remap base's checkout: the link through which
// its builds reach the target (<src>/.ferry-target -> target, made before
// stamping so the checkout's root holds the same entries as an agent's
// worktree, which gets its link before it is compared), ignored by every
// worktree of the repository through info/exclude so it is never counted
// as anyone's change; and the rustc wrapper, installed in the store's bin/.
func prepareRemap(o Options, r *Record) error {
	if err := o.Store.InstallRemapWrapper(o.RustcBin); err != nil {
		return fmt.Errorf("remap mode: %w", err)
	}
	if err := o.Repo.Exclude("/" + store.RemapLink); err != nil {
		return fmt.Errorf("remap mode: %w", err)
	}
	_, link := r.BuildPaths()
	if err := os.Symlink(r.Target, link); err != nil {
		return fmt.Errorf("remap mode: link the checkout to the target: %w", err)
	}
	return nil
}
