package hook

import (
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/failure"
)

// SetupTool is an agent tool Ferry serves through one of the tool's own
// files: a setup script it runs in each worktree it makes (Codex, Cursor,
// Conductor), or the setup of a cloud agent's container (Cursor's cloud
// agents, Copilot). Each is described in a file of its own (codex.go,
// cursor.go, conductor.go, cloud.go, copilot.go) and listed in setupTools;
// `ferry hook NAME install|uninstall [--scope S] [--dry-run] [--json]`,
// its help, its completion and the docs test's list come from the list.
// Claude Code (claude.go) and git (git.go), whose hooks are commands Ferry
// answers, and Codex cloud, whose scripts live in a settings page (`ferry
// hook codex-cloud print`), have commands of their own.
type SetupTool struct {
	Name string
	// Help is the line `ferry hook --help` shows for it; InstallHelp and
	// UninstallHelp, for its two commands (a local tool's, when empty).
	Help, InstallHelp, UninstallHelp string
	// File is its file for scope under the repository's top (project) or
	// the user's home; a scope it does not read is a usage error.
	File func(scope, project, home string) (string, error)
	// Edit puts Ferry's lines in the file at path (o.Install) or takes
	// them out, keeping what is not Ferry's.
	Edit func(path string, o SetupOptions) (*Edit, error)
	// Cloud tools run their lines in a container, with the ferry on its
	// PATH rather than this host's.
	Cloud bool
	// Installed is what a person is told once the file is written.
	Installed string
}

// SetupOptions are what an edit of a tool's file runs.
type SetupOptions struct {
	Install bool
	Ferry   string // the ferry the lines run
	Version string // this Ferry's version, for a tool that installs Ferry itself
}

// The help of a local tool's commands.
const (
	localInstallHelp   = "Add a setup line that adopts each new worktree (ferry adopt --cold-ok) and, where the tool has a teardown, one that releases its agent."
	localUninstallHelp = "Take Ferry's lines out of the tool's setup file, keeping everything else."
)

// CommandHelp is the help of t's install (or uninstall) command.
func (t *SetupTool) CommandHelp(install bool) string {
	switch {
	case install && t.InstallHelp != "":
		return t.InstallHelp
	case install:
		return localInstallHelp
	case t.UninstallHelp != "":
		return t.UninstallHelp
	}
	return localUninstallHelp
}

// setupTools are the tools, in the order help names them.
var setupTools = []*SetupTool{&codex, &cursor, &conductor, &cursorCloud, &copilot}

// SetupTools names them, and Codex cloud (whose scripts are printed, not
// installed), in the order help names them.
func SetupTools() []string {
	names := []string{}
	for _, t := range setupTools {
		names = append(names, t.Name)
	}
	return append(names, ToolCodexCloud)
}

// Installers are the tools `ferry hook NAME install|uninstall` edits a
// file for.
func Installers() []*SetupTool { return setupTools }

// LookupSetup finds the tool named name.
func LookupSetup(name string) (*SetupTool, error) {
	for _, t := range setupTools {
		if t.Name == name {
			return t, nil
		}
	}
	if name == ToolCodexCloud {
		return nil, failure.New(failure.Usage, "run `ferry hook codex-cloud print` and paste its scripts into the environment's settings",
			"Codex cloud keeps its setup in the environment's settings, not in a file Ferry can edit")
	}
	return nil, failure.New(failure.Usage, "name one of: claude-code, git, "+strings.Join(SetupTools(), ", "),
		"unknown agent tool %q", name)
}

// RegisterForTest adds t to the tools until the returned function runs:
// how a test follows docs/internals.md's steps for adding a tool.
func RegisterForTest(t *SetupTool) (unregister func()) {
	setupTools = append(setupTools, t)
	return func() { setupTools = setupTools[:len(setupTools)-1] }
}

// SetupFile is the file tool's installer edits for scope, under project
// (the repository's top) or home.
func SetupFile(tool, scope, project, home string) (string, error) {
	t, err := LookupSetup(tool)
	if err != nil {
		return "", err
	}
	return t.File(scope, project, home)
}

// InstallSetup merges tool's lines, running o.Ferry, into path
// (SetupFile).
func InstallSetup(tool, path string, o SetupOptions) (*Edit, error) {
	t, err := LookupSetup(tool)
	if err != nil {
		return nil, err
	}
	o.Install = true
	return t.Edit(path, o)
}

// UninstallSetup takes Ferry's lines for tool out of path.
func UninstallSetup(tool, path string) (*Edit, error) {
	t, err := LookupSetup(tool)
	if err != nil {
		return nil, err
	}
	return t.Edit(path, SetupOptions{})
}

// projectOnly is File for a tool that reads one file, rel under the
// repository's top.
func projectOnly(tool, why string, rel ...string) func(scope, project, home string) (string, error) {
	return func(scope, project, _ string) (string, error) {
		if scope != ScopeProject {
			return "", failure.New(failure.Usage, "use --scope "+ScopeProject+" ("+why+")", "%s has no %s scope", tool, scope)
		}
		return filepath.Join(append([]string{project}, rel...)...), nil
	}
}
