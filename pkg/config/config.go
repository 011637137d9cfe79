// Package config loads Ferry's settings: ferry.toml at the repository root,
// the [platform.linux] and [platform.macos] tables that override it on one
// platform, and the FERRY_* environment variables that override both.
//
// Load returns either complete, validated Settings or a failure.Usage error
// that says where the problem is. A misspelt key is an error, never a setting
// silently ignored: a build configured other than the user believes is the
// kind of surprise Ferry exists to prevent. Errors in the file name the file,
// the line and the dotted key (ferry.toml:3: unknown key "base.wram");
// errors in the environment name the variable. Both platform tables are
// checked on every platform, so a ferry.toml that is broken on macOS fails on
// Linux too.
//
// Every path in Settings is absolute and cleaned: relative paths in the file
// are taken from the repository root, relative paths in the environment from
// the working directory, and a leading ~/ means the home directory. Callers
// therefore never depend on the working directory after Load.
package config

import (
	"encoding/base64"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"time"
	"unicode"

	"github.com/ferrydev/ferry/pkg/cargoenv"
	"github.com/ferrydev/ferry/pkg/failure"
)

// Where agent worktrees go ([paths] worktrees).
const (
	WorktreesParent = "parent" // <worktree parent>/<store key>/<name>, the default
	WorktreesRepo   = "repo"   // <repository>/.claude/worktrees/<name>
)

// RepoWorktrees is where [paths] worktrees = "repo" puts worktrees,
// relative to the repository's top: where Claude Code puts its own.
const RepoWorktrees = ".claude/worktrees"

// FileName is the configuration file Load reads from the repository root.
const FileName = "ferry.toml"

// The generated warm commands (DefaultWarm), without KeepGoingFlag. With
// resolver 2 a dev-dependency turns on features of the crates it names only
// when test targets are built, so a build of every target and a plain
// build resolve other units for each crate whose features differ (and for
// everything depending on it): measured on a public workspace of 107
// members, a fresh agent's plain cargo build compiled 130 crates on a base
// warmed with the all-targets build alone. cargo test compiles other units
// again wherever a workspace member depends on a proc macro of the
// workspace: as a root of cargo build the macro is built with the dev
// profile's debuginfo, as a dependency of tests alone with the
// build-override profile's (none), and everything depending on it follows
// (measured on the fixture: cargo test --no-run after cargo build
// --all-targets compiled the macro crate and app). Cargo's check and clippy
// units are of other kinds again (metadata only, and for the members, run
// through clippy's driver). So each command agents commonly run is warmed
// as itself. The later commands reuse what the earlier ones built wherever
// the units agree (registry dependencies' metadata, shared by check and
// clippy), so each adds only the units that differ.
const (
	generatedBuild    = "cargo build --workspace"
	generatedBuildAll = "cargo build --workspace --all-targets"
	// generatedTest has no KeepGoingFlag: cargo test does not take it (it
	// then stops at a test that does not compile, after the build of every
	// target before it built everything else that compiles).
	generatedTest  = "cargo test --workspace --no-run"
	generatedCheck = "cargo check --workspace"
	// GeneratedClippy is the clippy command over every target that
	// DefaultWarm adds last.
	GeneratedClippy  = "cargo clippy --workspace --all-targets" + KeepGoingFlag
	generatedClippy1 = "cargo clippy --workspace"
)

// plainForms are the calls without --workspace that DefaultWarm adds after
// each --workspace command it has a plain form of, when a plain call
// selects other packages (the workspace's root is a package, or it has
// default members): the plain call resolves features over the packages
// it selects alone. Measured on prost 0.11 (its root a package, its
// criterion dev-dependency turning on features of itertools, log and
// regex): with only the --workspace commands warm, a fresh agent's plain
// cargo test --no-run compiled 8 crates in 59 s.
var plainForms = map[string]string{
	generatedBuild:   "cargo build",
	generatedTest:    "cargo test --no-run",
	generatedCheck:   "cargo check",
	generatedClippy1: "cargo clippy",
}

