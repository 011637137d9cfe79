package hook

import (
	"bytes"
	"path/filepath"

	"github.com/ferrydev/ferry/pkg/docedit"
)

// The Codex app's local environments: .codex/environments/environment.toml,
// whose [setup] script (with [setup.linux] and [setup.darwin] overriding it
// on those platforms) runs in each new worktree, and whose [cleanup]
// script runs before Codex deletes one (December 2026).
// https://developers.openai.com/codex/app/local-environments

// ToolCodex is the Codex app (local environments).
const ToolCodex = "codex"

var codex = SetupTool{
	Name:      ToolCodex,
	Help:      "The Codex app's local environment (.codex/environments/environment.toml): setup and cleanup scripts.",
	File:      projectOnly(ToolCodex, "Codex reads .codex/environments/ from the project only", ".codex", "environments", "environment.toml"),
	Edit:      codexEdit,
	Installed: localInstalled(ToolCodex),
}

func codexEdit(path string, o SetupOptions) (*Edit, error) {
	return EditText(path, func(doc []byte, e *Edit) ([]byte, error) {
		if len(bytes.TrimSpace(doc)) == 0 && o.Install {
			doc = []byte("# Codex local environment; Ferry's lines adopt each new worktree (ferry hook codex install)\nversion = 1\nname = " +
				docedit.TOMLBasic(filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(path))))) + "\n")
		}
		keys := []scriptKey{{"setup", "script", false}, {"cleanup", "script", true}}
		for _, platform := range []string{"linux", "darwin"} {
			for _, k := range []scriptKey{{"setup." + platform, "script", false}, {"cleanup." + platform, "script", true}} {
				if _, ok, _ := docedit.TOMLString(doc, k.table, k.key); ok {
					keys = append(keys, k)
				}
			}
		}
		return scriptEdits(doc, e, ToolCodex, o.Ferry, o.Install, keys)
	})
}
