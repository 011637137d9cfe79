// Package shim is the cargo on an agent's PATH.
//
// On every call it derives the agent from the working directory, never from
// the environment (invariant 4): the git worktree containing the working
// directory must be exactly an agent's worktree, so a separate worktree
// nested inside an agent's is not that agent. For an agent it enters (or
// confirms it is already in) the agent's sandbox, moves to the canonical
// path, gives the selected Cargo workspace its own target dir, and runs the
// real cargo. Anywhere else it execs the real cargo unchanged. It prints
// nothing of its own but real errors, and passes cargo's exit status through.
// It refuses to run itself as the real cargo, through a wrapper or not,
// while cargo's own nesting (build scripts, subcommands) keeps going
// through it (see recursion.go). Inside a base's warm commands it gives
// each workspace of the base's checkout its target dir the same way, and
// records each build-type call for the base's observation of the units its
// warm build used (see record.go). An agent's build-type calls it records
// in the store's demand log, with the units Cargo reported fresh and
// compiled (see observe.go): what bases learn to warm, and the hit rate.
//
// It runs on every cargo call, so it reads state files and nothing else: no
// bus, no network, no lock but the shared busy.lock (and the demand log's
// own, once cargo has exited). Before it reads an
// agent's records it checks that the store's own directories are still the
// caller's alone (store.CheckOwnDirs), and refuses (exit 6) otherwise.
// For the same reason it reads agent.json and base.json through package
// record and enters a sandbox through package session, never through the
// packages that build bases and spawn agents: the binary links only what
// a call needs, as cmd/ferry-shim/deps.txt lists it (pkg/cli's
// TestHotBinariesKeepTheirBudget).
package shim

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/cargoenv"
	"github.com/ferrydev/ferry/pkg/cli/report"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/lifecycle"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/sandbox/inplace"
	"github.com/ferrydev/ferry/pkg/session"
	"github.com/ferrydev/ferry/pkg/store"
	"github.com/ferrydev/ferry/pkg/toolchain"
)

// Call is one cargo invocation.
type Call struct {
	Args []string // cargo's arguments
	Dir  string   // working directory
	Env  []string
	Self string // the shim's own path (resolved)
	// ShimDir is the directory the shim is installed in as cargo
	// (<store parent>/bin); PATH entries there are skipped.
	ShimDir string
}

// Prog is the name the shim's own errors are printed under.
const Prog = "ferry-shim"

// Main runs the shim for this process and returns the exit status:
// cargo's, or that of the shim's own failure, printed through the one
// error printer (report.Print, as Prog).
func Main(args []string) int {
	code, err := run(args)
	if err != nil {
		return report.Print(report.StdIO(), Prog, err, false)
	}
	return code
}

func run(args []string) (int, error) {
	if err := inplace.Failure(args); err != nil {
		return 0, err // this process entering an agent's sandbox failed
	}
	self, _ := os.Executable()
	if r, err := filepath.EvalSymlinks(self); err == nil {
		self = r
	}
	wd, err := os.Getwd()
	if err != nil {
		return 0, err
	}
	c := Call{Args: args, Dir: wd, Env: os.Environ(), Self: self}
	c.ShimDir = c.findShimDir()
	return c.Run()
}

// findShimDir returns the PATH directory through which this process was
// reached as cargo: the first one whose cargo resolves to the shim itself.
func (c *Call) findShimDir() string {
	for _, dir := range filepath.SplitList(cargoenv.Get(c.Env, "PATH")) {
		p := filepath.Join(dir, "cargo") // a PATH entry's cargo: not a store path
		if r, err := filepath.EvalSymlinks(p); err == nil && r == c.Self {
			return dir
		}
	}
	return ""
}