// KeepGoingFlag is what DefaultWarm appends to its commands when asked to
// keep going: cargo then builds every unit that does not depend on a
// failed one, instead of stopping at the first failure. Measured on public
// workspaces, one bench needing nightly or one old test failing a lint that
// today's rustc denies otherwise stopped the build after 21 s and 113 s and
// left agents cold. Cargo has it since 1.74 (KeepGoingSince).
//
// Settings.KeepGoing ([base] keep-going) goes with it: a failed warm
// command keeps the base when what did not compile leaves it usable
// (package base says when). It is true by default for the generated
// commands, which then carry this flag, and false by default for
// configured ones, which fail the base as they always did; configured
// commands write the flag themselves.
const KeepGoingFlag = " --keep-going"

// KeepGoingSince is the first cargo release (major, minor) with a stable
// --keep-going: an older cargo rejects the flag.
var KeepGoingSince = [2]int{1, 74}

// The values of [base] freshness: Cargo compares mtimes (with stamping
// making the agent's unchanged files look as old as the base's), or the
// content's checksums (Cargo's -Zchecksum-freshness; build scripts still
// compare mtimes, so stamping runs in both).
const (
	FreshnessMtime    = "mtime"
	FreshnessChecksum = "checksum"
)

// freshnessProblem says what is wrong with a [base] freshness value, and
// the hint, or "" when it is one of the two.
func freshnessProblem(v string) (msg, hint string) {
	if v == FreshnessMtime || v == FreshnessChecksum {
		return "", ""
	}
	return `not "mtime" or "checksum"`, `use "mtime" (the default), or "checksum" with a nightly toolchain`
}

