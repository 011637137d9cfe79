package hook

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
)

// Git's post-checkout hook makes every `git worktree add` an agent,
// whichever tool runs it. Git runs post-checkout after `git worktree add`
// (and after a clone) with the null object id as the previous HEAD, and
// after every other checkout with a real one; Ferry's hook is a few lines
// of sh that call ferry only in the first case, so a branch switch costs
// one sh start and a `case`. A hook that was there before is kept beside
// it (post-checkout.pre-ferry) and run first with the same arguments; its
// exit status is the hook's. Ferry's part never fails the checkout: what
// went wrong is said on stderr.
//
// The hook goes where git looks for hooks: core.hooksPath when it is set
// to an absolute path (shared tools such as a team's hook directory), else
// the common git dir's hooks/, which every worktree of the repository
// runs. A relative core.hooksPath is each worktree's own checked-out
// directory: a hook put there reaches new worktrees only once committed, so
// Ferry does not write there and says what line to add instead.

// GitHook is the hook Ferry installs.
const GitHook = "post-checkout"

// chainedSuffix names the hook that was there before Ferry's.
const chainedSuffix = ".pre-ferry"

// gitMarker is the line that marks the hook as Ferry's.
const gitMarker = "# ferry: adopts worktrees made by `git worktree add` (ferry hook git install)"

// GitHookScript is Ferry's post-checkout hook, running ferry.
func GitHookScript(ferry string) string {
	return "#!/bin/sh\n" + gitMarker + "\n" +
		"# `ferry hook git uninstall` removes it and puts back a hook that was here (" + GitHook + chainedSuffix + ").\n" +
		"case \"$1\" in\n" +
		"*[!0]*) ;;\n" +
		"*) " + shellWord(ferry) + " hook git " + GitHook + " \"$@\" </dev/null ;;\n" +
		"esac\n" +
		"chained=\"$0" + chainedSuffix + "\"\n" +
		"if [ -x \"$chained\" ]; then exec \"$chained\" \"$@\"; fi\n" +
		"exit 0\n"
}

// GitEdit is what InstallGit or UninstallGit does to a hooks directory.
type GitEdit struct {
	Path    string `json:"path"`    // the hook
	Chained string `json:"chained"` // where the hook that was there is kept, when there was one
	Changed bool   `json:"changed"`
	Action  string `json:"action"` // installed, updated, removed, restored, or none
	Reason  string `json:"reason,omitempty"`
}

// GitHooksDir is the directory git runs repo's hooks from in every
// worktree (see above), refusing a relative core.hooksPath.
func GitHooksDir(repo *git.Repo) (string, error) {
	// Asked of git as configured: Ferry's other git calls run with hooks
	// off (package git), which these two would report instead.
	if p, err := repo.HooksPath(); err == nil {
		if p != "" && !filepath.IsAbs(p) {
			return "", failure.New(failure.Refused,
				fmt.Sprintf("add this line to the %s hook in %s and commit it: [ -z \"${1##*[!0]*}\" ] || ferry hook git %s \"$@\"; or set an absolute core.hooksPath", GitHook, p, GitHook),
				"core.hooksPath is the relative %q: each worktree runs the hooks of its own checkout, so a hook Ferry wrote there would not run in new worktrees", p)
		}
	}
	out, err := repo.HooksDir()
	if err != nil {
		return "", err
	}
	dir := strings.TrimSpace(out)
	if strings.HasPrefix(dir, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(home, dir[2:])
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(repo.Top, dir)
	}
	return filepath.Clean(dir), nil
}

// GitInstalled reports whether Ferry's hook is in dir.
func GitInstalled(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, GitHook))
	return err == nil && isFerrys(data)
}

// isFerrys reports whether the hook file holds Ferry's marker.
func isFerrys(data []byte) bool { return bytes.Contains(data, []byte(gitMarker)) }

// InstallGit puts Ferry's post-checkout hook, running ferry, into dir,
// keeping a hook that was there as post-checkout.pre-ferry. Installing
// again changes nothing; a hook of Ferry's that runs another ferry is
// rewritten. dryRun says what would change and writes nothing.
func InstallGit(dir, ferry string, dryRun bool) (*GitEdit, error) {
	path := filepath.Join(dir, GitHook)
	chained := path + chainedSuffix
	e := &GitEdit{Path: path, Action: "none"}
	want := []byte(GitHookScript(ferry))
	data, err := os.ReadFile(path)
	switch {
	case err == nil && isFerrys(data):
		if bytes.Equal(data, want) {
			e.Reason = "Ferry's hook is installed already"
			if _, err := os.Lstat(chained); err == nil {
				e.Chained = chained
			}
			return e, nil
		}
		e.Action, e.Changed = "updated", true
	case err == nil || isSymlink(path):
		if _, err := os.Lstat(chained); err == nil {
			return nil, failure.New(failure.Refused, fmt.Sprintf("merge or remove one of them, then install again"),
				"both %s (not Ferry's) and %s exist: installing would lose one", path, chained)
		}
		e.Action, e.Changed, e.Chained = "installed", true, chained
	case errors.Is(err, fs.ErrNotExist):
		e.Action, e.Changed = "installed", true
	default:
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if dryRun {
		return e, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if e.Chained != "" && e.Action == "installed" {
		if err := os.Rename(path, chained); err != nil {
			return nil, fmt.Errorf("keep the existing hook as %s: %w", chained, err)
		}
	}
	if err := writeExecutable(path, want); err != nil {
		if e.Chained != "" && e.Action == "installed" {
			os.Rename(chained, path)
		}
		return nil, err
	}
	return e, nil
}

// UninstallGit removes Ferry's post-checkout hook from dir and puts back
// the hook it kept, if any. A hook that is not Ferry's is left alone.
func UninstallGit(dir string, dryRun bool) (*GitEdit, error) {
	path := filepath.Join(dir, GitHook)
	chained := path + chainedSuffix
	e := &GitEdit{Path: path, Action: "none"}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		e.Reason = "no " + GitHook + " hook"
		return e, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if !isFerrys(data) {
		e.Reason = "the " + GitHook + " hook is not Ferry's"
		return e, nil
	}
	e.Changed, e.Action = true, "removed"
	if _, err := os.Lstat(chained); err == nil {
		e.Action, e.Chained = "restored", chained
	}
	if dryRun {
		return e, nil
	}
	if e.Chained != "" {
		return e, os.Rename(chained, path)
	}
	return e, os.Remove(path)
}

func isSymlink(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}

// writeExecutable writes data to path, mode 0755, through a temporary
// file renamed over it, so git never runs half a hook.
func writeExecutable(path string, data []byte) error {
	tmp := path + ".ferry-tmp"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