// RealCargo is the next cargo on PATH that is not Ferry.
func (c *Call) RealCargo() (string, error) {
	for _, dir := range filepath.SplitList(cargoenv.Get(c.Env, "PATH")) {
		if dir == "" || dir == c.ShimDir {
			continue
		}
		p := filepath.Join(dir, "cargo") // a PATH entry's cargo: not a store path
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			continue
		}
		if r, err := filepath.EvalSymlinks(p); err == nil && r == c.Self {
			continue
		}
		return p, nil
	}
	return "", failure.New(failure.Prereq, "install cargo (rustup) and keep it on PATH after Ferry's bin directory",
		"no cargo on PATH besides Ferry's shim")
}

// Run resolves the agent and runs cargo; it returns cargo's exit status.
func (c *Call) Run() (int, error) {
	cargo, err := c.RealCargo()
	if err != nil {
		return 0, err
	}
	if err := c.checkRecursion(cargo); err != nil {
		return 0, err
	}
	a, s, top, err := c.resolve()
	if err != nil {
		return 0, err
	}
	if a == nil {
		if src, target := cargoenv.Get(c.Env, "FERRY_WARM_SRC"), cargoenv.Get(c.Env, "FERRY_WARM_TARGET"); src != "" && target != "" {
			return c.warm(cargo, src, target)
		}
		return 0, c.exec(cargo, c.Dir, c.Args, c.Env)
	}
	return c.runForAgent(cargo, a, s, top)
}

// warm runs inside a base's warm commands (already in the base's sandbox):
// each workspace of the checkout gets the target dir it gets in agents,
// and with FERRY_WARM_UNITS set, the call is recorded there (record.go).
func (c *Call) warm(cargo, src, warmTarget string) (int, error) {
	env, target := c.Env, cargoenv.Get(c.Env, "CARGO_TARGET_DIR")
	rel, err := filepath.Rel(src, c.Dir)
	if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		// In the base's sandbox (or, with sandbox mode off, where its warm
		// commands run unconfined anyway): the probe runs where the call does.
		ws, err := c.workspace(cargo, src, rel, "")
		if err != nil {
			return 0, err
		}
		target = store.NestedTarget(warmTarget, ws)
		env = append(cargoenv.Without(c.Env), cargoenv.Target(target)...)
		env = c.underCI(env, c.Dir, func(p string) string { return p }, func() string { return cargoenv.Get(c.Env, envWarmCargo) })
	}
	if dir := cargoenv.Get(c.Env, "FERRY_WARM_UNITS"); dir != "" {
		return c.recordWarm(cargo, dir, warmTarget, target, env)
	}
	return 0, c.exec(cargo, c.Dir, c.Args, env)
}

// resolve finds the agent whose worktree is exactly the git worktree
// containing c.Dir (a linked worktree, or a main checkout adopted in
// place). It returns nil when there is none.
func (c *Call) resolve() (*record.Agent, *store.Store, string, error) {
	top, gitFile := worktreeTop(c.Dir)
	if top == "" {
		return nil, nil, "", nil // not in a worktree: no agent
	}
	// A linked worktree names its repository in its .git file; a main
	// checkout holds it, and is an agent only when adopted in place.
	common, err := commonDirOf(gitFile)
	if gitFile == "" {
		common, err = filepath.EvalSymlinks(filepath.Join(top, ".git"))
	}
	if err != nil {
		return nil, nil, "", nil
	}
	if c.ShimDir == "" {
		return nil, nil, "", nil
	}
	s := store.OfShim(c.ShimDir, common)
	if _, err := os.Stat(s.AgentsDir()); err != nil {
		return nil, nil, "", nil
	}
	// The agent's records decide where cargo builds: trust them only from a
	// store nobody else could change. Three lstats (a few µs); the command
	// that installed the shim checked the path to the store.
	if err := s.CheckOwnDirs(); err != nil {
		return nil, nil, "", err
	}
	a, err := record.FindByWorktree(s, top)
	if err != nil || a == nil {
		return nil, nil, "", err
	}
	if a.State != record.Ready {
		return nil, nil, "", record.NotReady(a)
	}
	return a, s, top, nil
}

