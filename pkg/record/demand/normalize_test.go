package demand

import (
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	for _, tt := range []struct {
		args, dir string
		want      string // "" for a call demand does not count
		warm      string // "" for unlearnable
	}{
		{"build", ".", "cargo build", "cargo build --keep-going"},
		{"b", ".", "cargo build", "cargo build --keep-going"},
		// Output, verbosity, jobs and lockfile options change no unit.
		{"-v --color always build -j4 --message-format=json --locked -q --keep-going", ".", "cargo build", "cargo build --keep-going"},
		{"build --release", ".", "cargo build --release", "cargo build --release --keep-going"},
		{"build -r", ".", "cargo build --release", "cargo build --release --keep-going"},
		{"build --profile release", ".", "cargo build --release", "cargo build --release --keep-going"},
		{"build --profile=dev", ".", "cargo build", "cargo build --keep-going"},
		{"build --profile bench-fast", ".", "cargo build --profile=bench-fast", "cargo build --profile=bench-fast --keep-going"},
		// Features: one sorted list however they are given.
		{"build -F b,a --features c -Fa", ".", "cargo build --features=a,b,c", "cargo build --features=a,b,c --keep-going"},
		{"build -p b -p a --all", ".", "cargo build --workspace --package=a,b", "cargo build --workspace --package=a,b --keep-going"},
		{"build -pfoo", ".", "cargo build --package=foo", "cargo build --package=foo --keep-going"},
		{"build --bin app --target x86_64-unknown-linux-gnu", ".", "cargo build --bin=app --target=x86_64-unknown-linux-gnu", "cargo build --bin=app --target=x86_64-unknown-linux-gnu --keep-going"},
		// Test filters and program arguments are dropped.
		{"test -p foo parser:: -- --nocapture --test-threads 1", ".", "cargo test --package=foo", "cargo test --package=foo --no-run"},
		{"t --no-run", ".", "cargo test", "cargo test --no-run"},
		{"run --bin app -- --manifest-dir", ".", "cargo run --bin=app", "cargo build --bin=app --keep-going"},
		{"bench --no-run", ".", "cargo bench", "cargo bench --no-run"},
		{"doc --open --no-deps", ".", "cargo doc --no-deps", "cargo doc --no-deps --keep-going"},
		// clippy's lint options are part of what it checks.
		{"clippy --all-targets -- -D warnings -Wclippy::pedantic", ".", "cargo clippy --all-targets -- -D warnings -W clippy::pedantic",
			"cargo clippy --all-targets --keep-going -- -D warnings -W clippy::pedantic"},
		// A package directory is part of the command.
		{"build", "crates/app", "cargo build (in crates/app)", "cd crates/app && cargo build --keep-going"},
		{"build --manifest-path tools/Cargo.toml", "tools", "cargo build (in tools)", "cd tools && cargo build --keep-going"},
		// What a base cannot warm as given.
		{"+nightly build", ".", "cargo build", ""},
		{"--config profile.dev.opt-level=1 build", ".", "cargo build", ""},
		{"build --target-dir /tmp/t", ".", "cargo build", ""},
		{"build -Zbuild-std", ".", "cargo build", ""},
		{"build --frobnicate", ".", "cargo build", ""},
		{"rustc -- -Cdebug-assertions", ".", "cargo rustc", ""},
		{"fix", ".", "cargo fix", ""},
		// Calls that build nothing.
		{"-V", ".", "", ""},
		{"metadata --format-version 1", ".", "", ""},
		{"fmt", ".", "", ""},
		{"nextest run", ".", "", ""},
		{"", ".", "", ""},
	} {
		args := strings.Fields(tt.args)
		c, ok := Normalize(args, tt.dir)
		if tt.want == "" {
			if ok {
				t.Errorf("Normalize(%q) = %q, want not counted", tt.args, c)
			}
			continue
		}
		if !ok {
			t.Errorf("Normalize(%q): not counted, want %q", tt.args, tt.want)
			continue
		}
		if got := c.String(); got != tt.want {
			t.Errorf("Normalize(%q) = %q, want %q", tt.args, got, tt.want)
		}
		if got := c.Warm(); got != tt.warm {
			t.Errorf("Normalize(%q).Warm() = %q, want %q (unlearnable: %q)", tt.args, got, tt.warm, c.Unlearnable)
		}
		if (c.Warm() == "") != (c.Unlearnable != "") && c.Sub != "rustc" {
			t.Errorf("Normalize(%q): warm %q but unlearnable %q", tt.args, c.Warm(), c.Unlearnable)
		}
	}
}

// A command read back from the log is warmed only as Normalize could have
// made it: never a directory outside the checkout, an option it does not
// keep, or a value a shell would read as more than a word.
func TestWarmRefusesWhatNormalizeDoesNotMake(t *testing.T) {
	for _, c := range []Command{
		{Dir: "../..", Sub: "build"},
		{Dir: "/etc", Sub: "build"},
		{Dir: "a/../../b", Sub: "build"},
		{Dir: ".", Sub: "build", Args: []string{"--features=x;rm -rf ~"}},
		{Dir: ".", Sub: "build", Args: []string{"--features=$(id)"}},
		{Dir: ".", Sub: "build", Args: []string{"--config=x"}},
		{Dir: ".", Sub: "build", Args: []string{"--release=yes"}},
		{Dir: ".", Sub: "sh"},
		{Dir: ".", Sub: "b"},
		{Dir: ".", Sub: "clippy", Lints: []string{"-D warnings; id"}},
	} {
		if w := c.Warm(); w != "" {
			t.Errorf("%+v warms as %q", c, w)
		}
	}
	ok := Command{Dir: "crates/app", Sub: "clippy", Args: []string{"--release", "--features=a,b"}, Lints: []string{"-D warnings"}}
	if w := ok.Warm(); w != "cd crates/app && cargo clippy --release --features=a,b --keep-going -- -D warnings" {
		t.Errorf("warm %q", w)
	}
}

// Features given as one space-separated value are the same list.
func TestNormalizeFeaturesWithSpaces(t *testing.T) {
	c, _ := Normalize([]string{"build", "--features", "y x"}, ".")
	if got := c.String(); got != "cargo build --features=x,y" {
		t.Errorf("got %q", got)
	}
}

// A warm command the defaults give keys as the call agents make.
func TestKeyOf(t *testing.T) {
	for warm, want := range map[string]string{
		"cargo build --workspace --keep-going":                  "cargo build --workspace",
		"cargo test --workspace --no-run":                       "cargo test --workspace",
		"cargo clippy --workspace --all-targets -- -D warnings": "cargo clippy --workspace --all-targets -- -D warnings",
		"cd tools && cargo build":                               "",
		"make warm":                                             "",
	} {
		got, ok := KeyOf(warm)
		if got != want || ok != (want != "") {
			t.Errorf("KeyOf(%q) = %q, %t; want %q", warm, got, ok, want)
		}
	}
}
