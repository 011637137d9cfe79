package git

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/ferrydev/ferry/pkg/failure"
)

// scrubbed lists the variables removed from every git call's environment.
// Each one can redirect git away from the directory given with -C (a hook
// that runs ferry inherits GIT_DIR and GIT_INDEX_FILE from the git that runs
// the hook) or change how Ferry's own pathspec arguments are read.
var scrubbed = map[string]bool{
	"GIT_DIR":                          true,
	"GIT_WORK_TREE":                    true,
	"GIT_INDEX_FILE":                   true,
	"GIT_PREFIX":                       true,
	"GIT_COMMON_DIR":                   true,
	"GIT_OBJECT_DIRECTORY":             true,
	"GIT_ALTERNATE_OBJECT_DIRECTORIES": true,
	"GIT_NAMESPACE":                    true,
	"GIT_LITERAL_PATHSPECS":            true,
	"GIT_GLOB_PATHSPECS":               true,
	"GIT_NOGLOB_PATHSPECS":             true,
	"GIT_ICASE_PATHSPECS":              true,
	// Replaced below with fixed values.
	"LC_ALL":              true,
	"GIT_TERMINAL_PROMPT": true,
}

// environ returns the environment for a git call: the process environment
// without the scrubbed variables, with messages in the C locale (Ferry reads
// some of them) and without any terminal prompt (nobody may be there to
// answer it).
func environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if scrubbed[name] {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "GIT_TERMINAL_PROMPT=0")
}

// HookEnviron is the process environment without the variables a git hook
// inherits that point git at the repository that ran it (GIT_DIR,
// GIT_INDEX_FILE and the others scrubbed from Ferry's own git calls), for a
// process a hook starts that outlives it (a background base build, whose
// warm commands' build scripts may run git).
func HookEnviron() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if scrubbed[name] && name != "LC_ALL" && name != "GIT_TERMINAL_PROMPT" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// CommandError is a git command that could not be run or exited non-zero.
type CommandError struct {
	Dir    string   // the directory given with -C
	Args   []string // the arguments after -C dir
	Stderr string   // git's standard error, surrounding white space trimmed
	Err    error    // usually an *exec.ExitError
	// NoSpace is where git said it could not write because the filesystem
	// is full (the path it quoted, else Dir); "" when it did not say so.
	NoSpace string
	// quotedSpace: NoSpace is a path git quoted, not a guess.
	quotedSpace bool
}

func (e *CommandError) Error() string {
	var b strings.Builder
	b.WriteString("git -C ")
	b.WriteString(quoteArg(e.Dir))
	for _, a := range e.Args {
		b.WriteByte(' ')
		b.WriteString(quoteArg(a))
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	if e.Stderr != "" {
		b.WriteString(": ")
		b.WriteString(e.Stderr)
	}
	return b.String()
}

func (e *CommandError) Unwrap() error { return e.Err }

// Is makes a git that failed on a full filesystem an ENOSPC, as the same
// write done by Ferry itself would be: git reports it only in words.
func (e *CommandError) Is(target error) bool {
	return target == syscall.ENOSPC && e.NoSpace != ""
}

// noSpaceText is how git (through strerror, in the C locale every call
// gets) reports ENOSPC.
const noSpaceText = "No space left on device"

// quoted is a path git quotes in a message: "unable to create '<path>'".
// It is compiled on first use, not at start: the shim links this package
// and starts twice on every cargo call.
var quoted = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`'([^']+)'`) })

// noSpacePath returns where git could not write for lack of space, from its
// standard error, and "" when it was not that. git says "No space left on
// device" after most failed writes, and then the path quoted last on that
// line (git quotes paths relative to its working directory, dir) is where,
// else dir. Some messages give no reason ("couldn't write '<lock>'"): a
// path quoted anywhere whose filesystem is out of space is the answer then.
// quotedPath tells a path git named from a guess.
func noSpacePath(dir, stderr string) (path string, quotedPath bool) {
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	lines := strings.Split(stderr, "\n")
	for _, line := range lines {
		if !strings.Contains(line, noSpaceText) {
			continue
		}
		if m := quoted().FindAllStringSubmatch(line, -1); m != nil {
			return abs(m[len(m)-1][1]), true
		}
		return dir, false
	}
	for _, line := range lines {
		for _, m := range quoted().FindAllStringSubmatch(line, -1) {
			if p := abs(m[1]); failure.OutOfSpace(p) {
				return p, true
			}
		}
	}
	return "", false
}