// Settings is Ferry's configuration after the file, the platform overrides,
// the environment and the defaults have been applied.
type Settings struct {
	StoreParent    string // absolute: FERRY_HOME, [store] dir, or the platform cache dir + /ferry
	WorktreeParent string // absolute: FERRY_WORKTREES, [agent] worktree-dir, $FERRY_HOME/worktrees, or the platform data dir + /ferry/worktrees
	// WorktreesInRepo puts agent worktrees under the repository, at
	// <top>/.claude/worktrees/<name>, where Claude Code puts its own
	// ([paths] worktrees = "repo"; WorktreeParent is then not used).
	WorktreesInRepo bool
	Warm            []string // the [base] warm commands; DefaultWarm(true, KeepGoing, false) when WarmIsDefault (package base decides the commit's own)
	WarmIsDefault   bool     // [base] warm is "auto", or set neither at the top level nor in this platform's table
	// Demand lets a base with the generated commands also warm what
	// agents demand ([base] demand, default true; see Learns and package
	// demand): a command run at least DemandMin times within
	// DemandWindow ([base] demand-min, demand-window) whose units the
	// generated commands do not hold, while the demanded commands'
	// estimated time fits in DemandBudget times the base's own warm time
	// ([base] demand-budget).
	Demand       bool
	DemandMin    int
	DemandWindow time.Duration
	DemandBudget float64
	KeepGoing    bool // [base] keep-going; default: WarmIsDefault (see the const KeepGoingFlag)
	// Prune lets a base be seeded from one with other unit inputs whose
	// warm build was observed, pruning what the new build did not use
	// ([base] prune, default true). Off, only a base with the same unit
	// inputs seeds.
	Prune bool
	// Layered lets a refresh on a store whose filesystem cannot clone
	// files build on an overlay of its seed's target instead of a copy of
	// it ([base] layered, default true; package base's Layered refreshes).
	// Off, such a refresh copies the seed's target first.
	Layered bool
	// Progressive makes a cold base with more than one warm command ready
	// for spawning after the first: the first command's base is built
	// and made current, then the full base is built on it as a seed, at
	// the same commit ([base] progressive; default: WarmIsDefault).
	Progressive bool
	// Freshness is how Cargo decides a unit is fresh in the bases built
	// ([base] freshness): FreshnessMtime (the default) or
	// FreshnessChecksum, which needs a nightly toolchain. Part of the base
	// fingerprint: switching rebuilds every unit.
	Freshness    string
	BranchPrefix string // [agent] branch-prefix, default "ferry/"
	Backend      string // "auto" | "reflink" | "copy" | "overlay" (FERRY_BACKEND, [agent] backend)
	SandboxMode  string // "auto" | "on" | "off" (FERRY_SANDBOX, [sandbox] mode)
	// RemapPaths turns on remap mode for builds without the namespace
	// sandbox (FERRY_REMAP_PATHS, [sandbox] remap-paths, experimental):
	// they reach the target through a link in the source root and run
	// rustc through ferry-rustc (package remap). It needs a rustc that
	// keeps its incremental state across working directories (Rust 1.98
	// and later), which ferry base probes. Refused with sandbox mode on,
	// where no build runs without the namespace.
	RemapPaths bool
	// SandboxWritable are directories the sandbox keeps writable beside
	// the agent's worktree and target ([sandbox] writable,
	// FERRY_SANDBOX_WRITABLE separated by colons; absolute, ~/ expanded):
	// recorded in each agent at spawn, and in each base (package
	// confine). Everything else outside the private layers is read-only.
	SandboxWritable []string
	// BusURL names an external NATS server or cluster (comma-separated
	// URLs): FERRY_NATS_URL, else [bus] url. Empty: ferry-watch hosts the
	// embedded bus and the others find it through <store parent>/bus.
	// Decided here once; nothing else reads the variable.
	BusURL string
	// BusReplicas is the replica count of the streams Ferry creates
	// (FERRY_BUS_REPLICAS, [bus] replicas): 3 on a three-node cluster. 0
	// creates R1 streams and keeps the count of existing ones.
	BusReplicas int
	// AckWait is how long the bus waits for a follower to acknowledge a
	// message before redelivering it, e.g. after the builder was killed
	// (FERRY_ACK_WAIT, [bus] ack-wait, a Go duration such as "30s"); 0
	// means the bus package's default.
	AckWait time.Duration
	// ShareBases makes ferry-base --follow publish every base it makes
	// ready to the bases bucket ([bus] share-bases, default false).
	ShareBases bool
	// RunnerBuilds lets a runner (ferry-base --follow --pull) build a base
	// itself when it cannot pull it: its base.ready names no object, the
	// published one does not match this host, or its upload never
	// finishes ([bus] runner-builds, default false: a runner waits for the
	// fleet's bases and never builds cold).
	RunnerBuilds bool
	// BasesBucket is the object store bucket bases are published to and
	// pulled from ([bus] bases-bucket; empty: package share's default),
	// and BasesMaxBytes its size bound ([bus] bases-max-bytes, bytes; 0:
	// none).
	BasesBucket   string
	BasesMaxBytes int64
	// TrustedKeys are the public keys of the publishers whose bases this
	// host installs ([share] trusted-keys, FERRY_TRUSTED_KEYS, separated
	// by commas or spaces): a pulled base must be signed by one of them
	// (package share). Empty: every pull is refused.
	TrustedKeys []string
	// BusMonitorPort is the loopback port the embedded bus serves NATS
	// monitoring on (/varz, /jsz, ... for the nats CLI, nats-surveyor and
	// the NATS Prometheus exporter): FERRY_BUS_MONITOR_PORT, [bus]
	// monitor-port; 0, the default, serves none.
	BusMonitorPort int
	// MetricsPort is the first of the loopback ports the long-running
	// stages serve Ferry's Prometheus metrics on (package metrics):
	// ferry-watch on it, ferry-base on the next, ferry-gc on the one
	// after (FERRY_METRICS_PORT, [metrics] port); 0, the default, serves
	// none.
	MetricsPort int
	// ReapAfter is how long an agent a hook created must show no sign of
	// life before ferry gc reaps it as abandoned (FERRY_REAP_AFTER, [gc]
	// reap-after, a Go duration; default DefaultReapAfter). 0 reaps as
	// soon as the other rules of package gc hold.
	ReapAfter time.Duration
	// MinFree is the free-space floor a spawn, an adoption or a base build
	// checks before it starts, so that it refuses with the figures rather
	// than a build stopping on a full disk (FERRY_MIN_FREE, [gc] min-free;
	// default AutoMinFree).
	MinFree Floor
	File    string // path of the ferry.toml that was read, "" if there was none
}

// DefaultReapAfter is Settings.ReapAfter unless set ([gc] reap-after's
// shown value): a day. An agent tool's live session can look abandoned for
// hours (a long think, a permission prompt waiting overnight), and a late
// reaping costs only disk; package gc gives the reasons.
var DefaultReapAfter = shown.ReapAfter

