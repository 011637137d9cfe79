package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/failure"
)

// Env is the part of the process environment Load reads, so tests can give
// it one of their own.
type Env interface {
	// Getenv returns the value of a variable, "" when unset.
	Getenv(key string) string
	// HomeDir returns the user's home directory.
	HomeDir() (string, error)
	// Getwd returns the working directory, which relative paths in the
	// environment are taken from.
	Getwd() (string, error)
}

// OSEnv returns the Env of the running process.
func OSEnv() Env { return osEnv{} }

type osEnv struct{}

func (osEnv) Getenv(key string) string { return os.Getenv(key) }
func (osEnv) HomeDir() (string, error) { return os.UserHomeDir() }
func (osEnv) Getwd() (string, error)   { return os.Getwd() }

// resolver turns configured paths into absolute ones, asking for the working
// directory only when a relative path needs it.
type resolver struct {
	env Env
	cwd string
}

func (r *resolver) wd() (string, error) {
	if r.cwd == "" {
		cwd, err := r.env.Getwd()
		if err != nil {
			return "", fmt.Errorf("get the working directory: %w", err)
		}
		r.cwd = cwd
	}
	return r.cwd, nil
}

// abs returns p made absolute against the working directory; what names p
// in the error.
func (r *resolver) abs(p, what string) (string, error) {
	if filepath.IsAbs(p) {
		return filepath.Clean(p), nil
	}
	cwd, err := r.wd()
	if err != nil {
		return "", fmt.Errorf("resolve %s %q: %w", what, p, err)
	}
	return filepath.Join(cwd, p), nil
}

// path resolves p, a checked path from ferry.toml: ~/ is the home directory,
// a relative path is taken from base (the repository root).
func (r *resolver) path(p, base, key string) (string, error) {
	expanded, err := expandHome(r.env, p)
	if err != nil {
		return "", failure.Wrap(failure.Usage, err, "set HOME, or write "+key+" without ~", "%s %q: expand ~", key, p)
	}
	if filepath.IsAbs(expanded) {
		return filepath.Clean(expanded), nil
	}
	return filepath.Join(base, expanded), nil
}

// envPath checks and resolves the value v of the variable name: ~/ is the
// home directory, a relative path is taken from the working directory.
func (r *resolver) envPath(name, v string) (string, error) {
	if msg := pathProblem(v); msg != "" {
		return "", envError(name, v, msg, "give "+name+" an absolute path")
	}
	expanded, err := expandHome(r.env, v)
	if err != nil {
		return "", failure.Wrap(failure.Usage, err, "set HOME, or give "+name+" an absolute path", "%s=%q: expand ~", name, v)
	}
	return r.abs(expanded, name)
}

// expandHome replaces a leading ~ or ~/ with the home directory. Other
// paths, including ~user forms that pathProblem rejects, are returned as
// they are.
func expandHome(env Env, p string) (string, error) {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p, nil
	}
	home, err := homeDir(env)
	if err != nil {
		return "", err
	}
	return filepath.Join(home, strings.TrimPrefix(p[1:], "/")), nil
}

func homeDir(env Env) (string, error) {
	home, err := env.HomeDir()
	if err != nil {
		return "", fmt.Errorf("find the home directory: %w", err)
	}
	if !filepath.IsAbs(home) {
		return "", fmt.Errorf("home directory %q is not absolute", home)
	}
	return home, nil
}

// cacheDir returns the per-user cache directory, where build state lives.
func cacheDir(env Env, goos string) (string, error) {
	// The XDG base directory spec says to ignore a relative value.
	if d := env.Getenv("XDG_CACHE_HOME"); filepath.IsAbs(d) {
		return filepath.Clean(d), nil
	}
	home, err := homeDir(env)
	if err != nil {
		return "", failure.Wrap(failure.Usage, err, "set HOME, or choose the store with FERRY_HOME or [store] dir", "find the cache directory")
	}
	if goos == "darwin" {
		return filepath.Join(home, "Library", "Caches"), nil
	}
	return filepath.Join(home, ".cache"), nil
}

// dataDir returns the per-user data directory, where agent worktrees live.
// It is not the cache directory because worktrees hold uncommitted work,
// and macOS may purge caches and users clear them casually.
func dataDir(env Env, goos string) (string, error) {
	if d := env.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		return filepath.Clean(d), nil
	}
	home, err := homeDir(env)
	if err != nil {
		return "", failure.Wrap(failure.Usage, err, "set HOME, or choose the worktree parent with FERRY_WORKTREES or [agent] worktree-dir", "find the data directory")
	}
	if goos == "darwin" {
		return filepath.Join(home, "Library", "Application Support"), nil
	}
	return filepath.Join(home, ".local", "share"), nil
}

// envError reports an invalid value v of the variable name.
func envError(name, v, msg, hint string) error {
	return failure.New(failure.Usage, hint, "%s=%q: %s", name, v, msg)
}
