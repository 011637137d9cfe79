package oracle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
)

// CommandError is a command that failed, with the end of its output.
type CommandError struct {
	Argv   []string
	Dir    string
	Err    error
	Stdout string
	Stderr string
}

func (e *CommandError) Error() string {
	msg := fmt.Sprintf("%s (in %s): %v", strings.Join(e.Argv, " "), e.Dir, e.Err)
	if s := tail(e.Stderr, 40); s != "" {
		msg += "\n  stderr:\n    " + strings.ReplaceAll(s, "\n", "\n    ")
	}
	if s := tail(e.Stdout, 40); s != "" {
		msg += "\n  stdout:\n    " + strings.ReplaceAll(s, "\n", "\n    ")
	}
	return msg
}

func (e *CommandError) Unwrap() error { return e.Err }

// ExitCode is the command's exit status, or -1 when it did not exit.
func (e *CommandError) ExitCode() int {
	var ee *exec.ExitError
	if errors.As(e.Err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = append([]string{"…"}, l[len(l)-lines:]...)
	}
	return strings.TrimSpace(strings.Join(l, "\n"))
}

// command runs prog in dir with env (nil: this process's) and returns its
// standard output.
func command(ctx context.Context, dir string, env []string, prog string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &CommandError{Argv: append([]string{prog}, args...), Dir: dir, Err: err,
			Stdout: stdout.String(), Stderr: stderr.String()}
	}
	return stdout.String(), nil
}

// DropEnv returns env without the named variables.
func DropEnv(env []string, names ...string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || k == n
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}

func getenv(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if s, ok := strings.CutPrefix(kv, key+"="); ok {
			v = s
		}
	}
	return v
}

// buildAndTest is what every agent's Build runs, in dir below tree.
func buildAndTest(ctx context.Context, tree, rel string, env []string, cargo string, v Variant) (string, error) {
	dir := filepath.Join(tree, filepath.FromSlash(rel))
	if v != (Variant{}) {
		_, err := command(ctx, dir, env, cargo, append([]string{"build", "-p", fixture.AppCrate}, v.Args()...)...)
		return "", err
	}
	if _, err := command(ctx, dir, env, cargo, "build", "--workspace", "--all-targets"); err != nil {
		return "", err
	}
	return command(ctx, dir, env, cargo, "test", "-p", fixture.AppCrate)
}

func runApp(ctx context.Context, target, dir string, v Variant) (string, error) {
	out, err := command(ctx, dir, nil, filepath.Join(target, v.Profile(), fixture.BinName))
	return strings.TrimRight(out, "\n"), err
}

// Ferry drives Ferry's binaries for one fixture repository: `ferry base`,
// `ferry spawn`, `ferry rm`.
type Ferry struct {
	Bin       string   // directory holding ferry, ferry-base, ferry-spawn, ferry-shim …
	Home      string   // FERRY_HOME, the store parent
	Worktrees string   // FERRY_WORKTREES
	Repo      string   // the repository's work tree
	Env       []string // environment for every command (CARGO_HOME set, git isolated)
	Freshness string   // [base] freshness of the bases; "" for the default (mtime)

	// From `ferry base --json`: the repository's store, the base's
	// checkout and target.
	store, baseSrc, baseTarget string
}

func (f *Ferry) env() []string {
	return append(DropEnv(f.Env, "FERRY_HOME", "FERRY_WORKTREES"), "FERRY_HOME="+f.Home, "FERRY_WORKTREES="+f.Worktrees)
}

func (f *Ferry) ferry(ctx context.Context, args ...string) (string, error) {
	return command(ctx, f.Repo, f.env(), filepath.Join(f.Bin, "ferry"), args...)
}

