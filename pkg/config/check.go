package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The values [agent] backend and [sandbox] mode accept.
var (
	backends     = []string{"auto", "reflink", "copy", "overlay"}
	sandboxModes = []string{"auto", "on", "off"}
)

// The checks below return "" for a valid value, else what is wrong (to
// follow the key or variable in the message) and, where the value is a
// choice, a hint.

func backendProblem(v string) (msg, hint string) {
	if slices.Contains(backends, v) {
		return "", ""
	}
	msg = "not a backend; use one of " + strings.Join(backends, ", ")
	if v == "hardlink" {
		// Invariant 3 of the spec: there is no hardlink backend.
		return msg, "Ferry never forks with hardlinks: Cargo rewrites fingerprint files with File::create, " +
			"truncating the shared inode, so an agent's rebuild would modify the base; " +
			"use reflink (copy-on-write, new inodes), or auto to let Ferry choose"
	}
	return msg, "auto picks reflink where the store's filesystem can clone files, else overlay in the sandbox, else copy"
}

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
