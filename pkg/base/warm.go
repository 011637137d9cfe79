package base

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/store"
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
	if !keep {
		hint := discardHint(p, w, failed, blocking, clippyCommand(w.Command) && built)
		return failure.Wrap(failure.BuildFailed, werr, hint, "the base of %s was not built", short(p.Commit))
	}

	verb := "did not compile"
	if clippyCommand(w.Command) {
		verb = "failed clippy"
	}
	var msg string
	if len(failed) == 0 {
		// Only the generated clippy command gets here: its failure has
		// always only warned, whatever it was.
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
	r.Warnings = append(r.Warnings, msg)
	fmt.Fprintf(out, "ferry-base: warning: %s\n", msg)
	return nil
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
