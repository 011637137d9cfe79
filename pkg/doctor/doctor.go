// Package doctor diagnoses a host for Ferry, as data: every check with its
// result and the blocker behind a failure, and what `ferry spawn` would do
// in the repository of the working directory (the fork backend auto picks
// there and why, and whether builds get the namespace sandbox).
//
// A result is about Ferry, not the feature: blocked means spawn cannot work
// because of it (user namespaces for the sandbox, reflink when the backend
// is set to reflink), warning means Ferry works but without something that
// would make it cheaper (clones, an overlay), ok is ok. So a report's exit
// code is 0 exactly when spawn can work, and otherwise that of the first
// error spawn would meet: 4 (failure.Blocked) for a blocked sandbox.
//
// Checks try the operation rather than read version numbers: the sandbox is
// built for real (sandbox.Probe); the overlay is mounted and clones are made
// for real by the probes spawn's fork.Select asks (fork.OverlayBlocker,
// fork.ReflinkBlocker), and the backend spawn would use is fork.Auto's
// choice from them, so doctor and spawn cannot disagree. What a store
// without clones costs is said in the words of that backend (its Cost): an
// overlay copies nothing, and only a fallback to copy costs a full copy of
// the target per agent. What is
// read from /proc/sys goes through the platform.Host given, so tests name
// every blocker from prepared roots. The package never prints; package cli
// renders a Report.
package doctor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/record/demand"
	"github.com/ferrydev/ferry/pkg/sandbox"
	"github.com/ferrydev/ferry/pkg/share"
	"github.com/ferrydev/ferry/pkg/store"
	"github.com/ferrydev/ferry/pkg/toolchain"
)

// Status is the result of a check.
type Status string

const (
	// OK: the check passed.
	OK Status = "ok"
	// Warning: Ferry works, without what the check looks for.
	Warning Status = "warning"
	// Blocked: spawn cannot work because of what the check found.
	Blocked Status = "blocked"
)

// The checks, in the order a Report lists them.
const (
	CheckUserns     = platform.CheckUserns  // the namespace sandbox
	CheckConfig     = "config"              // ferry.toml and FERRY_* (only when they are broken)
	CheckWorkspace  = "workspace"           // HEAD has the Cargo.toml at the repository root that bases build
	CheckOwner      = "store-owner"         // nobody but the caller (and root) can change the store's path
	CheckOverlay    = platform.CheckOverlay // an unprivileged overlay with its upper in the store
	CheckFilesystem = "filesystem"          // the store's filesystem
	CheckDiskFloor  = "disk-floor"          // free space on the store's filesystem over [gc] min-free
	CheckReflink    = platform.CheckReflink // clones in the store
	CheckRefresh    = "refresh"             // how a new commit's base starts from an older one's target
	CheckBases      = "bases"               // ready bases still hold what they were built with
	CheckRecords    = "records"             // the store's records (current, base.json, agent.json) can be read
	CheckRemap      = "remap"               // the toolchain keeps rustc's incremental state across worktrees (remap mode)
	CheckFreshness  = "freshness"           // [base] freshness, and whether the toolchain can do checksum
	CheckShimPath   = "shim-path"           // cargo in a shell resolves to Ferry's shim
	CheckGitHook    = "git-hook"            // git worktree add makes agents (ferry hook git install)
	CheckClaudeCode = "claude-code"         // the claude on PATH takes the hooks Ferry installs
	// CheckConfine (confine.go): what builds in the sandbox can write.
)

// Isolation of builds, as Spawn.Isolation says it.
const (
	IsolationSandbox = "namespace sandbox"
	IsolationHost    = "host paths" // without the sandbox: sandbox mode off, or auto on a blocked host
	IsolationRefused = "refused"
)

// hostPathsCost is what building without the namespace sandbox costs, for
// the isolation reason.
const hostPathsCost = "builds run at host paths, each agent in its own worktree with its fork as the target dir. " +
	"It costs rebuilds, never correctness: rustc's incremental state is keyed on absolute paths, so the first build " +
	"after an edit recompiles more of each edited crate than in the sandbox, and spawn removes from each fork the " +
	"units that recorded the base's paths (the relocation plan), which the agent's first build compiles again"

// Check is one check's result.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	// Detail is one line for a table: what was found.
	Detail string `json:"detail"`
	// Path is the directory the check probed, when it probed one.
	Path string `json:"path,omitempty"`
	// Blocker names the setting behind a warning or blocked result, with
	// its remedy, when one is known.
	Blocker *platform.Blocker `json:"blocker,omitempty"`
	// Hint is what to do about a failure that has no Blocker (a broken
	// ferry.toml, a probe that could not run).
	Hint string `json:"hint,omitempty"`
}

// Spawn is what `ferry spawn` would do in the repository.
type Spawn struct {
	// Works is whether spawn can work here; Report.ExitCode says how not.
	Works bool `json:"works"`
	// Backend is the fork backend spawn would use ("reflink", "overlay",
	// "copy"), "" when the configured one is refused.
	Backend       string `json:"backend"`
	BackendReason string `json:"backend_reason"`
	// Isolation is IsolationSandbox, IsolationHost or IsolationRefused.
	Isolation       string `json:"isolation"`
	IsolationReason string `json:"isolation_reason"`
}

