package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ferrydev/ferry/pkg/store"
	"github.com/pelletier/go-toml/v2"
)

// settings declares every key of ferry.toml once: its field in a table of
// the file (the schema's types, which go-toml checks), the FERRY_*
// variable that overrides it, what a value must be, and where a value
// lands in Settings. Reading the file (checking each table, laying a
// platform's table over the top level, applying it) and reading the
// environment are loops over it, in its order, and configuration.md's
// ferry.toml is written from it (go test ./docs). A key's example is its
// default, which Load applies before the file (shown), unless the entry
// says what computes the default instead. Adding a key is a field in its
// table (file.go) and an entry here.
var settings = []setting{
	def[string]{key: "store.dir", example: `"~/.cache/ferry"`, computed: "the user's cache directory (XDG_CACHE_HOME, ~/Library/Caches on macOS) + /ferry", doc: "store parent (build state)", env: "FERRY_HOME",
		current: func(s *Settings) string { return strconv.Quote(s.StoreParent) }, field: func(t *tables) **string { return &t.Store.Dir },
		check: pathCheck, fromEnv: asPath,
		apply: func(s *Settings, v string, o origin) error {
			p, err := o.path(v)
			s.StoreParent = p
			// $FERRY_HOME/worktrees ranks below [agent] worktree-dir:
			// FERRY_HOME names the store, and only says where worktrees
			// go when nothing more specific does.
			if err == nil && o.env != "" && s.WorktreeParent == "" {
				s.WorktreeParent = store.Worktrees(p)
			}
			return err
		}},
	def[any]{key: "base.warm", example: `"auto"`, doc: "the generated commands and what agents demand; or a list of shell commands, run in order", field: func(t *tables) **any { return &t.Base.Warm },
		check: func(v any) (string, string) { _, msg, hint := warmValue(v); return msg, hint },
		show:  func(key string, _ any, msg string) string { return key + msg },
		apply: func(s *Settings, v any, _ origin) error { s.Warm, _, _ = warmValue(v); return nil }}, // nil for auto
	def[bool]{key: "base.keep-going", example: "true", computed: "true for the generated warm commands, false for a list", doc: "a failure limited to tests, benches and examples keeps the base",
		current: func(s *Settings) string { return strconv.FormatBool(s.KeepGoing) }, field: func(t *tables) **bool { return &t.Base.KeepGoing },
		apply: func(s *Settings, v bool, _ origin) error { s.KeepGoing = v; return nil }},
	def[bool]{key: "base.demand", example: "true", doc: `with warm = "auto": also warm the commands agents demand`, field: func(t *tables) **bool { return &t.Base.Demand },
		apply: func(s *Settings, v bool, _ origin) error { s.Demand = v; return nil }},
	def[int]{key: "base.demand-min", example: "3", doc: "calls within the window that make a command demanded", field: func(t *tables) **int { return &t.Base.DemandMin },
		check: func(v int) (string, string) {
			if v < 1 {
				return "less than 1", "give how many calls within demand-window make a command demanded: a whole number from 1, e.g. demand-min = 3"
			}
			return "", ""
		},
		apply: func(s *Settings, v int, _ origin) error { s.DemandMin = v; return nil }},
	def[string]{key: "base.demand-window", example: `"7d"`, doc: `how far back calls count: days ("7d") or a Go duration ("36h")`, field: func(t *tables) **string { return &t.Base.DemandWindow },
		check: func(v string) (string, string) { _, msg, hint := ParseDemandWindow(v); return msg, hint },
		apply: func(s *Settings, v string, _ origin) error { s.DemandWindow, _, _ = ParseDemandWindow(v); return nil }},
	def[float64]{key: "base.demand-budget", example: "1.0", doc: "demanded commands may add this fraction of the base's own warm cost (CPU time)", field: func(t *tables) **float64 { return &t.Base.DemandBudget },
		check: budgetProblem,
		apply: func(s *Settings, v float64, _ origin) error { s.DemandBudget = v; return nil }},
	def[bool]{key: "base.prune", example: "true", doc: "seed across unit inputs from an observed base, pruning what is unused", field: func(t *tables) **bool { return &t.Base.Prune },
		apply: func(s *Settings, v bool, _ origin) error { s.Prune = v; return nil }},
	def[bool]{key: "base.layered", example: "true", doc: "refresh on an overlay of the seed, linking in what the build left alone, rather than cloning or copying the seed first", field: func(t *tables) **bool { return &t.Base.Layered },
		apply: func(s *Settings, v bool, _ origin) error { s.Layered = v; return nil }},
	def[bool]{key: "base.progressive", example: "true", computed: "true for the generated warm commands, false for a list", doc: "a cold base is ready to spawn from after its first warm command; the rest follow as the full base, seeded from it",
		current: func(s *Settings) string { return strconv.FormatBool(s.Progressive) },
		field:   func(t *tables) **bool { return &t.Base.Progressive },
		apply:   func(s *Settings, v bool, _ origin) error { s.Progressive = v; return nil }},
	def[string]{key: "base.freshness", example: `"mtime"`, doc: "mtime | checksum (checksum needs a nightly toolchain)", field: func(t *tables) **string { return &t.Base.Freshness },
		check: freshnessProblem,
		apply: func(s *Settings, v string, _ origin) error { s.Freshness = v; return nil }},
	def[string]{key: "agent.worktree-dir", example: `"~/.local/share/ferry/worktrees"`, computed: "$FERRY_HOME/worktrees, else the user's data directory (XDG_DATA_HOME) + /ferry/worktrees", doc: "",
		current: func(s *Settings) string { return strconv.Quote(s.WorktreeParent) }, env: "FERRY_WORKTREES", field: func(t *tables) **string { return &t.Agent.WorktreeDir },
		check: pathCheck, fromEnv: asPath,
		apply: func(s *Settings, v string, o origin) (err error) { s.WorktreeParent, err = o.path(v); return err }},
	def[string]{key: "agent.branch-prefix", example: `"` + defaultBranchPrefix + `"`, doc: "", field: func(t *tables) **string { return &t.Agent.BranchPrefix },
		check: func(v string) (string, string) {
			return branchPrefixProblem(v), `an agent's branch is the prefix followed by its name, so the prefix must be part of a valid git branch name, like the default "` + defaultBranchPrefix + `"`
		},
		apply: func(s *Settings, v string, _ origin) error { s.BranchPrefix = v; return nil }},
	def[string]{key: "agent.backend", example: `"auto"`, doc: "auto | reflink | copy | overlay", env: "FERRY_BACKEND", field: func(t *tables) **string { return &t.Agent.Backend },
		check: backendProblem,
		apply: func(s *Settings, v string, _ origin) error { s.Backend = v; return nil }},
	def[string]{key: "sandbox.mode", example: `"auto"`, doc: "auto | on | off", env: "FERRY_SANDBOX", field: func(t *tables) **string { return &t.Sandbox.Mode },
		check: sandboxModeProblem,
		apply: func(s *Settings, v string, _ origin) error { s.SandboxMode = v; return nil }},
	def[bool]{key: "sandbox.remap-paths", example: "false", doc: "remap mode without the namespace (experimental, Rust 1.98+)", env: "FERRY_REMAP_PATHS", field: func(t *tables) **bool { return &t.Sandbox.RemapPaths },
		apply: func(s *Settings, v bool, _ origin) error { s.RemapPaths = v; return nil }},
	def[[]string]{key: "sandbox.writable", example: "[]", doc: "directories builds may write besides the worktree, target and /tmp (FERRY_SANDBOX_WRITABLE)", env: "FERRY_SANDBOX_WRITABLE", field: func(t *tables) **[]string { return &t.Sandbox.Writable },
		check: eachOf(writableProblem, `list directories builds must write besides the agent's worktree and target, e.g. writable = ["~/.cache/sccache"]`),
		fromEnv: func(v string) ([]string, string, string) {
			ws := slices.DeleteFunc(filepath.SplitList(v), func(w string) bool { return w == "" })
			msg, _ := eachOf(writableProblem, "")(ws)
			return ws, msg, "list absolute directories separated by colons, or unset it"
		},
		apply: func(s *Settings, v []string, o origin) error {
			s.SandboxWritable = nil
			for _, w := range v {
				p, err := o.path(w)
				if err != nil {
					return err
				}
				s.SandboxWritable = append(s.SandboxWritable, p)
			}
			return nil
		}},
	def[string]{key: "bus.url", example: `""`, doc: "external NATS server/cluster; empty: ferry-watch hosts one", env: "FERRY_NATS_URL", field: func(t *tables) **string { return &t.Bus.URL },
		apply: func(s *Settings, v string, _ origin) error { s.BusURL = v; return nil }},
	def[int]{key: "bus.replicas", example: "3", computed: "pkg/bus.EnsureStreams: a new stream gets 1, an existing one keeps its count", doc: "replicas of the streams Ferry creates, 1 to 5 (3 on a three-node cluster); unset: a new stream gets 1, an existing one keeps its count", env: "FERRY_BUS_REPLICAS", field: func(t *tables) **int { return &t.Bus.Replicas },
		check: replicasProblem,
		fromEnv: func(v string) (int, string, string) {
			n, err := strconv.Atoi(v)
			if err != nil {
				return 0, "not a whole number", "set it to the number of servers in the cluster, e.g. 3, or unset it"
			}
			msg, hint := replicasProblem(n)
			return n, msg, hint
		},
		apply: func(s *Settings, v int, _ origin) error { s.BusReplicas = v; return nil }},
	def[string]{key: "bus.ack-wait", example: `"30s"`, computed: "pkg/bus.DefaultAckWait", doc: "how long a killed builder's commit waits before another builder gets it", env: "FERRY_ACK_WAIT", field: func(t *tables) **string { return &t.Bus.AckWait },
		check: func(v string) (string, string) { _, msg, hint := parseAckWait(v); return msg, hint },
		apply: func(s *Settings, v string, _ origin) error { s.AckWait, _, _ = parseAckWait(v); return nil }},
	def[bool]{key: "bus.share-bases", example: "false", doc: "ferry-base --follow publishes every base it makes ready (see pipeline.md)", field: func(t *tables) **bool { return &t.Bus.ShareBases },
		apply: func(s *Settings, v bool, _ origin) error { s.ShareBases = v; return nil }},
	def[string]{key: "bus.bases-bucket", example: `"ferry-bases"`, computed: "pkg/share.DefaultBucket", doc: "the JetStream object store bucket bases are published to and pulled from", field: func(t *tables) **string { return &t.Bus.BasesBucket },
		apply: func(s *Settings, v string, _ origin) error { s.BasesBucket = v; return nil }},
	def[int64]{key: "bus.bases-max-bytes", example: "0", doc: "the bucket's size bound in bytes; 0: none", field: func(t *tables) **int64 { return &t.Bus.BasesMaxBytes },
		check: func(v int64) (string, string) {
			if v < 0 {
				return "negative", "give the bucket's size bound in bytes, or 0 for none"
			}
			return "", ""
		},
		apply: func(s *Settings, v int64, _ origin) error { s.BasesMaxBytes = v; return nil }},
	def[bool]{key: "bus.runner-builds", example: "false", doc: "a runner (ferry up --runner) builds a base it cannot pull; default: it waits", field: func(t *tables) **bool { return &t.Bus.RunnerBuilds },
		apply: func(s *Settings, v bool, _ origin) error { s.RunnerBuilds = v; return nil }},
	def[int]{key: "bus.monitor-port", example: "0", doc: "NATS monitoring of the embedded bus on 127.0.0.1 (FERRY_BUS_MONITOR_PORT); 0: none", env: "FERRY_BUS_MONITOR_PORT", field: func(t *tables) **int { return &t.Bus.MonitorPort },
		check:   func(v int) (string, string) { return portProblem(v, 0) },
		fromEnv: func(v string) (int, string, string) { return parsePort(v, 0) },
		apply:   func(s *Settings, v int, _ origin) error { s.BusMonitorPort = v; return nil }},
	def[[]string]{key: "share.trusted-keys", example: "[]", doc: "runner: publishers' keys (`ferry key` on them) whose bases it installs (FERRY_TRUSTED_KEYS)", env: "FERRY_TRUSTED_KEYS", field: func(t *tables) **[]string { return &t.Share.TrustedKeys },
		check: eachOf(publicKeyProblem, "list the keys `ferry key` prints on the build hosts whose bases this host installs"),
		fromEnv: func(v string) ([]string, string, string) {
			keys := strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })
			msg, _ := eachOf(publicKeyProblem, "")(keys)
			return keys, msg, "list the keys `ferry key` prints on the build hosts whose bases this host installs, separated by commas"
		},
		apply: func(s *Settings, v []string, _ origin) error {
			s.TrustedKeys = nil // none: nil, whoever says so
			if len(v) > 0 {
				s.TrustedKeys = slices.Clone(v)
			}
			return nil
		}},
	def[string]{key: "gc.reap-after", example: `"24h"`, doc: "quiet time before gc reaps an abandoned agent a hook created", env: "FERRY_REAP_AFTER", field: func(t *tables) **string { return &t.GC.ReapAfter },
		check: func(v string) (string, string) { _, msg, hint := ParseReapAfter(v); return msg, hint },
		apply: func(s *Settings, v string, _ origin) error { s.ReapAfter, _, _ = ParseReapAfter(v); return nil }},
	def[string]{key: "gc.min-free", example: `"auto"`, doc: `free space a spawn, adoption or base build needs to start: "10G", "0" (none), auto (2 GiB, or 5% of a smaller filesystem)`, env: "FERRY_MIN_FREE", field: func(t *tables) **string { return &t.GC.MinFree },
		check: func(v string) (string, string) { _, msg, hint := ParseMinFree(v); return msg, hint },
		apply: func(s *Settings, v string, _ origin) error { s.MinFree, _, _ = ParseMinFree(v); return nil }},
	def[int]{key: "metrics.port", example: "0", doc: "Prometheus metrics on 127.0.0.1: watch here, base +1, gc +2 (FERRY_METRICS_PORT); 0: none", env: "FERRY_METRICS_PORT", field: func(t *tables) **int { return &t.Metrics.Port },
		check:   func(v int) (string, string) { return portProblem(v, MetricsPorts-1) },
		fromEnv: func(v string) (int, string, string) { return parsePort(v, MetricsPorts-1) },
		apply:   func(s *Settings, v int, _ origin) error { s.MetricsPort = v; return nil }},
	def[string]{key: "paths.worktrees", example: `"parent"`, doc: "parent: <worktree parent>/<repo key>/<name>; repo: <repository>/.claude/worktrees/<name>", field: func(t *tables) **string { return &t.Paths.Worktrees },
		check: func(v string) (string, string) {
			if v != WorktreesParent && v != WorktreesRepo {
				return "not a place for worktrees", `use "parent" (under the worktree parent: FERRY_WORKTREES or [agent] worktree-dir) or "repo" (under <repository>/.claude/worktrees/)`
			}
			return "", ""
		},
		apply: func(s *Settings, v string, _ origin) error { s.WorktreesInRepo = v == WorktreesRepo; return nil }},
}

