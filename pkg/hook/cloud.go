package hook

import (
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/docedit"
)

// Cloud agents run in a fresh container, on the checkout their tool made
// there, and keep what their setup left: Codex cloud caches the container
// after its setup script (and runs a maintenance script when it resumes
// one), Cursor's cloud agents snapshot the disk after the environment's
// install command. So the tool's own snapshot carries the base: the setup
// builds it once (`ferry base`, or imports the file FERRY_BASE_FILE names,
// exported by a build host), makes the checkout its agent (`ferry adopt
// --in-place`), and writes `ferry env` where the agent's shells read it,
// so that cargo there is Ferry's shim. On resume the maintenance builds the
// base of the commit now checked out, a seeded refresh of the cached one,
// and forks it afresh.
//
// The files, as the tools document them (December 2026):
//
//   - Codex cloud: the environment's setup script and maintenance script,
//     typed into its settings page; there is no file in the repository,
//     so `ferry hook codex-cloud print` prints both.
//     https://developers.openai.com/codex/cloud/environments
//   - Cursor's cloud agents: .cursor/environment.json, whose "install"
//     command runs in the checkout before the disk is snapshotted.
//     https://cursor.com/docs/background-agent

// The cloud tools.
const (
	ToolCodexCloud  = "codex-cloud"
	ToolCursorCloud = "cursor-cloud"
)

// BaseFileVar names the base file a cloud agent's setup imports, where
// the environment sets it.
const BaseFileVar = "FERRY_BASE_FILE"

// CloudSetupLine is the line a cloud agent's setup runs in its checkout:
// the base (imported from $FERRY_BASE_FILE when set, else built), the
// checkout adopted in place, and `ferry env` made the shells' own. It runs
// ferry only where it is installed and never fails the setup: a checkout
// Ferry cannot make warm builds cold.
func CloudSetupLine(ferry, tool string) string {
	f := shellWord(ferry)
	return "if command -v " + f + " >/dev/null 2>&1; then " +
		"{ if [ -n \"${" + BaseFileVar + ":-}\" ]; then " + f + " base import \"$" + BaseFileVar + "\"; fi; " + f + " base; } || true; " +
		f + " adopt --cold-ok --tool " + tool + " --in-place && " + f + " env > \"$HOME/.ferry-env\" && " +
		"{ grep -qs '.ferry-env' \"$HOME/.bashrc\" || echo '. \"$HOME/.ferry-env\"' >> \"$HOME/.bashrc\"; } || true; fi"
}

// CloudResumeLine is the line a resumed container runs (Codex's
// maintenance script): the commit checked out now gets its base, a seeded
// refresh of the cached one, and the checkout a fresh fork of it.
func CloudResumeLine(ferry, tool string) string {
	f := shellWord(ferry)
	return "if command -v " + f + " >/dev/null 2>&1; then " + f + " base || true; " + f + " rm --if-agent >/dev/null 2>&1 || true; " +
		f + " adopt --cold-ok --tool " + tool + " --in-place || true; fi"
}

// CloudScripts are the scripts `ferry hook codex-cloud print` prints.
type CloudScripts struct {
	Tool        string `json:"tool"`
	Setup       string `json:"setup"`
	Maintenance string `json:"maintenance"`
}

// CodexCloudScripts are Codex cloud's setup and maintenance scripts,
// running ferry.
func CodexCloudScripts(ferry string) CloudScripts {
	return CloudScripts{Tool: ToolCodexCloud, Setup: CloudSetupLine(ferry, ToolCodexCloud) + "\n",
		Maintenance: CloudResumeLine(ferry, ToolCodexCloud) + "\n"}
}

var cursorCloud = SetupTool{
	Name:          ToolCursorCloud,
	Help:          "Cursor's cloud agents (.cursor/environment.json): a line in the install command that imports or builds the base and adopts the checkout in place.",
	InstallHelp:   "Add Ferry's setup line to .cursor/environment.json's install command, keeping every other byte.",
	UninstallHelp: "Take Ferry's line out of .cursor/environment.json's install command, keeping every other byte.",
	File:          projectOnly(ToolCursorCloud, "Cursor's cloud agents read .cursor/environment.json from the project only", ".cursor", "environment.json"),
	Edit: func(path string, o SetupOptions) (*Edit, error) {
		return EditJSON(path, func(d *docedit.Doc, e *Edit) error { return cursorCloudEdit(d, e, o.Ferry, o.Install) })
	},
	Cloud: true,
	Installed: "each cloud agent's container runs it after checkout: it imports the base $" + BaseFileVar + " names (exported by a build host, its key in FERRY_TRUSTED_KEYS) " +
		"or builds it, adopts the checkout in place and puts the shim on the shells' PATH; the image needs ferry on its PATH",
}

// CursorCloudFile is the file Cursor's cloud agents read, in project.
func CursorCloudFile(project string) string {
	return filepath.Join(project, ".cursor", "environment.json")
}

// cursorCloudEdit merges Ferry's setup line into the "install" command of
// .cursor/environment.json (InstallSetup), or takes it out, keeping every
// other byte.
func cursorCloudEdit(d *docedit.Doc, e *Edit, ferry string, install bool) error {
	v := d.Root().Get("install")
	old := ""
	if v != nil {
		s, ok := v.Str()
		if !ok {
			return notEditable(e.Path, `"install" is not a command string`)
		}
		old = s
	} else if !install {
		return nil
	}
	want := strings.TrimSuffix(without(old, ToolCursorCloud), "\n")
	if install {
		want = strings.TrimSuffix(withLine(old, CloudSetupLine(ferry, ToolCursorCloud), ToolCursorCloud), "\n")
	}
	switch {
	case v != nil && want == strings.TrimSuffix(old, "\n"):
		return nil
	case v == nil:
		d.Root().Add("install", docedit.String(want))
	case want == "":
		d.Root().RemoveKey("install")
	default:
		v.SetString(want)
	}
	note(e, install, v != nil, "install")
	return nil
}