// HostInfo identifies the host and the caller.
type HostInfo struct {
	Kernel string `json:"kernel"`
	Uid    int    `json:"uid"`
	Exe    string `json:"exe,omitempty"`
}

// Report is the whole diagnosis: `ferry doctor --json` prints it.
type Report struct {
	Host HostInfo `json:"host"`
	// Repository is the worktree of the working directory; "" outside one.
	Repository string `json:"repository"`
	// Store is the repository's store dir; it may not exist yet, and the
	// store checks then probe its nearest existing ancestor (their Path).
	Store string `json:"store,omitempty"`
	// Note says what the report leaves out and why.
	Note   string  `json:"note,omitempty"`
	Checks []Check `json:"checks"`
	// Spawn is nil outside a repository.
	Spawn *Spawn `json:"spawn,omitempty"`
	// ExitCode is 0 when spawn can work (outside a repository: when the
	// sandbox works), else the code of Err's kind.
	ExitCode int `json:"exit_code"`

	err error
}

// Err is the first error spawn would meet here, nil when it can work: a
// blocked sandbox (failure.Blocked), a refused sandbox mode or backend, a
// broken configuration.
func (r *Report) Err() error { return r.err }

// Check returns the named check, or nil.
func (r *Report) Check(name string) *Check {
	for i := range r.Checks {
		if r.Checks[i].Name == name {
			return &r.Checks[i]
		}
	}
	return nil
}

// Options says what to diagnose.
type Options struct {
	// Host is read for settings and the kernel release; platform.Real()
	// for this machine.
	Host platform.Host
	// Repo is the top of the working directory's worktree, "" outside a
	// repository; NotRepo then says why.
	Repo    string
	NotRepo error
	// Settings are the repository's; ConfigErr replaces them when
	// ferry.toml or the environment is broken.
	Settings  *config.Settings
	ConfigErr error
	// ConfigNote says how the settings were read when not as the working
	// tree's ferry.toml says (cli.Settings: as committed, in an agent's
	// worktree); "" otherwise. It becomes the report's note.
	ConfigNote string
	// Store is the repository's store; it need not exist (the store checks
	// then probe its nearest existing ancestor). Nil outside a repository.
	// Its CheckOwner runs first: when it fails the store is not probed,
	// since the probes would write into directories someone else controls.
	Store *store.Store
	// TempDir is where the sandbox is tried and, outside a repository, the
	// overlay; "" means os.TempDir().
	TempDir string
	// PATH is the caller's search path, for the shim-on-path check.
	PATH string
	// GitHook is where `ferry hook git install` puts the hook in this
	// repository, and whether Ferry's is there; nil skips the check.
	GitHook *GitHook
	// Claude is the claude on PATH and the settings files holding Ferry's
	// hooks; nil skips the check (no claude, no hooks).
	Claude *ClaudeCode
	// Git is the repository at Repo, whose HEAD's rust-toolchain files
	// choose the toolchain the toolchain checks ask; nil asks the
	// default toolchain.
	Git *git.Repo
}

// ClaudeCode is the claude on PATH, as package hook reads it.
type ClaudeCode struct {
	Bin     string // "" when none is on PATH
	Version string // "" when it said none
	// Gaps is what that release lacks that the hooks rely on
	// (hook.ClaudeGaps).
	Gaps []string
	// Hooks names each settings file holding Ferry's hooks, with the
	// events it holds them for.
	Hooks map[string][]string
	// Dropped names the settings files this release drops whole: they
	// name an event it does not know (CwdChanged before 2.1.83).
	Dropped []string
}

// GitHook is the state of Ferry's post-checkout hook (package hook).
type GitHook struct {
	Path      string
	Installed bool
	Err       error // where the hook would go cannot be said (a relative core.hooksPath)
}

// Run diagnoses the host and, in a repository, its store.
func Run(o Options) *Report {
	tmp := o.TempDir
	if tmp == "" {
		tmp = os.TempDir()
	}
	r := &Report{
		Host:       HostInfo{Kernel: o.Host.KernelRelease(), Uid: o.Host.Uid, Exe: o.Host.Exe},
		Repository: o.Repo,
	}
	userns := checkUserns(o.Host, tmp)
	r.Checks = append(r.Checks, userns)

	switch {
	case o.Repo == "":
		why := "not in a git repository"
		if o.NotRepo != nil {
			why = headline(o.NotRepo)
		}
		r.Note = why + ": host checks only (the overlay is tried in " + tmp + ", not in a store)"
		r.Checks = append(r.Checks, checkOverlay(o.Host, tmp, false))
		if userns.Status == Blocked {
			r.err = sandboxError(userns, "auto")
		}
	case o.ConfigErr != nil || o.Settings == nil || o.Store == nil:
		err := o.ConfigErr
		if err == nil {
			err = errors.New("no settings given")
		}
		r.Note = "the configuration is broken: host checks only (the overlay is tried in " + tmp + ", not in the store)"
		r.Checks = append(r.Checks,
			Check{Name: CheckConfig, Status: Blocked, Detail: headline(err), Hint: failure.HintOf(err)},
			checkOverlay(o.Host, tmp, false))
		r.err = err
	default:
		r.Store = o.Store.Dir
		r.Note = o.ConfigNote
		r.inRepo(o, userns)
	}
	if r.err != nil {
		r.ExitCode = failure.KindOf(r.err).ExitCode()
	}
	if r.Spawn != nil {
		r.Spawn.Works = r.err == nil
	}
	return r
}