// defaultBranchPrefix is [agent] branch-prefix's default, which its hint
// names.
const defaultBranchPrefix = "ferry/"

// setting is an entry of settings, whatever its value's type.
type setting interface {
	name() string
	describe() Key
	variable() string
	override(dst, src *tables)
	checkIn(d *document, t *tables, prefix string) error
	applyFile(s *Settings, t *tables, o origin) error
	applyEnv(s *Settings, env Env, o origin) error
	applyDefault(s *Settings) error
	explain(s *Settings, t *tables, env Env) Effective
}

// def is a setting whose value is a T: a field of type *T in a table.
type def[T any] struct {
	key string // dotted, as written in ferry.toml
	env string // the variable that overrides it, or ""
	// example is the value configuration.md shows for it, as written in
	// ferry.toml: its default, unless computed says what decides that
	// (then Load leaves the field to it); doc is the line it shows beside
	// it.
	example, doc, computed string
	// current is the computed default's value in s, as ferry.toml writes
	// it; nil where Settings leaves it to a package (zero: unset).
	current func(s *Settings) string
	// field is the key's field in t.
	field func(t *tables) **T
	// check says what is wrong with a value of the file ("" when nothing)
	// and how to fix it; nil when any value of the type will do.
	check func(v T) (msg, hint string)
	// show words what is wrong with the file's value v of key; nil: "key =
	// value: msg" (for a list, "key: msg", the msg naming the item).
	show func(key string, v T, msg string) string
	// fromEnv reads and checks the variable's text; nil for a string the
	// check reads as it is, and for a boolean.
	fromEnv func(v string) (T, string, string)
	// apply lands a checked value in s.
	apply func(s *Settings, v T, o origin) error
}

