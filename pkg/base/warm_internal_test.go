package base

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// Cargo's reports of failed targets are read from the output as it streams
// past, in whatever pieces it arrives, coloured or not; everything is
// passed on unchanged.
func TestTargetLogReadsCargoReports(t *testing.T) {
	out := "   Compiling a v0.1.0 (/mnt/src/a)\n" +
		"error[E0554]: `#![feature]` may not be used on the stable release channel\n" +
		"error: could not compile `a` (bench \"nightly\") due to 1 previous error\n" +
		"warning: build failed, waiting for other jobs to finish...\n" +
		"\x1b[1m\x1b[91merror\x1b[0m\x1b[1m: could not compile `a` (test \"utf8\") due to 1 previous error; 1 warning emitted\x1b[0m\n" +
		"error: could not compile `b` (bin \"b\" test) due to 1 previous error\r\n" +
		"error: could not compile `c` (lib test) due to 2 previous errors\n" +
		"error: could not compile `a` (example \"ex\") due to 1 previous error\n" +
		"error: could not compile `c` (build script) due to 1 previous error\n" +
		"error: failed to run custom build command for `d v0.1.0 (/mnt/src/d)`\n" +
		"error: could not compile `old` due to previous error\n" +
		"  = note: error: could not compile `quoted` (lib) is not at the start of a line\n" +
		"error: could not compile `b` (bin \"b\") due to 1 previous error\n" +
		"error: could not compile `a` (bench \"nightly\") due to 1 previous error\n" + // reported twice: kept once
		"error: could not compile `last` (lib) due to 1 previous error" // no newline
	var passed bytes.Buffer
	l := &targetLog{w: &passed}
	for i := 0; i < len(out); i += 7 {
		l.Write([]byte(out[i:min(i+7, len(out))]))
	}
	if passed.String() != out {
		t.Fatalf("output not passed on unchanged:\n%q", passed.String())
	}
	var got []string
	var blocking []string
	for _, f := range l.targets() {
		got = append(got, f.String())
		if f.blocks() {
			blocking = append(blocking, f.String())
		}
	}
	want := []string{
		`bench "nightly" of crate a`,
		`test "utf8" of crate a`,
		`unit tests of the binary "b" of crate b`,
		`unit tests of the library of crate c`,
		`example "ex" of crate a`,
		`build script of crate c`,
		`build script of crate d (when run)`,
		`crate old`,
		`binary "b" of crate b`,
		`library of crate last`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("targets:\n got %q\nwant %q", got, want)
	}
	wantBlocking := []string{`build script of crate c`, `build script of crate d (when run)`, `crate old`, `binary "b" of crate b`, `library of crate last`}
	if !reflect.DeepEqual(blocking, wantBlocking) {
		t.Errorf("blocking:\n got %q\nwant %q", blocking, wantBlocking)
	}
}

// A line longer than the log reads is passed on whole and does not shift
// the lines after it.
func TestTargetLogLongLine(t *testing.T) {
	var passed bytes.Buffer
	l := &targetLog{w: &passed}
	long := "error: could not compile `x` (lib) " + strings.Repeat("y", 3*maxLine) + "\n"
	l.Write([]byte(long))
	l.Write([]byte("error: could not compile `z` (test \"t\") due to 1 previous error\n"))
	got := l.targets()
	if len(got) != 2 || got[0].crate != "x" || got[1].String() != `test "t" of crate z` {
		t.Errorf("targets %+v", got)
	}
	if passed.Len() != len(long)+len("error: could not compile `z` (test \"t\") due to 1 previous error\n") {
		t.Errorf("passed %d bytes", passed.Len())
	}
}