// inRepo runs the store checks and decides what spawn would do.
func (r *Report) inRepo(o Options, userns Check) {
	s := o.Settings
	if o.Git != nil {
		ws := checkWorkspace(o.Git)
		r.Checks = append(r.Checks, ws)
		if ws.Status == Blocked {
			// Said after what the host blocks: that is the harder fix.
			defer func() {
				if r.err == nil {
					r.err = failure.New(failure.Prereq, ws.Hint, "%s", ws.Detail)
				}
			}()
		}
	}
	if err := o.Store.CheckOwner(); err != nil {
		r.Checks = append(r.Checks, Check{Name: CheckOwner, Status: Blocked, Detail: err.Error(), Hint: failure.HintOf(err)})
		why := "the store is refused (see the " + CheckOwner + " check)"
		r.Spawn = &Spawn{BackendReason: why, Isolation: IsolationRefused, IsolationReason: why}
		r.err = err
		return
	}
	r.Checks = append(r.Checks, Check{Name: CheckOwner, Status: OK,
		Detail: "the store parent, bin/, bus/ and the way to them are yours alone (or root's)"})
	dir, err := existingAncestor(o.Store.Dir)
	if err != nil {
		r.Checks = append(r.Checks, Check{Name: CheckFilesystem, Status: Blocked, Path: o.Store.Dir,
			Detail: err.Error(), Hint: "set FERRY_HOME or [store] dir in ferry.toml to a directory you can write"})
		r.Spawn = &Spawn{Isolation: IsolationRefused, IsolationReason: "the store cannot be created"}
		r.err = fmt.Errorf("store %s: %w", o.Store.Dir, err)
		return
	}
	// What the configured backend needs makes its check blocked, not a
	// warning, when the store lacks it (auto needs nothing: it picks).
	var set fork.Backend
	var setErr error
	if s.Backend != fork.NameAuto {
		set, setErr = fork.ByName(s.Backend)
	}
	var need fork.Needs
	if set != nil {
		need = set.Needs()
	}
	overlay := checkOverlay(o.Host, dir, need.Overlay)
	r.Checks = append(r.Checks, overlay)
	fs := checkFilesystem(dir)
	r.Checks = append(r.Checks, fs, checkDiskFloor(dir, s.MinFree))
	reflink := checkReflink(dir, fs.Detail, need.Clones)
	r.Checks = append(r.Checks, reflink)
	bases, basesErr := checkBases(o.Store)
	r.Checks = append(r.Checks, bases)
	records, recordsErr := checkRecords(o.Store)
	r.Checks = append(r.Checks, records)
	defer func() {
		if r.err == nil && basesErr != nil {
			r.err = basesErr
		}
		if r.err == nil && recordsErr != nil {
			r.err = recordsErr
		}
	}()

	sp := &Spawn{}
	r.Spawn = sp
	switch {
	case s.SandboxMode == sandbox.ModeOff:
		sp.Isolation = IsolationHost
		sp.IsolationReason = `sandbox mode "off" (FERRY_SANDBOX or [sandbox] mode): ` + hostPathsCost
		if userns.Status == OK {
			sp.IsolationReason += `; user namespaces work here, so mode "auto" would build in the faster, exact namespace sandbox`
		}
	case userns.Status == Blocked && s.SandboxMode == sandbox.ModeAuto:
		// Auto falls back (sandbox.Decide): spawn works, without the
		// sandbox, so the blocker is a warning.
		r.Check(CheckUserns).Status = Warning
		sp.Isolation = IsolationHost
		sp.IsolationReason = "sandbox mode auto and user namespaces are " + userns.Detail + ": " + hostPathsCost +
			"; fix what the userns check names to get the namespace sandbox back"
	case userns.Status == Blocked:
		sp.Isolation = IsolationRefused
		err := sandboxError(userns, s.SandboxMode)
		sp.IsolationReason = err.Error()
		r.err = err
	default:
		sp.Isolation = IsolationSandbox
		sp.IsolationReason = fmt.Sprintf("user namespaces work, so builds run at the canonical paths %s and %s",
			o.Store.MntSrc(), o.Store.MntTarget())
	}

	// auto follows fork.Auto, the rule Select applies, decided from the
	// same probes (fork.ReflinkBlocker, fork.OverlayBlocker) so a prepared
	// host is judged as it would be.
	have := fork.Needs{Clones: reflink.Status == OK, Overlay: overlay.Status == OK, Sandbox: sp.Isolation == IsolationSandbox}
	var used fork.Backend
	switch {
	case s.Backend == fork.NameAuto:
		used = fork.Auto(have)
		sp.Backend = used.Name()
		sp.BackendReason = "auto: " + autoInputs(have, fs.Detail, overlay) + ", so " + used.Cost()
	case setErr != nil:
		sp.BackendReason = setErr.Error()
		if r.err == nil {
			r.err = setErr
		}
	case need.Clones && !have.Clones, need.Overlay && !have.Overlay:
		c := reflink
		if need.Overlay && !have.Overlay {
			c = overlay
		}
		err := failure.New(failure.Blocked, "see the "+c.Name+" check, or use backend auto to let Ferry choose",
			"fork backend %s is not available in %s: %s", s.Backend, dir, c.Detail)
		if c.Blocker != nil {
			err = failure.Wrap(failure.Blocked, c.Blocker, c.Blocker.Remedy, "fork backend %s is not available in %s", s.Backend, dir)
		}
		sp.BackendReason = err.Error()
		if r.err == nil {
			r.err = err
		}
	case need.Sandbox && !have.Sandbox:
		sp.BackendReason = fmt.Sprintf("fork backend %s needs the namespace sandbox, and builds run without it", s.Backend)
		if r.err == nil {
			// Spawn refuses it (fork.SelectUnsandboxed, invariant 5).
			r.err = failure.New(failure.Refused, "use backend auto, reflink or copy, or let builds use the namespace sandbox (see the userns check)", "%s", sp.BackendReason)
		}
	default:
		used = set
		sp.Backend = s.Backend
		sp.BackendReason = fmt.Sprintf("backend %q is set (FERRY_BACKEND or [agent] backend): %s", s.Backend, used.Cost())
	}
	if c := r.Check(CheckReflink); used != nil && c.Blocker != nil {
		withoutClones(c, used)
	}
	r.Checks = append(r.Checks, checkRefresh(o.Host, dir, reflink.Status == OK, sp.Isolation == IsolationHost, s.Layered))
	if sp.Isolation != IsolationRefused {
		r.Checks = append(r.Checks, checkConfine(o.Store, dir, sp.Isolation == IsolationHost))
	}
	tcDir, err := toolchainDir(o.Git)
	if err != nil {
		tcDir = "" // each toolchain check says it could not probe
	}
	defer os.RemoveAll(tcDir)
	remap := checkRemap(tcDir, s.RemapPaths, sp.Isolation)
	r.Checks = append(r.Checks, remap)
	if remap.Status == Blocked && r.err == nil {
		r.err = failure.New(failure.Prereq, remap.Hint, "%s", remap.Detail)
	}
	fresh, err := checkFreshness(tcDir, s.Freshness)
	r.Checks = append(r.Checks, fresh)
	if r.err == nil && err != nil {
		r.err = err
	}
	r.Checks = append(r.Checks, checkShimPath(o.Store, o.PATH))
	if o.Claude != nil {
		r.Checks = append(r.Checks, checkClaude(*o.Claude))
	}
	if o.GitHook != nil {
		r.Checks = append(r.Checks, checkGitHook(*o.GitHook))
	}
}