func (d def[T]) name() string { return d.key }
func (d def[T]) describe() Key {
	return Key{Name: d.key, Variable: d.env, Example: d.example, Doc: d.doc, Computed: d.computed}
}
func (d def[T]) variable() string { return d.env }

func (d def[T]) override(dst, src *tables) {
	if v := *d.field(src); v != nil {
		*d.field(dst) = v
	}
}

func (d def[T]) checkIn(doc *document, t *tables, prefix string) error {
	v := *d.field(t)
	if v == nil || d.check == nil {
		return nil
	}
	msg, hint := d.check(*v)
	if msg == "" {
		return nil
	}
	key := prefix + d.key
	text := ""
	switch x := any(*v).(type) {
	case string:
		text = fmt.Sprintf("%s = %q: %s", key, x, msg)
	case []string:
		text = key + ": " + msg
	case float64:
		text = fmt.Sprintf("%s = %g: %s", key, x, msg)
	default:
		text = fmt.Sprintf("%s = %v: %s", key, x, msg)
	}
	if d.show != nil {
		text = d.show(key, *v, msg)
	}
	return doc.errorAt(key, hint, text)
}

func (d def[T]) applyFile(s *Settings, t *tables, o origin) error {
	if v := *d.field(t); v != nil {
		o.key = d.key
		return d.apply(s, *v, o)
	}
	return nil
}