func TestClippyCommand(t *testing.T) {
	for cmd, want := range map[string]bool{
		"cargo clippy --workspace --all-targets --keep-going":          true,
		"cargo +nightly clippy --all-targets":                          true,
		"cargo --config 'build.jobs=2' --locked clippy -- -D warnings": true,
		"/usr/bin/cargo clippy":                                        true,
		"cargo-clippy --all":                                           true,
		"cargo clippy && cargo clippy --release":                       true,
		"cargo build --workspace":                                      false,
		"cargo build && cargo clippy":                                  false,
		"cargo clippy; cargo test --no-run":                            false,
		"make clippy":                                                  false,
		"echo cargo":                                                   false,
		"":                                                             false,
	} {
		if got := clippyCommand(cmd); got != want {
			t.Errorf("clippyCommand(%q) = %v, want %v", cmd, got, want)
		}
	}
}

// The rule: a failed command keeps the base when it keeps going and what
// failed is tests, benches and examples, or, in a clippy command after a
// build, anything; the generated clippy command always does; a failure
// that names no target never does.
func TestJudge(t *testing.T) {
	bench := failedTarget{crate: "a", desc: `bench "n"`}
	libTest := failedTarget{crate: "a", desc: "lib test"}
	lib := failedTarget{crate: "a", desc: "lib"}
	build := WarmCommand{Command: "cargo build --all-targets --keep-going", KeepGoing: true}
	clippy := WarmCommand{Command: "cargo clippy --all-targets --keep-going", KeepGoing: true}
	generated := WarmCommand{Command: "cargo clippy --workspace --all-targets --keep-going", Generated: true, KeepGoing: true}
	strict := WarmCommand{Command: "cargo build --all-targets"}
	for _, tt := range []struct {
		name   string
		w      WarmCommand
		failed []failedTarget
		built  bool
		keep   bool
		blocks int
	}{
		{"bench and unit tests", build, []failedTarget{bench, libTest}, false, true, 0},
		{"a library", build, []failedTarget{bench, lib}, false, false, 1},
		{"nothing named", build, nil, false, false, 0},
		{"not keeping going", strict, []failedTarget{bench}, false, false, 0},
		{"clippy after a build", clippy, []failedTarget{lib}, true, true, 0},
		{"clippy alone", clippy, []failedTarget{lib}, false, false, 1},
		{"clippy alone, a bench", clippy, []failedTarget{bench}, false, true, 0},
		{"clippy naming nothing", clippy, nil, true, false, 0},
		{"generated clippy", generated, nil, true, true, 0},
	} {
		blocking, keep := judge(tt.w, tt.failed, tt.built)
		if keep != tt.keep || len(blocking) != tt.blocks {
			t.Errorf("%s: keep %v, blocking %v; want %v, %d", tt.name, keep, blocking, tt.keep, tt.blocks)
		}
	}
}

// The hint of a discarded base says the commit does not build only when a
// library, binary or build script failed, and names keep-going when the
// key would have kept the base.
func TestDiscardHint(t *testing.T) {
	p := &Plan{Commit: strings.Repeat("a", 40)}
	bench := failedTarget{crate: "a", desc: `bench "n"`}
	lib := failedTarget{crate: "a", desc: "lib"}
	strict := WarmCommand{Command: "cargo build --all-targets"}
	clippy := WarmCommand{Command: "cargo clippy --all-targets"}
	for _, tt := range []struct {
		name   string
		w      WarmCommand
		failed []failedTarget
		lints  bool
		want   string
	}{
		{"a bench, not keeping going", strict, []failedTarget{bench}, false, "keep-going = true"},
		{"a library, not keeping going", strict, []failedTarget{bench, lib}, false, "the commit does not build (library of crate a)"},
		{"clippy lints, not keeping going", clippy, []failedTarget{lib}, true, "keep-going = true"},
		{"nothing named", strict, nil, false, "run it in a checkout of aaaaaaaaaaaa"},
	} {
		blocking, _ := judge(tt.w, tt.failed, tt.lints)
		if got := discardHint(p, tt.w, tt.failed, blocking, tt.lints); !strings.Contains(got, tt.want) {
			t.Errorf("%s: hint %q lacks %q", tt.name, got, tt.want)
		}
	}
}