// worktreeTop walks up from dir to the nearest directory holding .git and
// returns it and, for a linked worktree, the path of its .git file.
func worktreeTop(dir string) (top, gitFile string) {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Lstat(filepath.Join(d, ".git"))
		if err == nil {
			if fi.Mode().IsRegular() {
				return d, filepath.Join(d, ".git")
			}
			return d, ""
		}
		if parent := filepath.Dir(d); parent == d {
			return "", ""
		}
	}
}

// commonDirOf reads a linked worktree's .git file and returns the
// repository's common dir, as git would.
func commonDirOf(gitFile string) (string, error) {
	b, err := os.ReadFile(gitFile)
	if err != nil {
		return "", err
	}
	gitdir, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: ")
	if !ok {
		return "", fmt.Errorf("%s: not a worktree link", gitFile)
	}
	if !filepath.IsAbs(gitdir) {
		gitdir = filepath.Join(filepath.Dir(gitFile), gitdir)
	}
	cd, err := os.ReadFile(filepath.Join(gitdir, "commondir"))
	if err != nil {
		return "", err
	}
	common := strings.TrimSpace(string(cd))
	if !filepath.IsAbs(common) {
		common = filepath.Join(gitdir, common)
	}
	if r, err := filepath.EvalSymlinks(common); err == nil {
		common = r
	}
	return filepath.Clean(common), nil
}

func (c *Call) runForAgent(cargo string, a *record.Agent, s *store.Store, top string) (int, error) {
	if err := c.freshenMoved(s, a, top); err != nil { // moved.go
		return 0, err
	}
	if a.HostPaths() {
		return c.runAtHostPaths(cargo, a, s, top)
	}
	rel, err := filepath.Rel(top, c.Dir)
	if err != nil {
		return 0, err
	}
	mntSrc, mntTarget := s.MntSrc(), s.MntTarget()
	canonical := filepath.Join(mntSrc, rel)
	inSandbox := session.InSandbox(s, a)
	probeDir := ""
	if !inSandbox {
		probeDir = c.probeDir(s, a)
	}
	ws, err := c.workspace(cargo, top, rel, probeDir)
	if err != nil {
		return 0, err
	}
	target := store.NestedTarget(mntTarget, ws)
	env := cargoenv.WithFreshness(cargoEnv(c.Env, a.Name, target, canonical), a.FreshnessEnv)
	env = c.underCI(env, canonical, func(p string) string { return hostPath(p, mntSrc, top) }, func() string { return c.baseCargo(s, a) })

	if inSandbox {
		// Already in this agent's sandbox (ferry run, ferry shell): cargo
		// inherits an overlay's mount.lock through exec, and busy.lock.
		// The store is sealed here: the call is not recorded (observe.go).
		if err := unix.Chdir(canonical); err != nil {
			return 0, err
		}
		return 0, c.execBusy(s, a, cargo, canonical, canonicalArgs(c.Args, top, mntSrc), env)
	}
	obs := c.watch(s, a, top, ws)
	callArgs := c.Args
	if obs != nil {
		callArgs, obs.target = obs.plan.args, target
	}
	args := canonicalArgs(callArgs, top, mntSrc)
	// cargo runs in a child whose pid is not known yet: only the depth
	// marks this call (checkRecursion catches a loop there on its way back
	// in, where the shim execs).
	env = c.marked(env, "", cargo, canonical, args)
	x, err := session.Command(s, a, canonical, append([]string{cargo}, args...), env)
	if err != nil {
		return 0, err
	}
	if obs != nil {
		return obs.run(x)
	}
	if x.Mode == lifecycle.EnterBind && inplace.Linked {
		// A namespace of the call's own: this process enters it and becomes
		// cargo (package inplace says why), keeping busy.lock.
		err := inplace.Exec(x.Cmd)
		x.Close()
		return 0, err
	}
	if x.Mode == lifecycle.EnterJoin && inplace.Linked {
		// An overlay's live namespace: this process joins it and becomes
		// cargo, keeping busy.lock and mount.lock; the agent lock goes at
		// the exec, once busy.lock keeps rm out.
		err := inplace.ExecJoin(x.Cmd)
		x.Close()
		return 0, err
	}
	x.Cmd.Stdin, x.Cmd.Stdout, x.Cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return x.Run()
}