// checkShimPath says whether `cargo` in a shell with search path path
// reaches Ferry's shim: what agent tools other than Claude Code (whose
// SessionStart hook puts it on PATH per session) need for their builds in
// adopted worktrees to go through Ferry. Outside agents the shim runs the
// next cargo on PATH unchanged. Only a warning: agents still build warm
// through `ferry run`.
func checkShimPath(s *store.Store, path string) Check {
	c := Check{Name: CheckShimPath, Path: s.ShimDir()}
	line := "export PATH=" + s.ShimDir() + `:"$PATH"`
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			continue
		}
		if filepath.Clean(d) == s.ShimDir() {
			c.Status, c.Detail = OK, "cargo in this shell is Ferry's shim ("+store.ShimLink(s.Parent)+"); it runs plain cargo outside agents"
			return c
		}
		cargo := filepath.Join(d, "cargo") // not a store path: a PATH entry
		if fi, err := os.Stat(cargo); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			c.Status, c.Detail = Warning, "cargo in this shell is "+cargo+", not Ferry's shim: builds in worktrees made by tools other than Claude Code bypass Ferry"
			c.Hint = "put this line in the shell profile of the tools' shells (~/.profile, ~/.bashrc or ~/.zshrc): " + line
			return c
		}
	}
	c.Status, c.Detail = Warning, "no cargo on PATH, and not Ferry's shim"
	c.Hint = "put this line in the shell profile of the tools' shells: " + line
	return c
}

// checkClaude says whether the claude on PATH takes Ferry's hooks: a
// settings file it drops whole (it names an event the release does not
// know) is blocked for Claude Code, though not for spawn, so a warning
// with the fix; what the release lacks is a warning too.
func checkClaude(c ClaudeCode) Check {
	ch := Check{Name: CheckClaudeCode, Path: c.Bin, Status: OK}
	installed := len(c.Hooks) > 0
	switch {
	case c.Bin == "":
		ch.Status, ch.Detail = Warning, "Ferry's hooks are installed, and no claude is on PATH to ask its release"
		return ch
	case c.Version == "":
		ch.Status, ch.Detail = Warning, c.Bin+" --version names no release"
		return ch
	case len(c.Dropped) > 0:
		ch.Status = Warning
		ch.Detail = fmt.Sprintf("Claude Code %s drops %s whole: it names a hook event this release does not know, so none of Ferry's hooks run", c.Version, strings.Join(c.Dropped, ", "))
		ch.Hint = "run `ferry hook claude-code install` again (with the same --scope): it leaves out the events this release does not know"
		return ch
	case len(c.Gaps) > 0:
		ch.Status = Warning
		ch.Detail = fmt.Sprintf("Claude Code %s: %s", c.Version, strings.Join(c.Gaps, "; "))
		ch.Hint = "upgrade Claude Code (`claude update`, or npm install -g @anthropic-ai/claude-code)"
		return ch
	case !installed:
		ch.Detail = fmt.Sprintf("Claude Code %s takes every hook Ferry installs; none are installed here (`ferry hook claude-code install`)", c.Version)
	default:
		ch.Detail = fmt.Sprintf("Claude Code %s takes every hook Ferry installs", c.Version)
	}
	return ch
}

