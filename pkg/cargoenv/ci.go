package cargoenv

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// The CI rule. With CI or TF_BUILD set, Cargo 1.99 and later turn
// incremental compilation off after merging profiles, so ahead of a
// profile's incremental = true, and the switch enters every unit's hash:
// an agent with CI would rebuild every workspace member of a base warmed
// without it, and the other way round. So wherever Ferry sets a target dir
// it also sets CARGO_INCREMENTAL=1 under CI, unless the call carries a
// setting Cargo ranks above the switch: CARGO_INCREMENTAL,
// CARGO_BUILD_INCREMENTAL, or build.incremental in a --config value or in
// a Cargo configuration file it reads. CI and TF_BUILD themselves pass on
// unchanged, and processes cargo starts inherit CARGO_INCREMENTAL=1.

// CIIncrementalSince is the first Cargo (major, minor) with the switch.
var CIIncrementalSince = [2]int{1, 99}

// InCI reports whether Cargo sees a CI environment: CI or TF_BUILD set,
// to any value (an empty one counts, as it does for Cargo).
func InCI(env []string) bool {
	_, ci := Lookup(env, "CI")
	_, tf := Lookup(env, "TF_BUILD")
	return ci || tf
}

// IncrementalUnderCI reports whether a cargo call with env and args needs
// CARGO_INCREMENTAL=1 to build incrementally as it would outside CI (the
// caller checks that its Cargo is CIIncrementalSince or later): CI or
// TF_BUILD is set and nothing Cargo ranks above the switch decides
// incremental mode. dir resolves a relative --config file; configDirs are
// the .cargo directories (and Cargo's home) Cargo reads configuration from
// for the call (ConfigDirs), as paths this process can read.
func IncrementalUnderCI(env, args []string, dir string, configDirs []string) bool {
	if !InCI(env) {
		return false
	}
	for _, v := range []string{"CARGO_INCREMENTAL", "CARGO_BUILD_INCREMENTAL"} {
		if _, set := Lookup(env, v); set {
			return false
		}
	}
	for _, v := range configArgs(args) {
		if configValueSetsIncremental(v, dir) {
			return false
		}
	}
	for _, d := range configDirs {
		for _, name := range []string{"config", "config.toml"} {
			if b, err := os.ReadFile(filepath.Join(d, name)); err == nil && setsIncremental(b) {
				return false
			}
		}
	}
	return true
}

// ConfigDirs lists where Cargo reads configuration for a call in dir: the
// .cargo directory of dir and of each ancestor, then Cargo's home
// (CARGO_HOME, else ~/.cargo).
func ConfigDirs(dir string, env []string) []string {
	var dirs []string
	for d := dir; ; d = filepath.Dir(d) {
		dirs = append(dirs, filepath.Join(d, ".cargo")) // Cargo's configuration lookup
		if d == filepath.Dir(d) {
			break
		}
	}
	if h := Get(env, "CARGO_HOME"); h != "" {
		dirs = append(dirs, h)
	} else if h := Get(env, "HOME"); h != "" {
		dirs = append(dirs, filepath.Join(h, ".cargo"))
	}
	return dirs
}

// configArgs returns the values of cargo's --config options, which come
// before a "--".
func configArgs(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			out = append(out, v)
		} else if a == "--config" && i+1 < len(args) {
			out = append(out, args[i+1])
			i++
		}
	}
	return out
}

// configValueSetsIncremental reads one --config value: a TOML key = value
// pair, or else the path of a configuration file (includes are not
// followed, here or in files).
func configValueSetsIncremental(v, dir string) bool {
	if strings.Contains(v, "=") {
		return setsIncremental([]byte(v))
	}
	p := v
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	b, err := os.ReadFile(p)
	return err == nil && setsIncremental(b)
}

// setsIncremental reports whether a Cargo configuration sets
// build.incremental, in any TOML spelling. A document that does not parse
// counts as not setting it: Cargo refuses such a file itself.
func setsIncremental(b []byte) bool {
	var doc struct {
		Build map[string]any `toml:"build"`
	}
	if err := toml.Unmarshal(b, &doc); err != nil {
		return false
	}
	_, ok := doc.Build["incremental"]
	return ok
}

// Lookup returns the last value of key in env and whether it is set.
func Lookup(env []string, key string) (string, bool) {
	v, set := "", false
	for _, kv := range env {
		if s, ok := strings.CutPrefix(kv, key+"="); ok {
			v, set = s, true
		}
	}
	return v, set
}