// noSpaceIn marks err, a git call writing into dir, with dir when git said
// the filesystem is full without quoting a path: it names the files of a
// checkout relative to the worktree, which is not its working directory.
func noSpaceIn(dir string, err error) error {
	var ce *CommandError
	if errors.As(err, &ce) && ce.NoSpace != "" && !ce.quotedSpace {
		return failure.NoSpaceAt(dir, err)
	}
	return err
}

// ExitCode returns git's exit status, or -1 if git did not exit normally.
func (e *CommandError) ExitCode() int {
	var ee *exec.ExitError
	if errors.As(e.Err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

func quoteArg(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\"'\\$`") {
		return strconv.Quote(s)
	}
	return s
}

// noHooks is what every git call but the checkouts runs with: no hook
// and no fsmonitor program (see the package doc). A hooksPath of /dev/null
// names no directory, so git finds no hook there whatever its name; an
// empty core.hooksPath is no such thing: git 2.39 then looks for hooks at
// the filesystem's root (/reference-transaction ran).
var noHooks = []string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"}

// noMonitor is what a checkout runs with: its hooks, and no fsmonitor
// program, which only says which files may have changed (git then looks at
// every one, and what it checks out is the same).
var noMonitor = []string{"-c", "core.fsmonitor=false"}

// run executes git -C dir args... without hooks or fsmonitor and returns
// its standard output.
func run(dir string, args ...string) ([]byte, error) {
	return runWith(dir, nil, args...)
}

// runWith is run with global options placed before -C dir.
func runWith(dir string, global []string, args ...string) ([]byte, error) {
	return runGit(dir, noHooks, global, args...)
}

// runCheckout runs a call that checks a tree out (worktree add, checkout):
// with the repository's hooks, as git would run them in the worktree
// checked out, and no fsmonitor. hooks is what core.hooksPath is for it
// (Repo.checkoutHooks), "" to leave git's own reading.
func runCheckout(dir, hooks string, args ...string) ([]byte, error) {
	config := noMonitor
	if hooks != "" {
		config = append(append([]string{}, noMonitor...), "-c", "core.hooksPath="+hooks)
	}
	return runGit(dir, config, nil, args...)
}

// runPlain runs a call with the configuration as it is, for the two
// questions about it that the overrides would answer instead (where the
// hooks are): `git config --get` and `rev-parse --git-path`, which run no
// program.
func runPlain(dir string, args ...string) ([]byte, error) {
	return runGit(dir, nil, nil, args...)
}

// runGit runs git config... global... -C dir args... and returns its
// standard output. config, the -c options above, is left out of a
// failure's message: it is the same for every call of its kind.
func runGit(dir string, config, global []string, args ...string) ([]byte, error) {
	argv := append(append(append(append([]string{}, config...), global...), "-C", dir), args...)
	cmd := exec.Command("git", argv...)
	cmd.Env = environ()
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, failure.Wrap(failure.Prereq, err,
				"install git (for example `apt-get install git`) or add the directory holding it to PATH",
				"git not found on PATH")
		}
		ce := &CommandError{
			Dir:    dir,
			Args:   append(append([]string{}, global...), args...),
			Stderr: strings.TrimSpace(stderr.String()),
			Err:    err,
		}
		if ce.NoSpace, ce.quotedSpace = noSpacePath(dir, ce.Stderr); ce.NoSpace != "" {
			// Measured now: whoever handles the error may free space
			// first. A caller that knows better marks it again.
			return nil, failure.NoSpaceAt(ce.NoSpace, ce)
		}
		return nil, ce
	}
	return stdout.Bytes(), nil
}

// exitCode returns the exit status of a failed git call, or -1.
func exitCode(err error) int {
	var ce *CommandError
	if errors.As(err, &ce) {
		return ce.ExitCode()
	}
	return -1
}

// stderrOf returns the standard error of a failed git call, or "".
func stderrOf(err error) string {
	var ce *CommandError
	if errors.As(err, &ce) {
		return ce.Stderr
	}
	return ""
}

// wrapf adds context to err in the usual "what: cause" shape.
func wrapf(err error, format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, err)...)
}