// checkGitHook says whether `git worktree add` makes agents here.
func checkGitHook(h GitHook) Check {
	c := Check{Name: CheckGitHook, Path: h.Path}
	switch {
	case h.Err != nil:
		c.Status, c.Detail, c.Hint = Warning, headline(h.Err), failure.HintOf(h.Err)
	case h.Installed:
		c.Status, c.Detail = OK, "every git worktree add in this repository, by any tool, makes a warm agent"
	default:
		c.Status, c.Detail = Warning, "worktrees made by git worktree add (Codex, Cursor, Conductor, scripts) stay cold unless adopted"
		c.Hint = "ferry hook git install (or run `ferry adopt` in each new worktree)"
	}
	return c
}

// toolchainDir makes a scratch directory holding the rust-toolchain files
// of repo's HEAD as committed (base.ToolchainFiles), where the toolchain
// checks ask the toolchain ferry base would build HEAD with. Never in the
// worktree: in an agent's, a build can write rust-toolchain.toml (whose
// [toolchain] path names a program rustup runs) and .cargo/config.toml
// (an alias named clippy makes `cargo clippy --version` build and run
// anything), and doctor runs outside every sandbox. A repository without
// a commit yet gets an empty directory: the default toolchain.
func toolchainDir(repo *git.Repo) (string, error) {
	dir, err := os.MkdirTemp("", "ferry-doctor-toolchain-")
	if err != nil {
		return "", err
	}
	if repo == nil {
		return dir, nil
	}
	if _, err := repo.ResolveCommit("HEAD"); err != nil {
		return dir, nil
	}
	if err := base.ToolchainFiles(repo, "HEAD", dir); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// checkRemap asks the repository's toolchain whether remap mode pays off
// there (toolchain.ProbeRemap: two tiny compiles from two directories) and
// says what that means for this repository: blocked when remap-paths is on
// and builds run at host paths (ferry base refuses to build), a warning
// when builds run at host paths without it (each agent's first build after
// an edit recompiles more, and remap mode is not there to help), and ok in
// the namespace sandbox, which does not need it.
//
// dir holds the repository's rust-toolchain files (toolchainDir); "" is
// a scratch directory that could not be made.
func checkRemap(dir string, on bool, isolation string) Check {
	c := Check{Name: CheckRemap}
	if dir == "" {
		c.Status, c.Detail = Warning, "could not probe the toolchain: no scratch directory for its files"
		return c
	}
	tc, err := toolchain.Detect(dir, nil)
	if err == nil {
		err = tc.ProbeRemap(dir, nil)
	}
	setting := "off"
	if on {
		setting = "on"
	}
	switch {
	case err == nil:
		c.Status = OK
		c.Detail = fmt.Sprintf("rustc %s keeps its incremental state across worktrees: remap mode ([sandbox] remap-paths, now %s) is available", tc.RustcVersion, setting)
		if on && isolation != IsolationHost {
			c.Detail += ", unused: builds run in the namespace sandbox"
		}
		return c
	case failure.KindOf(err) != failure.Prereq || tc == nil:
		c.Status, c.Detail, c.Hint = Warning, "could not probe the toolchain: "+headline(err), failure.HintOf(err)
		return c
	}
	c.Detail = fmt.Sprintf("remap mode ([sandbox] remap-paths, now %s) is unavailable: it needs Rust %s or later, and %s",
		setting, toolchain.RemapVersion, headline(err))
	c.Hint = failure.HintOf(err)
	switch {
	case isolation != IsolationHost:
		c.Status = OK
		c.Detail += "; not needed: builds run in the namespace sandbox"
	case on:
		c.Status = Blocked
		c.Detail += "; ferry base refuses to build"
	default:
		c.Status = Warning
	}
	return c
}

// checkFreshness reports the freshness mode of the bases ferry base would
// build and, for checksum, whether the toolchain the repository selects
// can do it, asked as ferry base asks (toolchain.ProbeChecksum, in dir, a
// scratch directory holding the repository's rust-toolchain files: see
// toolchainDir). A toolchain that cannot is blocked: ferry base refuses
// it, and its error is the one returned.
func checkFreshness(dir, mode string) (Check, error) {
	c := Check{Name: CheckFreshness, Status: OK}
	if mode != config.FreshnessChecksum {
		c.Detail = `mtime ([base] freshness): Cargo compares mtimes, and stamping makes what an agent did not change look as old as the base; "checksum" needs a nightly toolchain`
		return c, nil
	}
	if dir == "" {
		c.Status, c.Detail = Warning, "could not probe the toolchain: no scratch directory for its files"
		return c, nil
	}
	tc, err := toolchain.Detect(dir, nil)
	if err == nil {
		err = tc.ProbeChecksum(dir, nil)
	}
	if err != nil {
		c.Status, c.Detail, c.Hint = Blocked, headline(err), failure.HintOf(err)
		return c, err
	}
	c.Detail = fmt.Sprintf("checksum ([base] freshness): %s reads the switch; bases and agents get %s",
		tc.Cargo, strings.Join(toolchain.ChecksumEnv(tc.RustcVerbose), " "))
	return c, nil
}

// autoInputs says what auto found in the store: clones, else whether the
// overlay works there and the sandbox it is mounted in.
func autoInputs(have fork.Needs, fs string, overlay Check) string {
	switch {
	case have.Clones:
		return fmt.Sprintf("the store's filesystem (%s) clones files", fs)
	case !have.Overlay:
		return fmt.Sprintf("the store's filesystem (%s) cannot clone files and the overlay is blocked (%s)", fs, overlay.Detail)
	case !have.Sandbox:
		return fmt.Sprintf("the store's filesystem (%s) cannot clone files, and builds run without the namespace sandbox the overlay is mounted in", fs)
	}
	return fmt.Sprintf("the store's filesystem (%s) cannot clone files, and an unprivileged overlay mounts there", fs)
}

// withoutClones words a reflink check that found no clones after the
// backend spawn will use instead (used): what its forks cost, and what
// clones would change. The probe's blocker names only the cause; a store
// without clones costs a full copy per fork only when spawn copies.
func withoutClones(c *Check, used fork.Backend) {
	if used.Needs().Clones {
		return // reflink itself, set and blocked: the check says why
	}
	c.Detail += "; spawn uses backend " + used.Name() + ": " + used.Cost()
	b := *c.Blocker
	b.Problem = fmt.Sprintf("%s Spawn uses backend %s instead: %s. With clones (backend %s), %s.",
		b.Problem, used.Name(), used.Cost(), fork.Reflink().Name(), fork.Reflink().Cost())
	c.Blocker = &b
}

// checkUserns tries the namespace sandbox: the static probe first, whose
// blocker is certain, then a real sandbox, which also meets what the static
// probe cannot see (seccomp, a security module, a spent budget).
func checkUserns(h platform.Host, tmp string) Check {
	c := Check{Name: CheckUserns}
	if b := h.UsernsBlocker(); b != nil {
		c.Status, c.Blocker, c.Detail = Blocked, b, blockedBy(b)
		return c
	}
	err := sandbox.Probe(sandbox.Bind{Source: tmp, Target: tmp})
	if err == nil {
		c.Status = OK
		c.Detail = "a user and mount namespace sandbox was built"
		return c
	}
	c.Status = Blocked
	var se *sandbox.SetupError
	if errors.As(err, &se) && se.Blocker != nil {
		c.Blocker = se.Blocker
		c.Detail = blockedBy(se.Blocker)
		return c
	}
	c.Detail = err.Error()
	c.Hint = failure.HintOf(err)
	return c
}

// sandboxError is the error spawn meets when the sandbox is blocked under
// sandbox mode on, as sandbox.Decide words it.
func sandboxError(userns Check, mode string) error {
	var cause error = errors.New(userns.Detail)
	hint := userns.Hint
	if userns.Blocker != nil {
		cause, hint = userns.Blocker.Opaque(), userns.Blocker.Remedy
	}
	if hint == "" {
		hint = "see the userns check of `ferry doctor`"
	}
	return failure.Wrap(failure.Blocked, cause,
		hint+"\n(or set [sandbox] mode = \"auto\" or \"off\", FERRY_SANDBOX, to build at host paths without the sandbox)",
		"the namespace sandbox is unavailable (sandbox mode %q)", mode)
}

// checkBases verifies every ready base (base.Verify). A changed current
// base is blocked, since spawn refuses it; another changed base is a
// warning, since only a spawn --from its commit would meet it.
func checkBases(s *store.Store) (Check, error) {
	c := Check{Name: CheckBases, Path: s.BasesDir(), Status: OK}
	list, err := base.List(s)
	if err != nil {
		c.Status, c.Detail = Warning, "could not list the bases: "+err.Error()
		return c, nil
	}
	var changed []string
	var first error
	ready := 0
	for _, e := range list {
		if e.Record == nil {
			continue
		}
		ready++
		if err := base.Verify(e.Record); err != nil {
			changed = append(changed, e.ID)
			if first == nil || e.Current {
				first = err
			}
			if e.Current {
				c.Status = Blocked
			}
		}
	}
	switch {
	case len(changed) == 0:
		c.Detail = fmt.Sprintf("%d ready base(s) hold the target they were built with", ready)
		return c, nil
	case c.Status != Blocked:
		c.Status = Warning
	}
	why := headline(first)
	var ce *base.ChangedError
	if errors.As(first, &ce) {
		why = ce.Error()
	}
	c.Detail = fmt.Sprintf("%d of %d ready base(s) changed after they were built: %s", len(changed), ready, why)
	c.Hint = failure.HintOf(first)
	if c.Status == Blocked {
		return c, first
	}
	return c, nil
}

// checkRecords reads the store's records: current, every base's
// base.json and every agent's agent.json. A damaged one is named with its
// fix (failure.DamagedError); it blocks spawn when it is current or the
// current base's, and is a warning otherwise (commands that need another
// record go on, and gc deletes no base while one is damaged).
func checkRecords(s *store.Store) (Check, error) {
	c := Check{Name: CheckRecords, Path: s.Dir, Status: OK}
	var damaged []*failure.DamagedError
	var blocking error
	if _, err := os.Stat(s.Dir); err != nil {
		c.Detail = "no store yet"
		return c, nil
	}
	// store.json: every command that writes the store reads it first.
	n := 1
	if _, err := store.ReadMeta(s); failure.AsDamaged(err) != nil {
		damaged, blocking = append(damaged, failure.AsDamaged(err)), err
	} else if err != nil {
		n--
	}
	cur, err := s.Current()
	if d := failure.AsDamaged(err); d != nil {
		damaged = append(damaged, d)
		if blocking == nil {
			blocking = err
		}
	}
	if _, err := os.Stat(s.CurrentPath()); err == nil {
		n++
	}
	list, err := base.List(s)
	if err != nil {
		c.Status, c.Detail = Warning, "could not list the bases: "+err.Error()
		return c, nil
	}
	for _, e := range list {
		if e.Record != nil {
			n++
		}
		if e.Damaged != nil {
			n++
			damaged = append(damaged, e.Damaged)
			if e.ID == cur && blocking == nil {
				blocking = e.Damaged
			}
		}
	}
	agents, bad, err := agent.Scan(s)
	if err != nil {
		c.Status, c.Detail = Warning, "could not list the agents: "+err.Error()
		return c, nil
	}
	n += len(agents) + len(bad)
	damaged = append(damaged, bad...)
	for _, a := range agents {
		// What ferry why reads of the agent's last build.
		if _, err := demand.ReadLastBuild(s.Agent(a.Name).LastBuild); failure.AsDamaged(err) != nil {
			damaged = append(damaged, failure.AsDamaged(err))
		}
	}
	// The signing key publishing signs bases with, when there is one.
	if _, err := os.Lstat(share.KeyPath(s.Parent)); err == nil {
		n++
		if _, err := share.LoadSigner(s.Parent); failure.AsDamaged(err) != nil {
			damaged = append(damaged, failure.AsDamaged(err))
		}
	}
	// The demand log drops its unreadable lines on its next read: said,
	// as what that read will drop.
	var notes []string
	if l, err := demand.Inspect(s.DemandLog()); err == nil && l.Damaged > 0 {
		notes = append(notes, fmt.Sprintf("%s has %d unreadable line(s), which its next read drops", s.DemandLog(), l.Damaged))
		if c.Status == OK {
			c.Status = Warning
		}
	}
	if len(damaged) == 0 {
		c.Detail = fmt.Sprintf("%d record(s) read", n)
		if len(notes) > 0 {
			c.Detail += "; " + strings.Join(notes, "; ")
		}
		return c, nil
	}
	c.Status = Warning
	if blocking != nil {
		c.Status = Blocked
	}
	names := make([]string, len(damaged))
	for i, d := range damaged {
		names[i] = d.Path
	}
	first := damaged[0]
	if blocking != nil {
		first = failure.AsDamaged(blocking)
	}
	c.Detail = fmt.Sprintf("%d of %d record(s) damaged: %s (%v)", len(damaged), n, strings.Join(names, ", "), first.Err)
	if len(notes) > 0 {
		c.Detail += "; " + strings.Join(notes, "; ")
	}
	var fixes []string
	for _, d := range damaged {
		if h := d.Hint(); !slices.Contains(fixes, h) {
			fixes = append(fixes, h)
		}
	}
	c.Hint = strings.Join(fixes, "\n")
	if blocking != nil {
		return c, blocking
	}
	return c, nil
}

// checkOverlay tries an overlay agent with its layers in dir, as spawn
// would (fork.OverlayBlocker). Without it auto falls back to copy, so a
// blocker is a warning, unless the configured backend needs the overlay.
func checkOverlay(h platform.Host, dir string, needed bool) Check {
	c := Check{Name: CheckOverlay, Path: dir}
	b, err := fork.OverlayBlocker(h, dir)
	switch {
	case err != nil:
		c.Status, c.Detail = Warning, "could not probe: "+err.Error()
	case b == nil:
		fs, _ := platform.FilesystemType(dir)
		c.Status = OK
		c.Detail = "an overlay with userxattr mounts in a user namespace, its upper on " + fs
	default:
		c.Status, c.Blocker = Warning, b
		c.Detail = blockedBy(b)
	}
	if c.Status != OK && needed {
		c.Status = Blocked
	}
	return c
}

// checkRefresh says how a refresh (the base of a new commit, seeded from an
// older base) starts from its seed's target here: base.SeedMethod over this
// host's probes. A copy is a warning: each refresh then costs the target's
// size in time and disk.
func checkRefresh(h platform.Host, dir string, clones, hostPaths, layered bool) Check {
	c := Check{Name: CheckRefresh, Path: dir, Status: OK}
	method, why := base.SeedMethod(base.SeedHost{StoreDir: dir, Clones: clones, HostPaths: hostPaths, Layered: layered,
		OverlayProbe: func() (*platform.Blocker, error) { return h.OverlayBlocker(dir) }})
	switch method {
	case base.SeedByReflink:
		c.Detail = "a refresh clones its seed's target (reflink): its warm commands wait for a clone of every file, and it takes on disk the blocks its build writes"
	case base.SeedByLayer:
		c.Detail = "a refresh builds on an overlay of its seed's target and links the unchanged files in (layered): it costs the change, and takes on disk what its build writes"
	default:
		c.Status = Warning
		c.Detail = "a refresh copies its seed's whole target first, in time and on disk: " + why
		switch {
		case !layered && !hostPaths:
			c.Hint = "set [base] layered = true in ferry.toml"
		case hostPaths:
			c.Hint = "let bases build in the namespace sandbox (see the userns check), or put the store on XFS with reflink=1 or btrfs (FERRY_HOME or [store] dir)"
		default:
			c.Hint = "put the store on XFS with reflink=1 or btrfs (FERRY_HOME or [store] dir), or fix what keeps the overlay from mounting (see the overlay check)"
		}
	}
	return c
}

// checkFilesystem names the store's filesystem.
func checkFilesystem(dir string) Check {
	fs, err := platform.FilesystemType(dir)
	if err != nil {
		return Check{Name: CheckFilesystem, Status: Warning, Path: dir, Detail: err.Error()}
	}
	return Check{Name: CheckFilesystem, Status: OK, Path: dir, Detail: fs}
}

// checkDiskFloor compares the free space on the store's filesystem with
// the free-space floor: under it, spawns, adoptions and base builds are
// refused (a warning: freeing space is the fix, not the host).
func checkDiskFloor(dir string, floor config.Floor) Check {
	c := Check{Name: CheckDiskFloor, Path: dir, Status: OK}
	full := failure.Measure(dir)
	if !full.Measured {
		c.Status, c.Detail = Warning, "cannot measure the free space"
		return c
	}
	least := floor.Of(full.Size)
	c.Detail = fmt.Sprintf("%s free of %s; the floor is %s ([gc] min-free %s)", failure.Bytes(full.Free), failure.Bytes(full.Size), failure.Bytes(least), floor)
	if least > 0 && full.Free < least {
		c.Status = Warning
		c.Detail = "under the floor, spawns and base builds are refused: " + c.Detail
		c.Hint = "free space (`ferry gc` deletes bases nothing uses, `ferry rm NAME` removes an agent you are done with), or lower [gc] min-free (FERRY_MIN_FREE; \"0\" turns the floor off)"
	}
	return c
}

// checkReflink tries a clone in dir, as spawn would (fork.ReflinkBlocker).
// Without one Ferry uses another backend (a warning, which inRepo words
// after the backend spawn will use), unless the configured backend needs
// clones (blocked).
func checkReflink(dir, fs string, needed bool) Check {
	c := Check{Name: CheckReflink, Path: dir}
	b, err := fork.ReflinkBlocker(dir)
	switch {
	case err != nil:
		c.Status, c.Detail = Warning, "could not probe: "+err.Error()
	case b == nil:
		c.Status, c.Detail = OK, fs+" clones files: forks share the base's blocks"
	default:
		c.Status, c.Blocker = Warning, b
		c.Detail = fs + " cannot clone files"
	}
	if c.Status != OK && needed {
		c.Status = Blocked
	}
	return c
}

// headline is an error's own message without its causes when it is a
// *failure.Error, which carries one for users, else its whole text.
func headline(err error) string {
	var fe *failure.Error
	if errors.As(err, &fe) && fe.Msg != "" {
		return fe.Msg
	}
	return err.Error()
}

func blockedBy(b *platform.Blocker) string {
	if b.Value == "" {
		return "blocked by " + b.Setting
	}
	return "blocked by " + b.Setting + " = " + b.Value
}

// existingAncestor returns dir or its nearest existing ancestor, which is on
// the filesystem dir will be created on.
func existingAncestor(dir string) (string, error) {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err == nil {
			if !fi.IsDir() {
				return "", fmt.Errorf("%s is not a directory", d)
			}
			return d, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		if d == filepath.Dir(d) {
			return "", err
		}
	}
}

// checkWorkspace checks that HEAD has a Cargo.toml at the repository root:
// the workspace every base builds (ferry base refuses a commit without).
func checkWorkspace(g *git.Repo) Check {
	c := Check{Name: CheckWorkspace, Path: g.Top, Status: Blocked}
	head, err := g.ResolveCommit("HEAD")
	if err != nil {
		c.Detail = "the repository has no commit yet: a base builds a commit"
		c.Hint = "commit the Cargo workspace (its Cargo.toml at the repository root), then run ferry base"
		return c
	}
	if _, err := g.Run(g.Top, "cat-file", "-e", head+":Cargo.toml"); err != nil {
		c.Detail = fmt.Sprintf("HEAD (%.12s) has no Cargo.toml at the repository root: a base builds the Cargo workspace there", head)
		c.Hint = "add a Cargo.toml at the repository root (a workspace or a package) and commit it; ferry base --rev builds a commit that has one"
		return c
	}
	c.Status = OK
	c.Detail = fmt.Sprintf("HEAD (%.12s) has a Cargo.toml at the repository root", head)
	return c
}
