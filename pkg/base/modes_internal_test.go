package base

import (
	"slices"
	"testing"

	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/remap"
	"github.com/ferrydev/ferry/pkg/sandbox"
)

// Remap mode enters the fingerprint, so a base built in it is never
// reused without it or the other way round; a base without it keeps the
// id it had before the mode existed.
func TestRemapEntersTheFingerprint(t *testing.T) {
	tc := Toolchain{Rustc: "rustc 1.95.0", Cargo: "cargo 1.95.0"}
	warm := []WarmCommand{{Command: "cargo build"}}
	off := Modes{Freshness: "mtime", Isolation: sandbox.IsolationOff}
	on := off
	on.Remap = true
	if Fingerprint(tc, warm, off) == Fingerprint(tc, warm, on) {
		t.Error("remap mode does not change the fingerprint")
	}
	// The value before the mode existed (Format 2): unset, the mode adds
	// nothing to the hash.
	if got := Fingerprint(tc, warm, off); got != "b2d6518d61426767" {
		t.Errorf("fingerprint without remap mode is %s, was b2d6518d61426767", got)
	}
}

// A remap base's warm commands reach the target through the checkout's
// link and run rustc through the wrapper, replacing an inherited one, with
// the toolchain's channel.
func TestWarmEnvInRemapMode(t *testing.T) {
	r := &Record{Base: record.Base{Src: "/s/bases/b/src", Target: "/s/bases/b/target", Modes: Modes{Isolation: sandbox.IsolationOff, Remap: true},
		Toolchain: Toolchain{RustcVersion: "1.97.0-nightly"}}}
	env := warmEnv([]string{"PATH=/bin", "RUSTC_WORKSPACE_WRAPPER=/theirs", remap.EnvChannel + "=stable"}, r, "/p/bin", "/p/bin/ferry-rustc")
	for _, want := range []string{"CARGO_TARGET_DIR=/s/bases/b/src/.ferry-target", "FERRY_WARM_TARGET=/s/bases/b/src/.ferry-target",
		"RUSTC_WORKSPACE_WRAPPER=/p/bin/ferry-rustc", remap.EnvChannel + "=nightly"} {
		if !slices.Contains(env, want) {
			t.Errorf("warm env lacks %s: %q", want, env)
		}
	}
	for _, gone := range []string{"RUSTC_WORKSPACE_WRAPPER=/theirs", remap.EnvChannel + "=stable"} {
		if slices.Contains(env, gone) {
			t.Errorf("warm env keeps the inherited %s", gone)
		}
	}
	r.Modes.Remap = false
	if env := warmEnv([]string{"PATH=/bin"}, r, "/p/bin", ""); !slices.Contains(env, "CARGO_TARGET_DIR=/s/bases/b/target") {
		t.Errorf("without remap mode the warm env is %q", env)
	}
}