// DefaultWarm returns the warm commands used when ferry.toml sets none: a
// plain build, a build of every target, the build of cargo test and a
// check of the workspace, and clippy plain and over every target when
// clippyWorks (cargo clippy --version succeeded), all but the tests with
// KeepGoingFlag when keepGoing (Settings.KeepGoing, and a cargo that has
// the flag). With plain (a call without --workspace selects other
// packages than the whole workspace), each --workspace command that has a
// plain form is followed by it (plainForms).
func DefaultWarm(clippyWorks, keepGoing, plain bool) []string {
	var warm []string
	add := func(cmds ...string) {
		for _, c := range cmds {
			warm = append(warm, c)
			if p, ok := plainForms[c]; ok && plain {
				warm = append(warm, p)
			}
		}
	}
	add(generatedBuild, generatedBuildAll, generatedTest, generatedCheck)
	if clippyWorks {
		add(generatedClippy1, strings.TrimSuffix(GeneratedClippy, KeepGoingFlag))
	}
	for i, c := range warm {
		if keepGoing && !strings.HasPrefix(c, "cargo test ") {
			warm[i] = c + KeepGoingFlag
		}
	}
	return warm
}

// Learns reports whether a base learns what to warm from demand: with the
// generated commands ([base] warm unset or "auto") and [base] demand on.
// Configured commands always win.
func (s *Settings) Learns() bool { return s.WarmIsDefault && s.Demand }

// IsGeneratedLint reports whether cmd is one of the check and clippy
// commands Ferry added to the default warm list (with or without
// KeepGoingFlag), whose failure only warns: the generated builds before
// them decided whether the commit compiles. A command the user configured
// fails the build unless keep-going allows it.
func (s *Settings) IsGeneratedLint(cmd string) bool {
	if !s.WarmIsDefault {
		return false
	}
	cmd = strings.TrimSuffix(cmd, KeepGoingFlag)
	switch cmd {
	case generatedCheck, generatedClippy1, strings.TrimSuffix(GeneratedClippy, KeepGoingFlag),
		plainForms[generatedCheck], plainForms[generatedClippy1]:
		return true
	}
	return false
}

// Load reads <repoRoot>/ferry.toml (an absent file is fine) and the
// environment, and returns the resulting Settings. repoRoot is the top level
// of the git worktree; a relative repoRoot is taken from env's working
// directory. All errors a user can fix are failure.Usage errors with a hint.
func Load(repoRoot string, env Env) (*Settings, error) {
	return load(repoRoot, env, runtime.GOOS)
}

// load is Load for the platform goos (a runtime.GOOS value), so tests can
// check the overrides and defaults of a platform they do not run on.
func load(repoRoot string, env Env, goos string) (*Settings, error) {
	return loadFrom(repoRoot, env, goos, func(root string) (*document, error) {
		return readDocument(filepath.Join(root, FileName))
	})
}

// LoadCommitted is Load with ferry.toml as a commit holds it rather than
// as the working tree does: data is the file's content, nil when the
// commit has none, and name says where it came from in messages and in
// Settings.File (git's spelling, HEAD:ferry.toml). Relative paths in it
// are taken from repoRoot, as in the file.
func LoadCommitted(repoRoot string, env Env, data []byte, name string) (*Settings, error) {
	return loadFrom(repoRoot, env, runtime.GOOS, func(string) (*document, error) {
		if data == nil {
			return &document{path: name}, nil
		}
		return parseDocument(name, data)
	})
}

// loadFrom is load with the document read by read from the repository
// root.
func loadFrom(repoRoot string, env Env, goos string, read func(root string) (*document, error)) (*Settings, error) {
	r := resolver{env: env}
	root, err := r.abs(repoRoot, "the repository root")
	if err != nil {
		return nil, err
	}
	doc, err := read(root)
	if err != nil {
		return nil, err
	}
	if err := doc.check(); err != nil {
		return nil, err
	}
	t := doc.effective(platformName(goos))

	s := &Settings{}
	*s = shown
	s.File = doc.file
	if err := s.applyFile(&t, root, &r); err != nil {
		return nil, err
	}
	if err := s.applyEnv(env, &r); err != nil {
		return nil, err
	}
	if err := s.applyDefaults(env, goos, &t); err != nil {
		return nil, err
	}
	if err := s.checkRemap(doc); err != nil {
		return nil, err
	}
	return s, nil
}

// applyFile copies the merged file values into s. The values were checked by
// document.check; what can still fail is finding the home directory for ~/.
func (s *Settings) applyFile(t *tables, root string, r *resolver) error {
	for _, k := range settings {
		if err := k.applyFile(s, t, origin{r: r, root: root}); err != nil {
			return err
		}
	}
	return nil
}

// BusVariables are the FERRY_* variables about the bus, which no command
// Ferry runs in a sandbox gets (cargoenv.BusVariables).
var BusVariables = cargoenv.BusVariables