// Base writes an untracked ferry.toml with the warm commands (ignored
// through .git/info/exclude, so later commits leave it out) and builds the
// base of HEAD with `ferry base`.
func (f *Ferry) Base(ctx context.Context, warm ...string) error {
	q := make([]string, len(warm))
	for i, w := range warm {
		q[i] = fmt.Sprintf("%q", w)
	}
	exclude := filepath.Join(f.Repo, ".git", "info", "exclude")
	if err := os.MkdirAll(filepath.Dir(exclude), 0o755); err != nil {
		return err
	}
	if err := appendOrCreate(exclude, "/ferry.toml\n"); err != nil {
		return err
	}
	toml := "[base]\nwarm = [" + strings.Join(q, ", ") + "]\n"
	if f.Freshness != "" {
		toml += fmt.Sprintf("freshness = %q\n", f.Freshness)
	}
	if err := os.WriteFile(filepath.Join(f.Repo, "ferry.toml"), []byte(toml), 0o644); err != nil {
		return err
	}
	out, err := f.ferry(ctx, "base", "--json")
	if err != nil {
		return err
	}
	var rec struct {
		Store  string `json:"store"`
		Src    string `json:"src"`
		Target string `json:"target"`
	}
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.Store == "" || rec.Src == "" || rec.Target == "" {
		return fmt.Errorf("oracle: ferry base --json printed no store, src or target (%v): %s", err, out)
	}
	f.store, f.baseSrc, f.baseTarget = rec.Store, rec.Src, rec.Target
	return nil
}

// BuiltBase is what `ferry base --json` says of a base.
type BuiltBase struct {
	ID       string `json:"id"`
	Commit   string `json:"commit"`
	Src      string `json:"src"`
	Target   string `json:"target"`
	Seed     string `json:"seed"`
	SeedBy   string `json:"seed_by"`
	Observed bool   `json:"observed"`
	Pruned   struct {
		Units int `json:"units"`
	} `json:"pruned"`
}

// BaseAt builds (or reuses) the base of rev with the warm commands Base
// wrote, and makes it current: seeded from an earlier base when Ferry can.
func (f *Ferry) BaseAt(ctx context.Context, rev string) (BuiltBase, error) {
	var b BuiltBase
	out, err := f.ferry(ctx, "base", "--rev", rev, "--json")
	if err != nil {
		return b, err
	}
	if err := json.Unmarshal([]byte(out), &b); err != nil || b.Src == "" {
		return b, fmt.Errorf("oracle: ferry base --json: %v: %s", err, out)
	}
	return b, nil
}

// BaseSrc and BaseTarget are the checkout and the target dir of the base
// Base built (read only).
func (f *Ferry) BaseSrc() string    { return f.baseSrc }
func (f *Ferry) BaseTarget() string { return f.baseTarget }

// Spawn creates agent name at revision from with `ferry spawn --json`, with
// the backend Ferry chooses.
func (f *Ferry) Spawn(ctx context.Context, name, from string) (Agent, error) {
	return f.SpawnWith(ctx, name, from, "auto")
}

// SpawnWith creates agent name at revision from with the fork backend given.
func (f *Ferry) SpawnWith(ctx context.Context, name, from, backend string) (Agent, error) {
	if f.store == "" {
		return nil, errors.New("oracle: Spawn before Base")
	}
	out, err := f.ferry(ctx, "spawn", name, "--from", from, "--backend", backend, "--json")
	if err != nil {
		return nil, err
	}
	var rec struct {
		Name      string `json:"name"`
		Worktree  string `json:"worktree"`
		State     string `json:"state"`
		Isolation string `json:"isolation"`
	}
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		return nil, fmt.Errorf("oracle: ferry spawn --json: %w: %s", err, out)
	}
	if rec.Name != name || rec.State != "ready" || rec.Worktree == "" {
		return nil, fmt.Errorf("oracle: ferry spawn --json printed an unexpected record: %s", out)
	}
	shimDir := filepath.Join(f.Home, "bin")
	env := append(DropEnv(f.env(), "PATH"), "PATH="+shimDir+string(filepath.ListSeparator)+getenv(f.Env, "PATH"))
	a := &ferryAgent{
		name:     name,
		worktree: rec.Worktree,
		root:     filepath.Join(f.store, "mnt", "src"),
		target:   filepath.Join(f.store, "mnt", "target"),
		ferry:    filepath.Join(f.Bin, "ferry"),
		shim:     filepath.Join(shimDir, "cargo"),
		env:      env,
	}
	if rec.Isolation == "off" {
		// Built at host paths: cargo in the worktree, the target the
		// fork, where ferry env says a host process finds it.
		out, err := f.ferry(ctx, "env", name, "--json")
		if err != nil {
			return nil, err
		}
		var vars map[string]string
		if err := json.Unmarshal([]byte(out), &vars); err != nil || vars["FERRY_HOST_TARGET"] == "" {
			return nil, fmt.Errorf("oracle: ferry env --json names no host target (%v): %s", err, out)
		}
		a.root, a.target = rec.Worktree, vars["FERRY_HOST_TARGET"]
	}
	return a, nil
}

