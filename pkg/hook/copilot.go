package hook

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/ferrydev/ferry/pkg/failure"
)

// GitHub's Copilot coding agent works on an Actions runner, in the
// checkout of the repository the job made, after the steps of the job
// copilot-setup-steps in .github/workflows/copilot-setup-steps.yml. That
// job may set only steps, permissions, runs-on, services, snapshot and
// timeout-minutes (at most 59), and nothing outlives the runner but the
// Actions cache. So Ferry's workflow keeps the base there, as a file
// (`ferry base export`) under its cache key (`ferry base key`): a run
// restores the newest base of the key's prefix, imports it (relocated to
// this runner's paths), builds the commit's base (nothing when the key
// matched, a seeded refresh of an older commit's otherwise), adopts the
// checkout in place and puts the shim first on the PATH of the steps
// that follow, the agent's among them; a run that missed the exact key
// exports the new base and saves it under that key.
//
// The file is signed with the key the secret FERRY_SIGNING_KEY holds
// (`ferry key --from`), and an import trusts that key only: without the
// secret the workflow builds the base on every run and saves nothing.
// https://docs.github.com/en/copilot/how-tos/use-copilot-agents/coding-agent/customize-the-agent-environment

// ToolCopilot is GitHub's Copilot coding agent.
const ToolCopilot = "copilot"

// CopilotJob is the job Copilot runs before its agent; CopilotJobKeys are
// the only keys it may set.
const CopilotJob = "copilot-setup-steps"

var CopilotJobKeys = []string{"steps", "permissions", "runs-on", "services", "snapshot", "timeout-minutes"}

// SigningKeySecret is the Actions secret (of the repository, or of its
// copilot environment) that holds the key Ferry's workflow signs and
// trusts bases with.
const SigningKeySecret = "FERRY_SIGNING_KEY"

// copilotMarker is the workflow's first line: how install and uninstall
// tell Ferry's file from one of the repository's own.
const copilotMarker = "# Ferry's Copilot setup (ferry hook copilot install); ferry hook copilot uninstall removes this file."

var copilot = SetupTool{
	Name: ToolCopilot,
	Help: "GitHub's Copilot coding agent (.github/workflows/copilot-setup-steps.yml): the setup job, with the base kept in the Actions cache.",
	InstallHelp: "Write .github/workflows/copilot-setup-steps.yml: install Ferry, restore the newest base from the Actions cache by its key, import or build this commit's base, " +
		"adopt the checkout in place, put the shim on PATH, and save a new base on a miss. Refuses a workflow of the repository's own.",
	UninstallHelp: "Remove Ferry's copilot-setup-steps workflow (never one of the repository's own).",
	File:          projectOnly(ToolCopilot, "Copilot reads .github/workflows/"+CopilotJob+".yml from the repository only", ".github", "workflows", CopilotJob+".yml"),
	Edit: func(path string, o SetupOptions) (*Edit, error) {
		return EditText(path, func(doc []byte, e *Edit) ([]byte, error) { return copilotEdit(doc, e, o.Version, o.Install) })
	},
	Cloud: true,
	Installed: "commit it to the default branch; Copilot runs it before each task: it restores the newest base from the Actions cache, imports it, " +
		"builds this commit's base, adopts the checkout in place and puts the shim on PATH, and saves a new base under its key. Add the secret " +
		SigningKeySecret + " (the file `ferry key` makes, <store parent>/keys/signing.key, or one made for CI) to the repository or its copilot environment: " +
		"without it the base is built on every run",
}

// CopilotFile is the workflow Copilot reads, in project.
func CopilotFile(project string) string {
	return filepath.Join(project, ".github", "workflows", CopilotJob+".yml")
}

// releaseTag is a release's version as make dist names it.
var releaseTag = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`)

// CopilotWorkflow is the workflow, installing Ferry at version (a release
// tag; anything else installs the latest release) where the runner has no
// ferry on its PATH.
func CopilotWorkflow(version string) string {
	if !releaseTag.MatchString(version) {
		version = "latest"
	}
	dir := `$HOME/.cache/ferry-base-file`
	file := dir + `/base.ferrybase`
	// Each step's script runs under bash -e: every line of Ferry's ends in
	// a test or `|| true`, so that a runner Ferry cannot help builds cold
	// rather than losing the steps after it.
	steps := []struct{ name, id, cond, uses, with, run string }{
		{name: "Check out the repository, with the history a seeded refresh reads", uses: "actions/checkout@v5", with: "fetch-depth: 0"},
		{name: "Install Ferry", run: `command -v ferry >/dev/null 2>&1 || { go install github.com/ferrydev/ferry/cmd/...@` + version +
			` && echo "$(go env GOPATH)/bin" >> "$GITHUB_PATH"; } || echo "Ferry is not installed: the agent builds cold"`},
		{name: "Ferry's cache key for this commit's base", id: "ferry-key", run: `if [ -n "$` + SigningKeySecret + `" ] && command -v ferry >/dev/null 2>&1; then
  printf '%s\n' "$` + SigningKeySecret + `" | ferry key --from - >/dev/null
  ferry base key | awk '$1 == "key" || $1 == "prefix" { print $1 "=" $2 }' >> "$GITHUB_OUTPUT"