// workspace returns the directory, relative to the worktree top, of the
// Cargo workspace the call selects. At the top without --manifest-path it is
// the top itself; elsewhere cargo locate-project decides.
//
// The probe runs before the call enters the agent's sandbox. Run in the
// worktree, where any of the agent's builds can write, it would obey what
// a build planted there: rustup's cargo proxy picks its toolchain from a
// rust-toolchain.toml in the working directory or above, and one with
// [toolchain] path = "<dir>" makes it run <dir>/bin/cargo, unconfined
// (seen with rustup 1.29); Cargo reads .cargo/config.toml from there too.
// So unless probeDir is "" (the call is confined already), the probe runs
// in probeDir, a directory the sandbox cannot write (the agent's base
// checkout: its toolchain file is the one the base was built with), and
// names the manifest cargo would start from itself: the call's
// --manifest-path, else the nearest Cargo.toml at or above the working
// directory. Cargo finds the workspace from the manifest, and reads only
// manifests, not configuration or toolchain files, below the manifest's
// directory.
func (c *Call) workspace(cargo, top, rel, probeDir string) (string, error) {
	manifest := manifestPathArg(c.Args)
	if rel == "." && manifest == "" {
		return ".", nil
	}
	args := []string{"locate-project", "--workspace", "--message-format", "plain"}
	dir := c.Dir
	switch {
	case probeDir != "":
		m := c.startManifest(manifest, top)
		if m == "" {
			return ".", nil // no manifest in the worktree: cargo itself will say so
		}
		args = append(args, "--manifest-path", m)
		dir = probeDir
	case manifest != "":
		args = append(args, "--manifest-path", manifest)
	}
	cmd := exec.Command(cargo, args...)
	cmd.Dir = dir
	cmd.Env = c.marked(c.Env, probeID, cargo, dir, args)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if err := probeFailure(string(ee.Stderr)); err != nil {
				return "", err
			}
		}
		// No workspace here: cargo itself will say so; use the top's target.
		return ".", nil
	}
	wsDir := filepath.Dir(strings.TrimSpace(string(out)))
	if r, err := filepath.EvalSymlinks(wsDir); err == nil {
		wsDir = r
	}
	realTop := top
	if r, err := filepath.EvalSymlinks(top); err == nil {
		realTop = r
	}
	wsRel, err := filepath.Rel(realTop, wsDir)
	if err != nil || wsRel == ".." || strings.HasPrefix(wsRel, "../") {
		return ".", nil // a workspace outside the worktree: not the agent's to redirect
	}
	return wsRel, nil
}

// startManifest is the manifest a cargo call in c.Dir starts from: the
// call's --manifest-path (manifest) made absolute, else the nearest
// Cargo.toml in c.Dir or above it, up to the worktree top, from the
// working directory as the kernel names it (as cargo's own search goes).
// It is "" when there is none up to the top: a workspace above the
// worktree is not the agent's.
func (c *Call) startManifest(manifest, top string) string {
	if manifest != "" {
		if filepath.IsAbs(manifest) {
			return manifest
		}
		return filepath.Join(c.Dir, manifest)
	}
	dir, realTop := c.Dir, top
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	if r, err := filepath.EvalSymlinks(top); err == nil {
		realTop = r
	}
	for d := dir; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "Cargo.toml") // cargo's manifest search: not a store path
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
		if d == realTop || d == filepath.Dir(d) {
			return ""
		}
	}
}