// Remove removes agent name with `ferry rm --force`.
func (f *Ferry) Remove(ctx context.Context, name string) error {
	_, err := f.ferry(ctx, "rm", "--force", name)
	return err
}

// ferryAgent is an agent made by `ferry spawn`, built through the cargo shim
// (<store parent>/bin/cargo first on PATH) with its worktree as working
// directory; its binary is run in its sandbox with `ferry run`, where its
// target is (an overlay agent's target exists only there).
type ferryAgent struct {
	name, worktree string
	root           string // where cargo sees the worktree: the canonical checkout, or the worktree without the sandbox
	target         string // the canonical target path, inside the sandbox (the fork without it)
	ferry, shim    string
	env            []string
}

func (a *ferryAgent) Name() string { return a.name }
func (a *ferryAgent) Tree() string { return a.worktree }
func (a *ferryAgent) Build(ctx context.Context, dir string, v Variant) (string, error) {
	return buildAndTest(ctx, a.worktree, dir, a.env, a.shim, v)
}
func (a *ferryAgent) Run(ctx context.Context, v Variant) (string, error) {
	out, err := command(ctx, a.worktree, a.env, a.ferry, "run", a.name, "--", filepath.Join(a.target, v.Profile(), fixture.BinName))
	return strings.TrimRight(out, "\n"), err
}
func (a *ferryAgent) BuildRoot() string { return a.root }
func (a *ferryAgent) RunManifestDir(ctx context.Context, v Variant) (string, error) {
	out, err := command(ctx, a.worktree, a.env, a.ferry, "run", a.name, "--", filepath.Join(a.target, v.Profile(), fixture.BinName), fixture.ManifestDirFlag)
	return strings.TrimRight(out, "\n"), err
}

// sharedTargetAgent is a plain `git worktree add` worktree built with plain
// cargo and a CARGO_TARGET_DIR shared with other agents: the shortcut Ferry
// replaces.
type sharedTargetAgent struct {
	name, worktree string
	target         string
	cargo          string
	env            []string
}

// NewSharedTargetAgent adds a worktree of repo at dir on a new branch and
// returns an agent that builds it with cargo (a path) into the shared
// target. env must not redirect cargo otherwise (see fixture.CargoEnv).
func NewSharedTargetAgent(repo *fixture.Repo, name, dir, target, cargo string, env []string) (Agent, error) {
	if _, err := repo.Git("worktree", "add", "-q", "-b", "oracle/"+name, dir, "HEAD"); err != nil {
		return nil, err
	}
	env = append(DropEnv(env, "CARGO_TARGET_DIR", "CARGO_BUILD_TARGET_DIR", "CARGO_BUILD_BUILD_DIR"), "CARGO_TARGET_DIR="+target)
	return &sharedTargetAgent{name: name, worktree: dir, target: target, cargo: cargo, env: env}, nil
}

func (a *sharedTargetAgent) Name() string { return a.name }
func (a *sharedTargetAgent) Tree() string { return a.worktree }
func (a *sharedTargetAgent) Build(ctx context.Context, dir string, v Variant) (string, error) {
	return buildAndTest(ctx, a.worktree, dir, a.env, a.cargo, v)
}
func (a *sharedTargetAgent) Run(ctx context.Context, v Variant) (string, error) {
	return runApp(ctx, a.target, a.worktree, v)
}

// BuildTemplate builds a cold target dir for the fixture in tree (a plain
// directory or checkout), with the builds a reference and an agent make, so
// that copies of it (mtimes kept) hold fresh registry crates.
func BuildTemplate(ctx context.Context, tree, target, cargo string, env []string) error {
	env = append(DropEnv(env, "CARGO_TARGET_DIR", "CARGO_BUILD_TARGET_DIR", "CARGO_BUILD_BUILD_DIR"), "CARGO_TARGET_DIR="+target)
	if _, err := command(ctx, tree, env, cargo, "build", "--workspace", "--all-targets"); err != nil {
		return err
	}
	_, err := command(ctx, tree, env, cargo, "test", "-p", fixture.AppCrate, "--no-run")
	return err
}

func appendOrCreate(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
