package hook

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/docedit"
	"github.com/ferrydev/ferry/pkg/failure"
)

// Conductor reads .conductor/settings.toml (the project's, committed),
// .conductor/settings.local.toml (this checkout's) or
// ~/.conductor/settings.toml (the user's): [scripts] setup and archive,
// strings zsh runs in the workspace (CONDUCTOR_WORKSPACE_PATH,
// CONDUCTOR_ROOT_PATH). The older conductor.json ({"scripts": {"setup",
// "archive"}}) is read only where no .conductor/settings.toml exists
// (December 2026).
// https://www.conductor.build/docs/reference/scripts,
// https://www.conductor.build/docs/reference/conductor-json

// ToolConductor is Conductor.
const ToolConductor = "conductor"

var conductor = SetupTool{
	Name:      ToolConductor,
	Help:      "Conductor's workspace scripts (.conductor/settings.toml, or conductor.json where that is all there is): setup and archive.",
	File:      conductorFile,
	Edit:      conductorEdit,
	Installed: localInstalled(ToolConductor),
}

func conductorFile(scope, project, home string) (string, error) {
	switch scope {
	case ScopeProject:
		toml := filepath.Join(project, ".conductor", "settings.toml")
		legacy := filepath.Join(project, "conductor.json")
		if _, err := os.Stat(toml); errors.Is(err, fs.ErrNotExist) {
			if _, err := os.Stat(legacy); err == nil {
				return legacy, nil
			}
		}
		return toml, nil
	case ScopeLocal:
		return filepath.Join(project, ".conductor", "settings.local.toml"), nil
	case ScopeUser:
		return filepath.Join(home, ".conductor", "settings.toml"), nil
	}
	return "", failure.New(failure.Usage, "use --scope "+ScopeProject+", "+ScopeLocal+" or "+ScopeUser, "%s has no %s scope", ToolConductor, scope)
}

func conductorEdit(path string, o SetupOptions) (*Edit, error) {
	if filepath.Base(path) == "conductor.json" {
		return EditJSON(path, func(d *docedit.Doc, e *Edit) error { return conductorJSONEdit(d, e, o.Ferry, o.Install) })
	}
	return EditText(path, func(doc []byte, e *Edit) ([]byte, error) {
		return scriptEdits(doc, e, ToolConductor, o.Ferry, o.Install, []scriptKey{{"scripts", "setup", false}, {"scripts", "archive", true}})
	})
}

// conductorJSONEdit edits the older conductor.json: scripts.setup and
// scripts.archive are strings.
func conductorJSONEdit(d *docedit.Doc, e *Edit, ferry string, install bool) error {
	scripts := d.Root().Get("scripts")
	if scripts == nil {
		if !install {
			return nil
		}
		scripts = docedit.Object()
		d.Root().Add("scripts", scripts)
	}
	if !scripts.IsObject() {
		return notEditable(e.Path, `"scripts" is not an object`)
	}
	for _, k := range []struct {
		key  string
		line string
	}{{"setup", SetupLine(ferry, ToolConductor)}, {"archive", TeardownLine(ferry)}} {
		v := scripts.Get(k.key)
		old := ""
		if v != nil {
			s, ok := v.Str()
			if !ok {
				return notEditable(e.Path, "scripts."+k.key+" is not a string")
			}
			old = s
		} else if !install {
			continue
		}
		want := without(old, ToolConductor)
		if install {
			want = withLine(old, k.line, ToolConductor)
		}
		want = strings.TrimSuffix(want, "\n")
		if v != nil && want == strings.TrimSuffix(old, "\n") {
			continue
		}
		if v == nil {
			scripts.Add(k.key, docedit.String(want))
		} else {
			v.SetString(want)
		}
		note(e, install, v != nil, "scripts."+k.key)
	}
	return nil
}
