package config

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/fork"
)

// The values [sandbox] mode accepts ([agent] backend takes fork.Names).
var sandboxModes = []string{"auto", "on", "off"}

// The checks below return "" for a valid value, else what is wrong (to
// follow the key or variable in the message) and, where the value is a
// choice, a hint.

// backendProblem checks [agent] backend against the fork backends
// registered in package fork.
func backendProblem(v string) (msg, hint string) { return fork.NameProblem(v) }

func sandboxModeProblem(v string) (msg, hint string) {
	if slices.Contains(sandboxModes, v) {
		return "", ""
	}
	return "not a sandbox mode; use one of " + strings.Join(sandboxModes, ", "),
		"auto uses the namespace sandbox where user namespaces work; on and off force the choice"
}

// pathProblem checks a configured directory before it is resolved.
func pathProblem(p string) string {
	switch {
	case p == "":
		return "the path is empty"
	case strings.HasPrefix(p, "~") && p != "~" && !strings.HasPrefix(p, "~/"):
		return `only a leading "~/" is expanded; ~user is not supported`
	}
	return ""
}

// writableProblem checks an entry of [sandbox] writable: an absolute path
// or one from ~/, never / itself (which would leave nothing confined).
func writableProblem(p string) string {
	if msg := pathProblem(p); msg != "" {
		return msg
	}
	switch {
	case p != "~" && !strings.HasPrefix(p, "~/") && !filepath.IsAbs(p):
		return "not an absolute path (or one from ~/)"
	case filepath.Clean(p) == "/":
		return "/ would make the whole host writable from builds; name the directories they write"
	}
	return ""
}

// branchPrefixProblem checks that p followed by an agent name can be a git
// branch name (the rules of git check-ref-format, applied to a prefix: the
// last path component is completed by the name, so only it may end in
// ".lock" or be empty).
func branchPrefixProblem(p string) string {
	switch {
	case strings.HasPrefix(p, "-"):
		return `starts with "-"`
	case strings.HasPrefix(p, "/"):
		return `starts with "/"`
	}
	for _, bad := range []string{"..", "//", "@{"} {
		if strings.Contains(p, bad) {
			return fmt.Sprintf("contains %q", bad)
		}
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(` ~^:?*[\`, r) {
			return fmt.Sprintf("contains %q", r)
		}
	}
	parts := strings.Split(p, "/")
	for i, c := range parts {
		if strings.HasPrefix(c, ".") {
			return `has a path component starting with "."`
		}
		if i < len(parts)-1 && strings.HasSuffix(c, ".lock") {
			return `has a path component ending in ".lock"`
		}
	}
	return ""
}

// replicasProblem checks a stream replica count: JetStream keeps one to
// five copies of a stream.
func replicasProblem(n int) (msg, hint string) {
	if n >= 1 && n <= 5 {
		return "", ""
	}
	return "not a replica count JetStream allows (1 to 5)", "use 1 for a single server and 3 for a three-node cluster, or leave it unset"
}

// parseAckWait parses an ack wait: a positive Go duration.
func parseAckWait(v string) (d time.Duration, msg, hint string) {
	const h = `give a duration such as "30s" or "2m": how long a killed builder's commit waits before another builder gets it`
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, "not a duration", h
	}
	if d <= 0 {
		return 0, "not a positive duration", h
	}
	return d, "", ""
}

// ParseReapAfter parses a reap-after time: a Go duration, 0 or more.
func ParseReapAfter(v string) (d time.Duration, msg, hint string) {
	const h = `give a duration such as "24h" or "90m": how long an agent a hook created must show no sign of life before ferry gc reaps it ("0s": as soon as it is abandoned)`
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, "not a duration", h
	}
	if d < 0 {
		return 0, "a negative duration", h
	}
	return d, "", ""
}

// MetricsPorts is how many ports from Settings.MetricsPort the stages use:
// ferry-watch, ferry-base and ferry-gc, in that order.
const MetricsPorts = 3

// portProblem checks a loopback port setting: 0 (off) or a TCP port that
// leaves room for extra ports after it.
func portProblem(n, extra int) (msg, hint string) {
	if n == 0 || n >= 1 && n+extra <= 65535 {
		return "", ""
	}
	if extra > 0 {
		return fmt.Sprintf("not a TCP port with %d more after it", extra),
			fmt.Sprintf("use a port from 1 to %d (each stage takes the next), or 0 for none", 65535-extra)
	}
	return "not a TCP port", "use a port from 1 to 65535, or 0 for none"
}

// parsePort parses a port variable (see portProblem).
func parsePort(v string, extra int) (n int, msg, hint string) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, "not a whole number", "give a port number, or unset it"
	}
	msg, hint = portProblem(n, extra)
	return n, msg, hint
}

// WarmAuto is the [base] warm value that asks for the generated commands
// and, with [base] demand on, the commands agents demand (package demand).
const WarmAuto = "auto"

// warmValue reads a decoded [base] warm value: the commands of a list, or
// auto (nil commands). msg follows the key in an error ("base.warm" +
// msg).
func warmValue(v any) (cmds []string, msg, hint string) {
	const listHint = `write warm = "auto" (the default: the generated commands and what agents demand), or a list of commands: warm = ["` + generatedBuild + `"]`
	switch w := v.(type) {
	case string:
		if w == WarmAuto {
			return nil, "", ""
		}
		return nil, fmt.Sprintf(" = %q: not a warm mode (the only one is \"auto\") or a list of commands", w), listHint
	case []any:
		if len(w) == 0 {
			return nil, " is empty", `list at least one command, e.g. warm = ["` + generatedBuild + `"], or remove the key to use the default`
		}
		for i, c := range w {
			s, ok := c.(string)
			if !ok {
				return nil, fmt.Sprintf(": command %d is not a string", i+1), listHint
			}
			if strings.TrimSpace(s) == "" {
				return nil, fmt.Sprintf(": command %d is empty", i+1), "remove the empty command"
			}
			cmds = append(cmds, s)
		}
		return cmds, "", ""
	}
	return nil, fmt.Sprintf(` must be "auto" or an array of strings, not %s`, goKind(v)), listHint
}

// goKind words the TOML type go-toml decoded v from.
func goKind(v any) string {
	switch v.(type) {
	case bool:
		return "a boolean"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case map[string]any:
		return "a table"
	}
	return "a date or time"
}

// DefaultDemandWindow, DefaultDemandMin and DefaultDemandBudget are the
// [base] demand-* defaults, their shown values: a command agents ran 3
// times in 7 days is warmed, if what it adds to the warm time fits in once
// the base's own.
var (
	DefaultDemandWindow = shown.DemandWindow
	DefaultDemandMin    = shown.DemandMin
	DefaultDemandBudget = shown.DemandBudget
)

// ParseDemandWindow parses [base] demand-window: a Go duration ("36h") or
// a whole number of days ("7d").
func ParseDemandWindow(v string) (d time.Duration, msg, hint string) {
	const h = `give a duration such as "7d" or "36h": how far back the agents' calls count when a base learns what to warm`
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil {
			return 0, "not a duration", h
		}
		d = time.Duration(days) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return 0, "not a duration", h
		}
	}
	if d <= 0 {
		return 0, "not a positive duration", h
	}
	return d, "", ""
}

// budgetProblem checks [base] demand-budget.
func budgetProblem(b float64) (msg, hint string) {
	if b >= 0 && !math.IsInf(b, 0) && !math.IsNaN(b) {
		return "", ""
	}
	return "negative", "give the extra warm time demanded commands may add, as a fraction of the base's own warm time: 1.0 (the default) allows as much again, 0 none"
}
