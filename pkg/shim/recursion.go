package shim

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ferrydev/ferry/pkg/cargoenv"
	"github.com/ferrydev/ferry/pkg/digest"
	"github.com/ferrydev/ferry/pkg/failure"
)

// The shim must never run itself as the real cargo. RealCargo skips every
// cargo that resolves to the shim, but not a wrapper that starts the shim
// again (a script in another PATH directory that execs ferry-shim, or
// execs `cargo` with Ferry's bin directory still first on PATH): the shim
// then picks that wrapper again and again, about 120,000 execs before
// anything stopped it. Nesting itself is legitimate and must keep working:
// Cargo runs build scripts, `cargo run` targets (cargo xtask) and external
// subcommands, and those call cargo through the shim again, so "the shim
// is running inside the shim" proves nothing. Two markers in the
// environment of every cargo the shim starts tell the cases apart:
//
//   - envCall names the call the shim made: the process it replaced with
//     cargo (its pid and start time; the start time because the pid alone
//     repeats across the PID namespaces Ferry's sandboxes create) and a
//     digest of the cargo, working directory and arguments. A shim that is
//     that same process, about to make that same call, came straight back
//     from the cargo it chose: had the real cargo run in between, what it
//     execs in the same process (an external subcommand, a `cargo run`
//     target) would call cargo with other arguments. So it would do the
//     same again forever, and it stops at once. Its probe of the workspace
//     (cargo locate-project, which runs nothing) is marked the same way
//     without a process: any shim that probe reaches with the same call is
//     a loop.
//   - envDepth counts the shim calls enclosing this one. A wrapper that
//     starts the shim as a child, or changes the arguments each round, is
//     not the same process making the same call; the depth bound stops it.
//     Legitimate nesting is shallow: cargo xtask → cargo build → a build
//     script's cargo metadata is three deep.
//
// Both are ordinary variables that a wrapper could drop; one that does so
// deliberately can loop, and nothing in the environment can stop that.
const (
	envCall  = "FERRY_SHIM_CALL"
	envDepth = "FERRY_SHIM_DEPTH"
	// maxDepth bounds nested shim calls.
	maxDepth = 16
	// probeID stands for the process in envCall of a probe, whose pid the
	// shim cannot know before starting it.
	probeID = "probe"
)

// callDigest names one cargo call: which cargo, where, with what arguments.
func callDigest(cargo, dir string, args []string) string {
	h := digest.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d", cargo, dir, len(args))
	for _, a := range args {
		fmt.Fprintf(h, "\x00%s", a)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// selfID names this process across execs: its pid and its start time in
// clock ticks since boot (field 22 of /proc/self/stat), which exec keeps.
func selfID() string {
	pid := strconv.Itoa(os.Getpid())
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return pid
	}
	// The command name (field 2) may hold spaces and parentheses: the fields
	// that follow start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return pid
	}
	f := strings.Fields(s[i+1:]) // field 3 onwards
	if len(f) < 20 {
		return pid
	}
	return pid + "." + f[19]
}

// depth is the number of shim calls enclosing this one.
func (c *Call) depth() int {
	n, err := strconv.Atoi(cargoenv.Get(c.Env, envDepth))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// checkRecursion refuses a call that re-entered the shim through cargo, the
// real cargo c.RealCargo chose: the same process making the same call it
// just made, a shim reached from its own probe, or nesting deeper than
// maxDepth.
func (c *Call) checkRecursion(cargo string) error {
	if d := c.depth(); d >= maxDepth {
		return c.recursionError(cargo, fmt.Sprintf("cargo calls nest %d deep through Ferry's shim", d), "probably runs")
	}
	id, sum, ok := strings.Cut(cargoenv.Get(c.Env, envCall), ":")
	if !ok || sum != callDigest(cargo, c.Dir, c.Args) {
		return nil
	}
	if id == probeID || id == selfID() {
		return c.recursionError(cargo, "Ferry's shim re-entered itself", "runs")
	}
	return nil
}

// recursionError names the PATH entries involved: the shim's, and that of
// the cargo the shim took for the real one. runs is how sure the loop is.
func (c *Call) recursionError(cargo, what, runs string) error {
	dir := filepath.Dir(cargo)
	return failure.New(failure.Prereq,
		fmt.Sprintf("take %s off PATH, or make its cargo run the real cargo by path rather than `cargo` from PATH or ferry-shim: "+
			"Ferry's %s must come first on PATH, and the real cargo after it", dir, c.ShimDir),
		"%s: the real cargo it found, %s (PATH entry %s), %s the shim (cargo in PATH entry %s) again",
		what, cargo, dir, runs, c.ShimDir)
}

// marked returns env for a cargo the shim starts in dir: one level deeper,
// and naming the call as made by id (no call when id is "": a child whose
// pid is not known yet, which the depth bound covers).
func (c *Call) marked(env []string, id, cargo, dir string, args []string) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		if !strings.HasPrefix(kv, envCall+"=") && !strings.HasPrefix(kv, envDepth+"=") {
			out = append(out, kv)
		}
	}
	out = append(out, envDepth+"="+strconv.Itoa(c.depth()+1))
	if id != "" {
		out = append(out, envCall+"="+id+":"+callDigest(cargo, dir, args))
	}
	return out
}

// shimErrorPrefix starts the shim's own errors on stderr (report.Print
// under Prog). A probe whose stderr holds one reached a shim that failed,
// a loop most likely: the probe's caller passes that error on instead of
// guessing the workspace and going round again.
const shimErrorPrefix = Prog + ": error: "

// probeFailure returns the error a shim reached from a probe reported in
// stderr, or nil: its message with the causes printed under it, and its
// hint.
func probeFailure(stderr string) error {
	lines := strings.Split(stderr, "\n")
	for i, l := range lines {
		msg, ok := strings.CutPrefix(l, shimErrorPrefix)
		if !ok {
			continue
		}
		var hint []string
		for _, next := range lines[i+1:] {
			t := strings.TrimSpace(next)
			if !strings.HasPrefix(next, "  ") || t == "" {
				break // the printed error ends at its first unindented line
			}
			if cause, ok := strings.CutPrefix(t, "caused by: "); ok && hint == nil {
				msg += ": " + cause
			} else if h, ok := strings.CutPrefix(t, "hint: "); ok {
				hint = append(hint, h)
			} else if hint != nil {
				hint = append(hint, t) // a hint's further lines
			}
		}
		return failure.New(failure.Prereq, strings.Join(hint, "\n"), "%s", msg)
	}
	return nil
}