// applyDefault lands the key's example in s, when it is the default.
func (d def[T]) applyDefault(s *Settings) error {
	if d.computed != "" {
		return nil
	}
	var v struct{ V T }
	if err := toml.Unmarshal([]byte("V = "+d.example), &v); err != nil {
		return fmt.Errorf("%s's example %s: %w", d.key, d.example, err)
	}
	if d.check != nil {
		if msg, _ := d.check(v.V); msg != "" {
			return fmt.Errorf("%s's example %s: %s", d.key, d.example, msg)
		}
	}
	return d.apply(s, v.V, origin{key: d.key})
}

// shown is Settings as every key's shown default gives it: where Load
// starts, before the file, the environment and the computed defaults.
var shown = func() Settings {
	var s Settings
	for _, k := range settings {
		if err := k.applyDefault(&s); err != nil {
			panic("config: " + err.Error()) // TestSettingsAreDeclaredOnce
		}
	}
	return s
}()

func (d def[T]) applyEnv(s *Settings, env Env, o origin) error {
	if d.env == "" {
		return nil
	}
	text := env.Getenv(d.env)
	if text == "" { // an empty variable counts as unset
		return nil
	}
	var v T
	var msg, hint string
	if d.fromEnv != nil {
		v, msg, hint = d.fromEnv(text)
	} else {
		switch p := any(&v).(type) {
		case *string:
			*p = text
			if d.check != nil {
				msg, hint = d.check(v)
			}
		case *bool:
			b, err := strconv.ParseBool(text)
			*p = b
			if err != nil {
				msg, hint = "not a boolean", "set it to true or false (1 or 0), or unset it"
			}
		default:
			panic("config: " + d.env + " has no fromEnv") // TestSettingsAreDeclaredOnce
		}
	}
	if msg != "" {
		return envError(d.env, text, msg, hint)
	}
	o.key, o.env = d.key, d.env
	return d.apply(s, v, o)
}