// probeDir is where the workspace probe of agent a's call runs outside
// its sandbox: the base's checkout, which no sandbox can write, else the
// store's directory.
func (c *Call) probeDir(s *store.Store, a *record.Agent) string {
	if src := s.Base(a.Base).Src; isDir(src) {
		return src
	}
	return s.Dir
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// manifestPathArg returns the value of --manifest-path, if any, from the
// arguments before a "--".
func manifestPathArg(args []string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		if v, ok := strings.CutPrefix(a, "--manifest-path="); ok {
			return v
		}
		if a == "--manifest-path" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// canonicalArgs maps absolute paths inside the worktree in --manifest-path
// of cargo's arguments args to the canonical checkout, where cargo will
// run.
func canonicalArgs(args []string, top, mntSrc string) []string {
	out := append([]string(nil), args...)
	mapPath := func(p string) string {
		if filepath.IsAbs(p) {
			if rel, err := filepath.Rel(top, p); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				return filepath.Join(mntSrc, rel)
			}
		}
		return p
	}
	for i, a := range out {
		if a == "--" {
			break
		}
		if v, ok := strings.CutPrefix(a, "--manifest-path="); ok {
			out[i] = "--manifest-path=" + mapPath(v)
		} else if a == "--manifest-path" && i+1 < len(out) {
			out[i+1] = mapPath(out[i+1])
		}
	}
	return out
}

// envWarmCargo carries the base's Cargo version to the shim in its warm
// commands, where no base record exists yet.
const envWarmCargo = "FERRY_WARM_CARGO"

// underCI adds CARGO_INCREMENTAL=1 to env under the CI rule
// (cargoenv.IncrementalUnderCI) for a call whose cargo runs in dir;
// readable maps a path cargo would read to one this process can read, and
// cargoVersion is the base's Cargo version, read only in CI.
func (c *Call) underCI(env []string, dir string, readable func(string) string, cargoVersion func() string) []string {
	if !cargoenv.InCI(c.Env) {
		return env
	}
	v := cargoVersion()
	if !toolchain.VersionAtLeast(v, cargoenv.CIIncrementalSince[0], cargoenv.CIIncrementalSince[1]) {
		return env
	}
	dirs := cargoenv.ConfigDirs(dir, c.Env)
	for i, d := range dirs {
		dirs[i] = readable(d)
	}
	if cargoenv.IncrementalUnderCI(c.Env, c.Args, c.Dir, dirs) {
		env = append(env, "CARGO_INCREMENTAL=1")
	}
	return env
}

// baseCargo is the Cargo version agent a's base recorded, or "" when its
// record cannot be read (no version: no switch to answer).
func (c *Call) baseCargo(s *store.Store, a *record.Agent) string {
	b, err := record.ReadBase(s, a.Base)
	if err != nil {
		return ""
	}
	return b.Toolchain.CargoVersion
}

// hostPath maps a path below the canonical checkout to the worktree it
// shows; any other path is the same on the host.
func hostPath(p, mntSrc, top string) string {
	if rel, err := filepath.Rel(mntSrc, p); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return filepath.Join(top, rel)
	}
	return p
}

// cargoEnv is the caller's environment with every inherited build
// redirection replaced (invariants 3 and 4).
func cargoEnv(env []string, name, target, pwd string) []string {
	out := append(cargoenv.Without(env, "FERRY_AGENT", "PWD"), cargoenv.Target(target)...)
	return append(out, "FERRY_AGENT="+name, "PWD="+pwd)
}

// execBusy replaces the shim with cargo, run in dir, holding agent a's
// busy.lock through the exec so that rm and gc see the call.
func (c *Call) execBusy(s *store.Store, a *record.Agent, cargo, dir string, args, env []string) error {
	busy, err := session.HoldBusy(s, a.Name)
	if err != nil {
		return err
	}
	if _, err := unix.FcntlInt(busy.File().Fd(), unix.F_SETFD, 0); err != nil {
		return err
	}
	return c.exec(cargo, dir, args, env)
}

// exec replaces the shim with cargo, which runs in dir (the working
// directory), marking the call so that a cargo that comes straight back to
// the shim is caught (see checkRecursion).
func (c *Call) exec(cargo, dir string, args, env []string) error {
	env = c.marked(env, selfID(), cargo, dir, args)
	err := syscall.Exec(cargo, append([]string{"cargo"}, args...), env)
	return fmt.Errorf("exec %s: %w", cargo, err)
}
