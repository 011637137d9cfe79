package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/pelletier/go-toml/v2"
)

// fakeEnv is an Env with fixed variables, home and working directory. None
// of its paths need to exist: Load only computes paths.
type fakeEnv struct {
	vars    map[string]string
	home    string
	homeErr error
	cwd     string
}

func (e fakeEnv) Getenv(key string) string { return e.vars[key] }
func (e fakeEnv) HomeDir() (string, error) { return e.home, e.homeErr }
func (e fakeEnv) Getwd() (string, error)   { return e.cwd, nil }

const (
	testHome = "/home/ann"
	testCwd  = "/work/cwd"
)

func newEnv(vars map[string]string) fakeEnv {
	return fakeEnv{vars: vars, home: testHome, cwd: testCwd}
}

// writeRepo makes a repository root holding ferry.toml with content, or no
// ferry.toml when content is noFile.
func writeRepo(t *testing.T, content string) string {
	t.Helper()
	root := t.TempDir()
	if content != noFile {
		if err := os.WriteFile(filepath.Join(root, FileName), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const noFile = "\x00no file"

// defaults is what Load returns on Linux with no file and no environment;
// cases change only what they test.
func defaults() Settings {
	return Settings{
		StoreParent:    testHome + "/.cache/ferry",
		WorktreeParent: testHome + "/.local/share/ferry/worktrees",
		Warm:           DefaultWarm(true, true, false),
		WarmIsDefault:  true,
		Demand:         true,
		DemandMin:      3,
		DemandWindow:   7 * 24 * time.Hour,
		DemandBudget:   1,
		Prune:          true,
		Layered:        true,
		Progressive:    true,
		Freshness:      "mtime",
		KeepGoing:      true,
		BranchPrefix:   "ferry/",
		Backend:        "auto",
		SandboxMode:    "auto",
		ReapAfter:      24 * time.Hour,
		MinFree:        Floor{Auto: true},
	}
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name string
		file string // ferry.toml, or noFile
		env  map[string]string
		goos string // default linux
		// want returns the expected settings given the repository root.
		want func(root string) Settings
	}{
		{
			name: "no file, no environment: Linux defaults",
			file: noFile,
			want: func(string) Settings { return defaults() },
		},
		{
			name: "empty file is the defaults",
			file: "# nothing configured\n",
			want: func(root string) Settings {
				s := defaults()
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "macOS defaults use Library, not the XDG fallbacks",
			file: noFile,
			goos: "darwin",
			want: func(string) Settings {
				s := defaults()
				s.StoreParent = testHome + "/Library/Caches/ferry"
				s.WorktreeParent = testHome + "/Library/Application Support/ferry/worktrees"
				return s
			},
		},
		{
			name: "XDG directories when set",
			file: noFile,
			env:  map[string]string{"XDG_CACHE_HOME": "/xdg/cache", "XDG_DATA_HOME": "/xdg/data/"},
			want: func(string) Settings {
				s := defaults()
				s.StoreParent = "/xdg/cache/ferry"
				s.WorktreeParent = "/xdg/data/ferry/worktrees"
				return s
			},
		},
		{
			name: "relative XDG directories are ignored, as the XDG spec says",
			file: noFile,
			env:  map[string]string{"XDG_CACHE_HOME": "cache", "XDG_DATA_HOME": "data"},
			want: func(string) Settings { return defaults() },
		},
		{
			name: "every key from the file",
			file: `
[store]
dir = "/srv/ferry"

[base]
warm = ["cargo check --workspace", "cargo test --no-run"]
prune = false
layered = false
keep-going = true
freshness = "checksum"
demand = false
demand-min = 5
demand-window = "2d"
demand-budget = 0.5

[agent]
worktree-dir = "/srv/trees"
branch-prefix = "agents/"
backend = "copy"

[sandbox]
mode = "off"

[bus]
url = "nats://127.0.0.1:4222"

[gc]
reap-after = "36h"
min-free = "10G"

[share]
trusted-keys = ["ferry-ed25519:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8", "ferry-ed25519:AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA"]
`,
			want: func(root string) Settings {
				return Settings{
					StoreParent:    "/srv/ferry",
					WorktreeParent: "/srv/trees",
					Warm:           []string{"cargo check --workspace", "cargo test --no-run"},
					DemandMin:      5,
					DemandWindow:   48 * time.Hour,
					DemandBudget:   0.5,
					KeepGoing:      true,
					Freshness:      "checksum",
					BranchPrefix:   "agents/",
					Backend:        "copy",
					SandboxMode:    "off",
					BusURL:         "nats://127.0.0.1:4222",
					ReapAfter:      36 * time.Hour,
					MinFree:        Floor{Bytes: 10 << 30},
					TrustedKeys:    []string{"ferry-ed25519:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8", "ferry-ed25519:AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA"},
					File:           filepath.Join(root, FileName),
				}
			},
		},
		{
			name: "relative paths in the file are taken from the repository root, ~/ from home",
			file: "[store]\ndir = \"../state/./ferry\"\n[agent]\nworktree-dir = \"~/trees\"\n",
			want: func(root string) Settings {
				s := defaults()
				s.StoreParent = filepath.Join(filepath.Dir(root), "state", "ferry")
				s.WorktreeParent = testHome + "/trees"
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "bare ~ is the home directory",
			file: "[store]\ndir = \"~\"\n",
			want: func(root string) Settings {
				s := defaults()
				s.StoreParent = testHome
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "inline tables and dotted keys",
			file: "agent = { backend = \"reflink\" }\nbase.warm = [\"make warm\"]\n",
			want: func(root string) Settings {
				s := defaults()
				s.Backend = "reflink"
				s.Warm = []string{"make warm"}
				s.WarmIsDefault = false
				s.Progressive = false
				s.KeepGoing = false
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "environment over the file; relative environment paths from the cwd",
			file: "[store]\ndir = \"/srv/ferry\"\n[agent]\nworktree-dir = \"/srv/trees\"\nbackend = \"copy\"\n[sandbox]\nmode = \"off\"\n[bus]\nurl = \"nats://file:4222\"\n",
			env: map[string]string{
				"FERRY_HOME":      "state",
				"FERRY_WORKTREES": "~/wt",
				"FERRY_BACKEND":   "overlay",
				"FERRY_SANDBOX":   "on",
				"FERRY_NATS_URL":  "nats://env:4222",
			},
			want: func(root string) Settings {
				s := defaults()
				s.StoreParent = testCwd + "/state"
				s.WorktreeParent = testHome + "/wt"
				s.Backend = "overlay"
				s.SandboxMode = "on"
				s.BusURL = "nats://env:4222"
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "[gc] reap-after, a platform's over it, FERRY_REAP_AFTER over both",
			file: "[gc]\nreap-after = \"2h\"\n[platform.linux.gc]\nreap-after = \"90m\"\n",
			want: func(root string) Settings {
				s := defaults()
				s.ReapAfter = 90 * time.Minute
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "[sandbox] remap-paths, a platform's table over it",
			file: "[sandbox]\nmode = \"off\"\nremap-paths = false\n[platform.linux.sandbox]\nremap-paths = true\n",
			want: func(root string) Settings {
				s := defaults()
				s.SandboxMode = "off"
				s.RemapPaths = true
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "FERRY_REMAP_PATHS over the file; under auto remap mode is allowed",
			file: "[sandbox]\nremap-paths = true\n",
			env:  map[string]string{"FERRY_REMAP_PATHS": "0"},
			want: func(root string) Settings {
				s := defaults()
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "[gc] min-free in binary units; FERRY_MIN_FREE over it, 0 for none",
			file: "[gc]\nmin-free = \"1.5G\"\n",
			want: func(root string) Settings {
				s := defaults()
				s.MinFree = Floor{Bytes: 3 << 29}
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "FERRY_MIN_FREE over the file; 0 is no floor",
			file: "[gc]\nmin-free = \"10G\"\n",
			env:  map[string]string{"FERRY_MIN_FREE": "0"},
			want: func(root string) Settings {
				s := defaults()
				s.MinFree = Floor{}
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "FERRY_REAP_AFTER over the file; 0 reaps at once",
			file: "[gc]\nreap-after = \"2h\"\n",
			env:  map[string]string{"FERRY_REAP_AFTER": "0s"},
			want: func(root string) Settings {
				s := defaults()
				s.ReapAfter = 0
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "[bus] monitor-port and [metrics] port; FERRY_METRICS_PORT over the file",
			file: "[bus]\nmonitor-port = 8222\n[metrics]\nport = 9464\n",
			env:  map[string]string{"FERRY_METRICS_PORT": "19464"},
			want: func(root string) Settings {
				s := defaults()
				s.BusMonitorPort = 8222
				s.MetricsPort = 19464
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "FERRY_BUS_MONITOR_PORT=0 turns the file's monitoring off",
			file: "[bus]\nmonitor-port = 8222\n",
			env:  map[string]string{"FERRY_BUS_MONITOR_PORT": "0"},
			want: func(root string) Settings {
				s := defaults()
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "FERRY_HOME alone also holds the worktrees",
			file: noFile,
			env:  map[string]string{"FERRY_HOME": "/fh"},
			want: func(string) Settings {
				s := defaults()
				s.StoreParent = "/fh"
				s.WorktreeParent = "/fh/worktrees"
				return s
			},
		},
		{
			name: "[agent] worktree-dir ranks above $FERRY_HOME/worktrees",
			file: "[agent]\nworktree-dir = \"/srv/trees\"\n",
			env:  map[string]string{"FERRY_HOME": "/fh"},
			want: func(root string) Settings {
				s := defaults()
				s.StoreParent = "/fh"
				s.WorktreeParent = "/srv/trees"
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "FERRY_WORKTREES ranks above $FERRY_HOME/worktrees",
			file: noFile,
			env:  map[string]string{"FERRY_HOME": "/fh", "FERRY_WORKTREES": "/wt"},
			want: func(string) Settings {
				s := defaults()
				s.StoreParent = "/fh"
				s.WorktreeParent = "/wt"
				return s
			},
		},
		{
			name: "empty variables count as unset",
			file: "[agent]\nbackend = \"copy\"\n",
			env:  map[string]string{"FERRY_HOME": "", "FERRY_BACKEND": "", "FERRY_SANDBOX": "", "FERRY_NATS_URL": ""},
			want: func(root string) Settings {
				s := defaults()
				s.Backend = "copy"
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "user-configured clippy is kept as written",
			file: "[base]\nwarm = [\"cargo clippy --workspace --all-targets --keep-going\"]\n",
			want: func(root string) Settings {
				s := defaults()
				s.Warm = []string{GeneratedClippy}
				s.WarmIsDefault = false
				s.Progressive = false
				s.KeepGoing = false
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "configured commands keep going only when asked",
			file: "[base]\nwarm = [\"cargo build --keep-going\"]\nkeep-going = true\n",
			want: func(root string) Settings {
				s := defaults()
				s.Warm = []string{"cargo build --keep-going"}
				s.WarmIsDefault = false
				s.Progressive = false
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "generated commands stop at the first failure when asked",
			file: "[base]\nkeep-going = false\n",
			want: func(root string) Settings {
				s := defaults()
				s.Warm = DefaultWarm(true, false, false)
				s.KeepGoing = false
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "checksum freshness",
			file: "[base]\nfreshness = \"checksum\"\n",
			want: func(root string) Settings {
				s := defaults()
				s.Freshness = FreshnessChecksum
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "warm auto is the default, with demand settings",
			file: "[base]\nwarm = \"auto\"\ndemand-min = 2\ndemand-window = \"36h\"\ndemand-budget = 2\n",
			want: func(root string) Settings {
				s := defaults()
				s.DemandMin, s.DemandWindow, s.DemandBudget = 2, 36*time.Hour, 2
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "demand off, a window in days",
			file: "[base]\ndemand = false\ndemand-window = \"14d\"\ndemand-budget = 0.25\n",
			want: func(root string) Settings {
				s := defaults()
				s.Demand, s.DemandWindow, s.DemandBudget = false, 14*24*time.Hour, 0.25
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
		{
			name: "a platform table sets keep-going",
			file: "[base]\nwarm = [\"cargo build\"]\n[platform.linux.base]\nkeep-going = true\n[platform.macos.base]\nkeep-going = false\n",
			want: func(root string) Settings {
				s := defaults()
				s.Warm = []string{"cargo build"}
				s.WarmIsDefault = false
				s.Progressive = false
				s.File = filepath.Join(root, FileName)
				return s
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := writeRepo(t, tt.file)
			goos := tt.goos
			if goos == "" {
				goos = "linux"
			}
			got, err := load(root, newEnv(tt.env), goos)
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			if want := tt.want(root); !reflect.DeepEqual(*got, want) {
				t.Errorf("settings:\n got %+v\nwant %+v", *got, want)
			}
		})
	}
}

// platformFile sets warm and the backend differently per platform, and the
// branch prefix only at the top level.
const platformFile = `
[base]
warm = ["cargo build"]

[agent]
branch-prefix = "bots/"
backend = "reflink"

[platform.linux.base]
warm = ["cargo build --features linux"]

[platform.macos.agent]
backend = "copy"

[platform.macos.sandbox]
mode = "off"
`

func TestPlatformOverride(t *testing.T) {
	tests := []struct {
		goos        string
		warm        []string
		backend     string
		sandboxMode string
	}{
		{"linux", []string{"cargo build --features linux"}, "reflink", "auto"},
		{"darwin", []string{"cargo build"}, "copy", "off"},
		// A platform without a table gets the top level only.
		{"freebsd", []string{"cargo build"}, "reflink", "auto"},
	}
	root := writeRepo(t, platformFile)
	for _, tt := range tests {
		t.Run(tt.goos, func(t *testing.T) {
			s, err := load(root, newEnv(nil), tt.goos)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(s.Warm, tt.warm) || s.WarmIsDefault {
				t.Errorf("warm = %q (default %v), want %q", s.Warm, s.WarmIsDefault, tt.warm)
			}
			if s.Backend != tt.backend || s.SandboxMode != tt.sandboxMode {
				t.Errorf("backend, mode = %q, %q; want %q, %q", s.Backend, s.SandboxMode, tt.backend, tt.sandboxMode)
			}
			// A platform table overrides single keys: the rest of [agent] stays.
			if s.BranchPrefix != "bots/" {
				t.Errorf("branch prefix = %q, want the top-level bots/", s.BranchPrefix)
			}
		})
	}
}

func TestWarmSetOnlyForOtherPlatformIsDefault(t *testing.T) {
	root := writeRepo(t, "[platform.macos.base]\nwarm = [\"cargo build\"]\n")
	s, err := load(root, newEnv(nil), "linux")
	if err != nil {
		t.Fatal(err)
	}
	if !s.WarmIsDefault || !reflect.DeepEqual(s.Warm, DefaultWarm(true, true, false)) {
		t.Errorf("warm = %q, default %v; want the default list", s.Warm, s.WarmIsDefault)
	}
	s, err = load(root, newEnv(nil), "darwin")
	if err != nil {
		t.Fatal(err)
	}
	if s.WarmIsDefault || !reflect.DeepEqual(s.Warm, []string{"cargo build"}) {
		t.Errorf("on macOS warm = %q, default %v; want the macOS list", s.Warm, s.WarmIsDefault)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		env  map[string]string
		// msg holds substrings of the error; "@:N:" stands for the path of
		// ferry.toml followed by line N.
		msg  []string
		hint []string
	}{
		{
			name: "unknown key names file, line and dotted key",
			file: "# Ferry\n[base]\nwram = [\"cargo build\"]\n",
			msg:  []string{`@:3: unknown key "base.wram"`},
			hint: []string{`did you mean "base.warm"?`, "[base] takes: warm"},
		},
		{
			name: "freshness is mtime or checksum",
			file: "[base]\nfreshness = \"content\"\n",
			msg:  []string{`@:2: base.freshness = "content": not "mtime" or "checksum"`},
			hint: []string{`"checksum" with a nightly toolchain`},
		},
		{
			name: "unknown table",
			file: "[base]\nwarm = [\"x\"]\n\n[prune]\nkeep = 3\n",
			msg:  []string{`@:4: unknown key "prune"`},
			hint: []string{"ferry.toml takes: store, base, agent, sandbox, bus, gc, metrics, paths, share, platform"},
		},
		{
			name: "a trusted key that is not one",
			file: "[share]\ntrusted-keys = [\"ssh-ed25519 AAAA\"]\n",
			msg:  []string{`@:2: share.trusted-keys: "ssh-ed25519 AAAA": not a key`},
			hint: []string{"`ferry key` prints"},
		},
		{
			name: "a trusted key of the wrong length",
			env:  map[string]string{"FERRY_TRUSTED_KEYS": "ferry-ed25519:AAAA"},
			msg:  []string{`FERRY_TRUSTED_KEYS="ferry-ed25519:AAAA"`, "32 bytes"},
			hint: []string{"separated by commas"},
		},
		{
			name: "several unknown keys report the first and count the rest",
			file: "[agent]\nbackedn = \"copy\"\nprefix = \"x/\"\n",
			msg:  []string{`@:2: unknown key "agent.backedn" (and 1 more)`},
			hint: []string{`did you mean "agent.backend"?`, "[agent] takes: worktree-dir, branch-prefix, backend"},
		},
		{
			name: "key in the wrong table",
			file: "[agent]\nmode = \"on\"\n",
			msg:  []string{`@:2: unknown key "agent.mode"`},
			hint: []string{`did you mean "sandbox.mode"?`},
		},
		{
			name: "key outside any table",
			file: "warm = [\"cargo build\"]\n",
			msg:  []string{`@:1: unknown key "warm"`},
			hint: []string{`did you mean "base.warm"?`},
		},
		{
			name: "keys are case-sensitive",
			file: "[agent]\n\nBackend = \"copy\"\n",
			msg:  []string{`@:3: unknown key "agent.Backend"`},
			hint: []string{`did you mean "agent.backend"?`},
		},
		{
			name: "unknown key in a platform table",
			file: "[platform.linux.base]\nwarm = [\"x\"]\npruning = false\n",
			msg:  []string{`@:3: unknown key "platform.linux.base.pruning"`},
			hint: []string{"[platform.linux.base] takes: warm, keep-going, prune, layered, progressive, freshness"},
		},
		{
			name: "misplaced key in a platform table is suggested within it",
			file: "[platform.macos.store]\nbackend = \"copy\"\n",
			msg:  []string{`@:2: unknown key "platform.macos.store.backend"`},
			hint: []string{`did you mean "platform.macos.agent.backend"?`},
		},
		{
			name: "unknown platform",
			file: "[platform.windows.agent]\nbackend = \"copy\"\n",
			msg:  []string{`@:1: unknown key "platform.windows"`},
			hint: []string{"[platform] takes: linux, macos"},
		},
		{
			name: "warm given a string",
			file: "[store]\ndir = \"/s\"\n[base]\nwarm = \"cargo build\"\n",
			msg:  []string{`@:4: base.warm = "cargo build": not a warm mode (the only one is "auto") or a list of commands`},
			hint: []string{`warm = "auto"`, `warm = ["cargo build --workspace"]`},
		},
		{
			name: "an unknown warm mode",
			file: "[base]\nwarm = \"learn\"\n",
			msg:  []string{`@:2: base.warm = "learn": not a warm mode`},
		},
		{
			name: "warm given a number",
			file: "[base]\nwarm = 3\n",
			msg:  []string{`@:2: base.warm must be "auto" or an array of strings, not an integer`},
		},
		{
			name: "warm holding a number",
			file: "[base]\nwarm = [\"cargo build\", 2]\n",
			msg:  []string{"@:2: base.warm: command 2 is not a string"},
		},
		{
			name: "a negative demand budget",
			file: "[base]\ndemand = true\ndemand-budget = -0.5\n",
			msg:  []string{"@:3: base.demand-budget = -0.5: negative"},
			hint: []string{"1.0 (the default)"},
		},
		{
			name: "a negative demand window",
			file: "[platform.linux.base]\ndemand-window = \"-3d\"\n",
			msg:  []string{`@:2: platform.linux.base.demand-window = "-3d": not a positive duration`},
			hint: []string{`"7d"`},
		},
		{
			name: "a demand window that is no duration",
			file: "[base]\ndemand-window = \"a week\"\n",
			msg:  []string{`@:2: base.demand-window = "a week": not a duration`},
		},
		{
			name: "a demand minimum under 1",
			file: "[base]\ndemand-min = 0\n",
			msg:  []string{"@:2: base.demand-min = 0: less than 1"},
		},
		{
			name: "demand given a string",
			file: "[base]\ndemand = \"yes\"\n",
			msg:  []string{"@:2: base.demand must be a boolean, not a string"},
		},
		{
			name: "string key given a boolean",
			file: "[sandbox]\nmode = true\n",
			msg:  []string{"@:2: sandbox.mode must be a string, not a boolean"},
			hint: []string{`quote the value: mode = "…"`},
		},
		{
			name: "keep-going given a string",
			file: "[base]\nwarm = [\"cargo build\"]\nkeep-going = \"yes\"\n",
			msg:  []string{"@:3: base.keep-going must be a boolean, not a string"},
			hint: []string{"write true or false, unquoted: keep-going = true"},
		},
		{
			name: "keep-going in a platform table given a number",
			file: "[platform.macos.base]\nkeep-going = 1\n",
			msg:  []string{"@:2: platform.macos.base.keep-going must be a boolean, not an integer"},
		},
		{
			name: "misspelt keep-going",
			file: "[base]\nkeep_going = true\n",
			msg:  []string{`@:2: unknown key "base.keep_going"`},
			hint: []string{`did you mean "base.keep-going"?`},
		},
		{
			name: "integer key given a string",
			file: "[bus]\nreplicas = \"3\"\n",
			msg:  []string{"@:2: bus.replicas must be an integer, not a string"},
			hint: []string{"write a whole number, unquoted: replicas = 3"},
		},
		{
			name: "string key written as a table",
			file: "[bus.url]\nhost = \"x\"\n",
			msg:  []string{"@:1: bus.url must be a string, not a table"},
		},
		{
			name: "table given a value",
			file: "sandbox = \"on\"\n",
			msg:  []string{"@:1: sandbox must be a table, not a string"},
			hint: []string{"[sandbox] is a table; it takes: mode"},
		},
		{
			name: "syntax error names the line",
			file: "[base]\nwarm = [\"cargo build\"]\n[agent\n",
			msg:  []string{"@:3: invalid TOML"},
		},
		{
			name: "unterminated string",
			file: "[agent]\nbackend = \"copy\n",
			msg:  []string{"@:2: invalid TOML"},
		},
		{
			name: "duplicate key",
			file: "[agent]\nbackend = \"copy\"\nbackend = \"reflink\"\n",
			msg:  []string{"@:3: invalid TOML", "already defined"},
		},
		{
			name: "hardlink backend explains why it does not exist",
			file: "[agent]\nbackend = \"hardlink\"\n",
			msg:  []string{`@:2: agent.backend = "hardlink"`, "auto, reflink, overlay, copy"},
			hint: []string{"never forks with hardlinks", "File::create"},
		},
		{
			name: "unknown backend",
			file: "[agent]\nbackend = \"zfs\"\n",
			msg:  []string{`@:2: agent.backend = "zfs"`, "auto, reflink, overlay, copy"},
		},
		{
			name: "bad sandbox mode",
			file: "[sandbox]\nmode = \"maybe\"\n",
			msg:  []string{`@:2: sandbox.mode = "maybe"`, "auto, on, off"},
		},
		{
			name: "bad value in the other platform's table is still an error",
			file: "[platform.macos.sandbox]\nmode = \"yes\"\n",
			msg:  []string{`@:2: platform.macos.sandbox.mode = "yes"`},
		},
		{
			name: "empty warm",
			file: "[base]\nwarm = []\n",
			msg:  []string{"@:2: base.warm is empty"},
			hint: []string{"at least one command"},
		},
		{
			name: "empty warm in an inline platform table",
			file: "[platform]\nlinux = { base = { warm = [] } }\n",
			msg:  []string{"@:2: platform.linux.base.warm is empty"},
		},
		{
			name: "blank warm command",
			file: "[base]\nwarm = [\n  \"cargo build\",\n  \"  \",\n]\n",
			msg:  []string{"@:2: base.warm: command 2 is empty"},
		},
		{
			name: "branch prefix with a space",
			file: "[agent]\nbranch-prefix = \"my agents/\"\n",
			msg:  []string{`@:2: agent.branch-prefix = "my agents/": contains ' '`},
			hint: []string{"valid git branch name"},
		},
		{
			name: "branch prefix with ..",
			file: "[agent]\nbranch-prefix = \"a..b/\"\n",
			msg:  []string{`agent.branch-prefix = "a..b/": contains ".."`},
		},
		{
			name: "branch prefix with a leading dash",
			file: "[agent]\nbranch-prefix = \"-f/\"\n",
			msg:  []string{`agent.branch-prefix = "-f/": starts with "-"`},
		},
		{
			name: "empty store dir",
			file: "[store]\ndir = \"\"\n",
			msg:  []string{`@:2: store.dir = "": the path is empty`},
		},
		{
			name: "~user is not expanded",
			file: "[agent]\nworktree-dir = \"~bob/trees\"\n",
			msg:  []string{`@:2: agent.worktree-dir = "~bob/trees"`, "~user is not supported"},
		},
		{
			name: "FERRY_BACKEND=hardlink names the variable",
			file: noFile,
			env:  map[string]string{"FERRY_BACKEND": "hardlink"},
			msg:  []string{`FERRY_BACKEND="hardlink": not a fork backend`},
			hint: []string{"never forks with hardlinks"},
		},
		{
			name: "reap-after that is no duration",
			file: "[gc]\nreap-after = \"1d\"\n",
			msg:  []string{`@:2: gc.reap-after = "1d": not a duration`},
			hint: []string{`"24h"`},
		},
		{
			name: "min-free that is no size",
			file: "[gc]\nmin-free = \"lots\"\n",
			msg:  []string{`@:2: gc.min-free = "lots": not a size`},
			hint: []string{`"10G"`, `"auto"`},
		},
		{
			name: "negative FERRY_MIN_FREE",
			file: noFile,
			env:  map[string]string{"FERRY_MIN_FREE": "-1G"},
			msg:  []string{`FERRY_MIN_FREE="-1G": not a size`},
		},
		{
			name: "negative FERRY_REAP_AFTER",
			file: noFile,
			env:  map[string]string{"FERRY_REAP_AFTER": "-1h"},
			msg:  []string{`FERRY_REAP_AFTER="-1h": a negative duration`},
		},
		{
			name: "metrics port without room for the three stages",
			file: "[metrics]\nport = 65534\n",
			msg:  []string{`@:2: metrics.port = 65534: not a TCP port with 2 more after it`},
			hint: []string{"1 to 65533"},
		},
		{
			name: "negative monitor port",
			file: "[bus]\nmonitor-port = -1\n",
			msg:  []string{`@:2: bus.monitor-port = -1: not a TCP port`},
		},
		{
			name: "FERRY_BUS_MONITOR_PORT that is no number",
			file: noFile,
			env:  map[string]string{"FERRY_BUS_MONITOR_PORT": "http"},
			msg:  []string{`FERRY_BUS_MONITOR_PORT="http": not a whole number`},
		},
		{
			name: "bad FERRY_SANDBOX",
			file: noFile,
			env:  map[string]string{"FERRY_SANDBOX": "maybe"},
			msg:  []string{`FERRY_SANDBOX="maybe": not a sandbox mode`, "auto, on, off"},
		},
		{
			name: "remap-paths with sandbox mode on",
			file: "[sandbox]\nmode = \"on\"\nremap-paths = true\n",
			msg:  []string{`@:3: sandbox.remap-paths = true with sandbox mode "on"`, "without the namespace sandbox"},
			hint: []string{`mode = "off"`, `"auto"`},
		},
		{
			name: "remap-paths in the file, FERRY_SANDBOX=on",
			file: "[sandbox]\nremap-paths = true\n",
			env:  map[string]string{"FERRY_SANDBOX": "on"},
			msg:  []string{`@:2: sandbox.remap-paths = true with sandbox mode "on"`},
		},
		{
			name: "FERRY_REMAP_PATHS that is no boolean",
			file: noFile,
			env:  map[string]string{"FERRY_REMAP_PATHS": "yes please"},
			msg:  []string{`FERRY_REMAP_PATHS="yes please": not a boolean`},
			hint: []string{"true or false"},
		},
		{
			name: "remap-paths that is no boolean",
			file: "[sandbox]\nremap-paths = \"yes\"\n",
			msg:  []string{"@:2: sandbox.remap-paths must be a boolean, not a string"},
		},
		{
			name: "bad FERRY_HOME",
			file: noFile,
			env:  map[string]string{"FERRY_HOME": "~bob"},
			msg:  []string{`FERRY_HOME="~bob"`},
		},
		{
			name: "an invalid file wins over a valid environment",
			file: "[agent]\nbackend = \"hardlink\"\n",
			env:  map[string]string{"FERRY_BACKEND": "copy"},
			msg:  []string{`@:2: agent.backend = "hardlink"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := writeRepo(t, tt.file)
			_, err := load(root, newEnv(tt.env), "linux")
			if err == nil {
				t.Fatal("load succeeded, want an error")
			}
			assertUsage(t, err, filepath.Join(root, FileName), tt.msg, tt.hint)
		})
	}
}

// assertUsage checks that err is a usage error containing every msg
// substring (with "@" standing for path) and a hint containing every hint
// substring; an error must always carry some hint.
func assertUsage(t *testing.T, err error, path string, msg, hint []string) {
	t.Helper()
	if k := failure.KindOf(err); k != failure.Usage {
		t.Errorf("kind = %v, want usage (error: %v)", k, err)
	}
	for _, m := range msg {
		m = strings.ReplaceAll(m, "@:", path+":")
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q\n does not contain %q", err, m)
		}
	}
	h := failure.HintOf(err)
	if h == "" {
		t.Errorf("error %q has no hint", err)
	}
	for _, m := range hint {
		if !strings.Contains(h, m) {
			t.Errorf("hint %q\n does not contain %q", h, m)
		}
	}
}

func TestSyntaxErrorKeepsDecodeError(t *testing.T) {
	root := writeRepo(t, "[agent\n")
	_, err := load(root, newEnv(nil), "linux")
	var de *toml.DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %v does not wrap a *toml.DecodeError", err)
	}
	if row, _ := de.Position(); row != 1 {
		t.Errorf("decode error at line %d, want 1", row)
	}
}

func TestUnreadableFile(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, FileName), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := load(root, newEnv(nil), "linux")
	if err == nil {
		t.Fatal("load read a directory as ferry.toml")
	}
	assertUsage(t, err, "", []string{"read " + filepath.Join(root, FileName)}, []string{"readable file"})
}

func TestHomeNeededOnlyForDefaultsAndTilde(t *testing.T) {
	env := newEnv(map[string]string{"FERRY_HOME": "/fh"})
	env.home, env.homeErr = "", errors.New("$HOME is not defined")

	// Everything configured: no home directory needed.
	if _, err := load(writeRepo(t, noFile), env, "linux"); err != nil {
		t.Fatalf("load with FERRY_HOME and no HOME: %v", err)
	}
	// ~/ in the file needs it.
	_, err := load(writeRepo(t, "[agent]\nworktree-dir = \"~/trees\"\n"), env, "linux")
	if err == nil {
		t.Fatal("load expanded ~ without a home directory")
	}
	assertUsage(t, err, "", []string{"agent.worktree-dir", "$HOME is not defined"}, []string{"HOME"})

	// The default store needs it.
	env.vars = nil
	_, err = load(writeRepo(t, noFile), env, "linux")
	if err == nil {
		t.Fatal("load found a cache directory without a home directory")
	}
	assertUsage(t, err, "", []string{"find the cache directory"}, []string{"FERRY_HOME"})
}

func TestRelativeRepoRoot(t *testing.T) {
	// A relative repository root is taken from the working directory, and
	// file paths from that.
	cwd := t.TempDir()
	root := filepath.Join(cwd, "repo")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, FileName), []byte("[store]\ndir = \"state\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := fakeEnv{home: testHome, cwd: cwd}
	s, err := load("repo", env, "linux")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "state"); s.StoreParent != want {
		t.Errorf("store parent = %q, want %q", s.StoreParent, want)
	}
	if want := filepath.Join(root, FileName); s.File != want {
		t.Errorf("file = %q, want %q", s.File, want)
	}
}

// TestLoadOSEnv runs the exported Load against the real process
// environment and platform.
func TestLoadOSEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FERRY_HOME", filepath.Join(dir, "home"))
	t.Setenv("FERRY_WORKTREES", filepath.Join(dir, "trees"))
	t.Setenv("FERRY_BACKEND", "")
	t.Setenv("FERRY_SANDBOX", "off")
	t.Setenv("FERRY_NATS_URL", "")

	file := "[agent]\nbackend = \"copy\"\n[platform.linux.agent]\nbackend = \"reflink\"\n[platform.macos.agent]\nbackend = \"overlay\"\n"
	root := writeRepo(t, file)
	s, err := Load(root, OSEnv())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"linux": "reflink", "darwin": "overlay"}[runtime.GOOS]
	if want == "" {
		want = "copy"
	}
	if s.Backend != want {
		t.Errorf("backend on %s = %q, want %q", runtime.GOOS, s.Backend, want)
	}
	if s.StoreParent != filepath.Join(dir, "home") || s.WorktreeParent != filepath.Join(dir, "trees") || s.SandboxMode != "off" {
		t.Errorf("environment not applied: %+v", s)
	}
}

func TestDefaultWarm(t *testing.T) {
	build, all, check := "cargo build --workspace", "cargo build --workspace --all-targets", "cargo check --workspace"
	test := "cargo test --workspace --no-run"
	clippy, clippyAll := "cargo clippy --workspace", "cargo clippy --workspace --all-targets"
	kg := func(cmds ...string) []string {
		for i := range cmds {
			if cmds[i] != test { // cargo test has no --keep-going
				cmds[i] += " --keep-going"
			}
		}
		return cmds
	}
	for _, tt := range []struct {
		clippy, keepGoing bool
		want              []string
	}{
		{false, false, []string{build, all, test, check}},
		{false, true, kg(build, all, test, check)},
		{true, false, []string{build, all, test, check, clippy, clippyAll}},
		{true, true, kg(build, all, test, check, clippy, clippyAll)},
	} {
		if got := DefaultWarm(tt.clippy, tt.keepGoing, false); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("DefaultWarm(%v, %v) = %q, want %q", tt.clippy, tt.keepGoing, got, tt.want)
		}
	}
	// Where a plain call selects less than the workspace, each command
	// with a plain form is followed by it.
	want := []string{build, "cargo build", all, test, "cargo test --no-run", check, "cargo check", clippy, "cargo clippy", clippyAll}
	if got := DefaultWarm(true, false, true); !reflect.DeepEqual(got, want) {
		t.Errorf("DefaultWarm(true, false, true) = %q, want %q", got, want)
	}
	if got := DefaultWarm(true, true, false); got[len(got)-1] != GeneratedClippy {
		t.Errorf("the last default command is %q, want GeneratedClippy %q", got[len(got)-1], GeneratedClippy)
	}
	// Each call returns a list of its own.
	a := DefaultWarm(true, true, false)
	a[0] = "changed"
	if DefaultWarm(true, true, false)[0] == "changed" {
		t.Error("DefaultWarm returned shared storage")
	}
}

// The generated check and clippy commands only warn when they fail; the
// generated builds, and every configured command, do not.
func TestIsGeneratedLint(t *testing.T) {
	generated := &Settings{Warm: DefaultWarm(true, true, false), WarmIsDefault: true}
	configured := &Settings{Warm: []string{GeneratedClippy}}
	for i, c := range DefaultWarm(true, true, false) {
		lint := i >= 3
		if generated.IsGeneratedLint(c) != lint {
			t.Errorf("IsGeneratedLint(%q) = %t, want %t", c, !lint, lint)
		}
	}
	for _, c := range DefaultWarm(true, false, false)[3:] {
		if !generated.IsGeneratedLint(c) {
			t.Errorf("the default %q without --keep-going is not reported as generated", c)
		}
	}
	for _, c := range []string{"cargo check --keep-going", "cargo clippy"} {
		if !generated.IsGeneratedLint(c) {
			t.Errorf("the plain form %q is not reported as generated", c)
		}
	}
	if generated.IsGeneratedLint("cargo build --keep-going") {
		t.Error("the plain build is reported as a lint")
	}
	if configured.IsGeneratedLint(GeneratedClippy) {
		t.Error("a user-configured clippy command is reported as generated")
	}
}

func TestBranchPrefixProblem(t *testing.T) {
	valid := []string{"", "ferry/", "team.a/", "x.lock", "bots-", "a/b/", "ünï/"}
	for _, p := range valid {
		if msg := branchPrefixProblem(p); msg != "" {
			t.Errorf("branchPrefixProblem(%q) = %q, want valid", p, msg)
		}
	}
	invalid := []string{"-x/", "/x", "a..b", "a//b", "a@{b", "a b", "a\tb", "a~", "a^", "a:b", "a?", "a*", "a[", `a\b`, ".hidden/", "x/.y", "a.lock/", "a\x7f"}
	for _, p := range invalid {
		if branchPrefixProblem(p) == "" {
			t.Errorf("branchPrefixProblem(%q) accepted an invalid prefix", p)
		}
	}
}

// A base learns from demand only with the generated commands and demand
// on: configured commands win.
func TestLearns(t *testing.T) {
	for _, tt := range []struct {
		file  string
		learn bool
	}{
		{"", true},
		{"[base]\nwarm = \"auto\"\n", true},
		{"[base]\ndemand = false\n", false},
		{"[base]\nwarm = [\"cargo build\"]\n", false},
		{"[base]\nwarm = [\"cargo build\"]\ndemand = true\n", false},
		{"[base]\ndemand = false\n[platform.linux.base]\ndemand = true\n", runtime.GOOS == "linux"},
	} {
		dir := t.TempDir()
		if tt.file != "" {
			if err := os.WriteFile(filepath.Join(dir, FileName), []byte(tt.file), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		s, err := Load(dir, newEnv(nil))
		if err != nil {
			t.Fatalf("%q: %v", tt.file, err)
		}
		if s.Learns() != tt.learn {
			t.Errorf("%q: Learns() = %t, want %t", tt.file, s.Learns(), tt.learn)
		}
	}
}

// [paths] worktrees chooses where agent worktrees go; anything but its two
// values is refused at its line, with a hint.
func TestPathsWorktrees(t *testing.T) {
	for content, want := range map[string]bool{noFile: false, "[paths]\nworktrees = \"parent\"\n": false, "[paths]\nworktrees = \"repo\"\n": true} {
		s, err := load(writeRepo(t, content), newEnv(nil), "linux")
		if err != nil || s.WorktreesInRepo != want {
			t.Errorf("%q: in repo %v (%v), want %v", content, s != nil && s.WorktreesInRepo, err, want)
		}
	}
	_, err := load(writeRepo(t, "[paths]\nworktrees = \"elsewhere\"\n"), newEnv(nil), "linux")
	if err == nil || !strings.Contains(err.Error(), `ferry.toml:2: paths.worktrees = "elsewhere"`) || !strings.Contains(failure.HintOf(err), `"repo"`) {
		t.Fatalf("bad value: %v (hint %q)", err, failure.HintOf(err))
	}
}

// Changed names each setting that differs, in kebab case, and nothing else.
func TestChanged(t *testing.T) {
	a, b := defaults(), defaults()
	if got := Changed(&a, &b); len(got) != 0 {
		t.Fatalf("equal settings: %v", got)
	}
	b.Warm = []string{"cargo build"}
	b.KeepGoing = false
	b.BusURL = "nats://elsewhere"
	b.TrustedKeys = []string{"k"}
	b.File = "/elsewhere/ferry.toml"
	if got := strings.Join(Changed(&a, &b), " "); got != "warm keep-going bus-url trusted-keys" {
		t.Fatalf("Changed = %q", got)
	}
}

// LoadCommitted reads ferry.toml from given bytes, as a commit holds it,
// with the working tree's file left unread: its values, relative paths from
// the repository root, errors that name where it came from, and the
// defaults when the commit has none.
func TestLoadCommitted(t *testing.T) {
	root := t.TempDir()
	env := newEnv(nil)
	if err := os.WriteFile(filepath.Join(root, FileName), []byte("[sandbox]\nmode = \"off\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := LoadCommitted(root, env, []byte("[agent]\nworktree-dir = \"wt\"\n"), "HEAD:ferry.toml")
	if err != nil {
		t.Fatal(err)
	}
	if s.SandboxMode != "auto" || s.WorktreeParent != filepath.Join(root, "wt") || s.File != "HEAD:ferry.toml" {
		t.Errorf("mode %q (the working file's must not count), worktree parent %q, file %q", s.SandboxMode, s.WorktreeParent, s.File)
	}
	_, err = LoadCommitted(root, env, []byte("[base]\nwram = []\n"), "HEAD:ferry.toml")
	if err == nil || !strings.Contains(err.Error(), `HEAD:ferry.toml:2: unknown key "base.wram"`) {
		t.Errorf("error %v does not name HEAD:ferry.toml and the line", err)
	}
	s, err = LoadCommitted(root, env, nil, "HEAD:ferry.toml")
	if err != nil || s.SandboxMode != "auto" || s.File != "" {
		t.Errorf("no committed file: %+v, %v", s, err)
	}
}