// origin is where a value came from, for what depends on it: a path from
// the file is taken from the repository's root, one from a variable from
// the working directory.
type origin struct {
	r    *resolver
	root string // the repository's root
	key  string // the key the value was given for
	env  string // the variable it came from; "" for the file
}

// path resolves p (~/ is the home directory).
func (o origin) path(p string) (string, error) {
	if o.env != "" {
		return o.r.envPath(o.env, p)
	}
	return o.r.path(p, o.root, o.key)
}

// pathCheck is the check of a directory's key.
func pathCheck(v string) (string, string) {
	return pathProblem(v), "give a directory, or remove the key to use the default"
}

// asPath reads a variable naming a directory: origin.path checks it.
func asPath(v string) (string, string, string) { return v, "", "" }

// eachOf checks every item of a list with problem, naming the first bad
// one.
func eachOf(problem func(string) string, hint string) func([]string) (string, string) {
	return func(vs []string) (string, string) {
		for _, v := range vs {
			if msg := problem(v); msg != "" {
				return fmt.Sprintf("%q: %s", v, msg), hint
			}
		}
		return "", ""
	}
}

// Key is a key of ferry.toml as configuration.md shows it.
type Key struct {
	Name     string // dotted: "base.warm"
	Variable string // the FERRY_* variable that overrides it, or ""
	Example  string // its default, as written in ferry.toml (or a value, when Computed)
	Doc      string
	Computed string // what decides the default, when Example is not it
}

// Keys are ferry.toml's keys, in the order settings declares them.
func Keys() []Key {
	var ks []Key
	for _, s := range settings {
		ks = append(ks, s.describe())
	}
	return ks
}

// Variables are the FERRY_* variables that override a key of ferry.toml,
// in the order Load reads them.
func Variables() []string {
	var vs []string
	for _, s := range settings {
		if v := s.variable(); v != "" {
			vs = append(vs, v)
		}
	}
	return vs
}