// WithoutBus returns env without BusVariables (cargoenv.WithoutBus).
func WithoutBus(env []string) []string { return cargoenv.WithoutBus(env) }

// applyEnv lets the FERRY_* variables override the file. An empty variable
// counts as unset.
func (s *Settings) applyEnv(env Env, r *resolver) error {
	for _, k := range settings {
		if err := k.applyEnv(s, env, origin{r: r}); err != nil {
			return err
		}
	}
	return nil
}

// applyDefaults fills what neither the file nor the environment set;
// keepGoingSet says whether the file set [base] keep-going.
func (s *Settings) applyDefaults(env Env, goos string, t *tables) error {
	if s.StoreParent == "" {
		dir, err := cacheDir(env, goos)
		if err != nil {
			return err
		}
		s.StoreParent = filepath.Join(dir, "ferry")
	}
	if s.WorktreeParent == "" {
		dir, err := dataDir(env, goos)
		if err != nil {
			return err
		}
		s.WorktreeParent = filepath.Join(dir, "ferry", "worktrees") // the data dir, not the store: not a store path
	}
	if s.Warm == nil {
		// Generated commands keep going unless the file says otherwise:
		// a base is a cache whose artifacts are correct whether or not
		// every test and bench compiled.
		if t.Base.KeepGoing == nil {
			s.KeepGoing = true
		}
		if t.Base.Progressive == nil {
			s.Progressive = true
		}
		// Both generated commands: the caller drops clippy when
		// cargo clippy --version fails, as it does for every clippy command.
		s.Warm = DefaultWarm(true, s.KeepGoing, false)
		s.WarmIsDefault = true
	}
	return nil
}

// checkRemap refuses remap mode under sandbox mode on: every build then
// runs in the namespace sandbox at the canonical paths, where rustc's
// incremental state already carries over, so the setting could never take
// effect (a setting silently ignored is what Load refuses). Under auto it
// applies when the host blocks the namespace.
func (s *Settings) checkRemap(doc *document) error {
	if !s.RemapPaths || s.SandboxMode != "on" {
		return nil
	}
	const msg = `sandbox.remap-paths = true with sandbox mode "on": remap mode is for builds without the namespace sandbox, and mode "on" runs every build in it`
	const hint = `set [sandbox] mode = "off" (or "auto", to use it only where the host blocks user namespaces), or drop remap-paths: in the sandbox every build already runs at the same canonical paths`
	if _, ok := doc.sites["sandbox.remap-paths"]; ok {
		return doc.errorAt("sandbox.remap-paths", hint, msg)
	}
	return failure.New(failure.Usage, hint, "%s", msg)
}

// platformName maps runtime.GOOS to the name of its [platform.*] table, or
// "" for a platform without one.
func platformName(goos string) string {
	switch goos {
	case "linux":
		return "linux"
	case "darwin":
		return "macos"
	}
	return ""
}

// KeyPrefix begins a public key as package share writes it: "ferry-ed25519:"
// and the ed25519 key's 32 bytes in unpadded base64url.
const KeyPrefix = "ferry-ed25519:"

// publicKeyProblem says what is wrong with k as a public key, or "".
func publicKeyProblem(k string) string {
	enc, ok := strings.CutPrefix(k, KeyPrefix)
	if !ok {
		return "not a key `ferry key` prints (they begin " + KeyPrefix + ")"
	}
	if b, err := base64.RawURLEncoding.DecodeString(enc); err != nil || len(b) != 32 {
		return "not a key `ferry key` prints (32 bytes in unpadded base64url after " + KeyPrefix + ")"
	}
	return ""
}

// Changed names the settings that differ between a and b, each as the
// field's name in kebab case ("warm", "keep-going", "trusted-keys"), in
// the order Settings declares them; File, where they were read from, is
// not one.
func Changed(a, b *Settings) []string {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	var out []string
	for i := 0; i < va.NumField(); i++ {
		f := va.Type().Field(i)
		if f.Name == "File" || !f.IsExported() {
			continue
		}
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			out = append(out, kebab(f.Name))
		}
	}
	return out
}

// kebab turns a Go field name into kebab case: KeepGoing is keep-going,
// BusURL bus-url.
func kebab(name string) string {
	rs := []rune(name)
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 && (unicode.IsLower(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1])) {
			b.WriteByte('-')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}