fi || true`},
		{name: "Restore the newest base of the key", id: "ferry-cache", cond: "steps.ferry-key.outputs.key != ''", uses: "actions/cache/restore@v4",
			with: "path: ~/.cache/ferry-base-file\nkey: ${{ steps.ferry-key.outputs.key }}\nrestore-keys: ${{ steps.ferry-key.outputs.prefix }}"},
		{name: "Import or build the base, make the checkout the agent, put the shim on PATH", run: `if [ -n "$` + SigningKeySecret + `" ] && command -v ferry >/dev/null 2>&1; then
  export FERRY_TRUSTED_KEYS="$(ferry key)"
  if [ -f "` + file + `" ]; then export ` + BaseFileVar + `="` + file + `"; fi
fi || true
` + CloudSetupLine("ferry", ToolCopilot) + `
if [ -f "$HOME/.ferry-env" ]; then (. "$HOME/.ferry-env" && echo "${PATH%%:*}" >> "$GITHUB_PATH") || true; fi`},
		{name: "Export the base for the cache", id: "ferry-export", cond: "steps.ferry-key.outputs.key != '' && steps.ferry-cache.outputs.cache-hit != 'true'",
			run: `mkdir -p "` + dir + `" && ferry base export -o "` + file + `.new" && mv "` + file + `.new" "` + file + `" && echo "file=` + file + `" >> "$GITHUB_OUTPUT" || true`},
		{name: "Save the base under the key", cond: "steps.ferry-export.outputs.file != ''", uses: "actions/cache/save@v4",
			with: "path: ~/.cache/ferry-base-file\nkey: ${{ steps.ferry-key.outputs.key }}"},
	}
	var b strings.Builder
	b.WriteString(copilotMarker + `
# Copilot's runner keeps nothing but the Actions cache: these steps restore
# the newest base saved there, import it (relocated to this runner), build
# this commit's base (nothing, or a seeded refresh of an older commit's),
# make the checkout Copilot works in a Ferry agent, and save a new base
# under its key. Bases are signed and trusted with the key in the secret
# ` + SigningKeySecret + ` (the repository's, or its copilot environment's:
# the file <store parent>/keys/signing.key that ` + "`ferry key`" + ` makes); without
# it the base is built on every run. A step Ferry cannot help in leaves a
# checkout that builds cold.
name: Copilot Setup Steps
"on":
  workflow_dispatch:
  push:
    paths: [.github/workflows/copilot-setup-steps.yml]
  pull_request:
    paths: [.github/workflows/copilot-setup-steps.yml]
jobs:
  ` + CopilotJob + `:
    runs-on: ubuntu-latest
    timeout-minutes: 59
    permissions:
      contents: read
    steps:
`)
	for _, s := range steps {
		b.WriteString("      - name: " + s.name + "\n")
		if s.id != "" {
			b.WriteString("        id: " + s.id + "\n")
		}
		if s.cond != "" {
			b.WriteString("        if: " + s.cond + "\n")
		}
		if s.uses != "" {
			b.WriteString("        uses: " + s.uses + "\n")
		}
		if s.with != "" {
			b.WriteString("        with:\n")
			for _, l := range strings.Split(s.with, "\n") {
				b.WriteString("          " + l + "\n")
			}
		}
		if s.run != "" {
			if strings.Contains(s.run, SigningKeySecret) {
				b.WriteString("        env:\n          " + SigningKeySecret + ": ${{ secrets." + SigningKeySecret + " }}\n")
			}
			b.WriteString("        run: |\n")
			for _, l := range strings.Split(s.run, "\n") {
				b.WriteString("          " + l + "\n")
			}
		}
	}
	return b.String()
}

// copilotEdit writes Ferry's workflow (install) or removes it, refusing to
// touch a workflow that is not Ferry's.
func copilotEdit(doc []byte, e *Edit, version string, install bool) ([]byte, error) {
	ours := bytes.HasPrefix(doc, []byte(copilotMarker+"\n"))
	switch {
	case len(doc) == 0 && !install:
		return doc, nil
	case len(doc) == 0:
		note(e, true, false, CopilotJob)
		return []byte(CopilotWorkflow(version)), nil
	case !ours && install:
		return nil, failure.New(failure.Refused,
			"move it aside, run this again, and carry its steps over into Ferry's file (they are plain Actions steps; keep the job's name)",
			"%s is the repository's own workflow, not Ferry's; Ferry does not change it", e.Path)
	case !ours:
		return doc, nil
	case !install:
		e.remove = true
		note(e, false, true, CopilotJob)
		return nil, nil
	}
	out := []byte(CopilotWorkflow(version))
	if !bytes.Equal(out, doc) {
		note(e, true, true, CopilotJob)
	}
	return out, nil
}
