// Package cargoenv edits the environment of the cargo processes Ferry
// starts. Every path that starts cargo for a base or an agent drops the
// variables below first: an inherited target dir would send one worktree's
// build into another's state (invariants 3 and 4 of the architecture
// contract), so Ferry sets them itself and exports them to nothing else.
package cargoenv

import (
	"slices"
	"strings"
)

// Redirects are the variables that move Cargo's output.
var Redirects = []string{"CARGO_TARGET_DIR", "CARGO_BUILD_TARGET_DIR", "CARGO_BUILD_BUILD_DIR"}

// Without returns env without the variables named in drop (and without
// Redirects, which are always dropped).
func Without(env []string, drop ...string) []string {
	skip := make(map[string]bool, len(drop)+len(Redirects))
	for _, k := range Redirects {
		skip[k] = true
	}
	for _, k := range drop {
		skip[k] = true
	}
	out := make([]string, 0, len(env)+4)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !skip[k] {
			out = append(out, kv)
		}
	}
	return out
}

// BusVariables are the FERRY_* variables about the bus: its address (which
// may carry credentials) and how Ferry uses it. No command Ferry runs in a
// sandbox gets them (WithoutBus): whoever holds the address and its
// credentials can publish events, and on a host that shares bases, objects
// runners pull.
var BusVariables = []string{"FERRY_NATS_URL", "FERRY_BUS_REPLICAS", "FERRY_ACK_WAIT", "FERRY_BUS_MONITOR_PORT"}

// WithoutBus returns env without BusVariables.
func WithoutBus(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(BusVariables, name) {
			out = append(out, kv)
		}
	}
	return out
}

// Target returns the variables that send Cargo's output to dir.
func Target(dir string) []string {
	return []string{"CARGO_TARGET_DIR=" + dir, "CARGO_BUILD_BUILD_DIR=" + dir}
}

// Get returns the last value of key in env, or "".
func Get(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if s, ok := strings.CutPrefix(kv, key+"="); ok {
			v = s
		}
	}
	return v
}

// FreshnessVars are the variables of Cargo's checksum freshness
// (toolchain.ChecksumEnv sets them).
var FreshnessVars = []string{"CARGO_UNSTABLE_CHECKSUM_FRESHNESS", "CARGO_BUILD_FINGERPRINT"}

// WithFreshness returns env with set, a base's freshness variables
// (none in mtime mode), in place of any inherited ones: the mode is the
// base's, and a unit built under the other one would not match it.
func WithFreshness(env, set []string) []string {
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k != FreshnessVars[0] && k != FreshnessVars[1] {
			out = append(out, kv)
		}
	}
	return append(out, set...)
}
