package hook

import (
	"fmt"

	"github.com/ferrydev/ferry/pkg/docedit"
	"github.com/ferrydev/ferry/pkg/failure"
)

// Cursor reads .cursor/worktrees.json at the project's root when it (the
// Agents Window, the editor, the CLI) creates a worktree; its commands run
// in the new worktree, with ROOT_WORKTREE_PATH naming the project's root.
// The keys are setup-worktree-unix (macOS and Linux) over setup-worktree
// (every platform); a value is an array of commands or a string naming a
// script file. It has no teardown (December 2026).
// https://cursor.com/docs/configuration/worktrees

// ToolCursor is Cursor (Agents Window, editor and CLI worktrees).
const ToolCursor = "cursor"

var cursor = SetupTool{
	Name: ToolCursor,
	Help: "Cursor's worktree setup (.cursor/worktrees.json): Agents Window, editor and CLI worktrees.",
	File: projectOnly(ToolCursor, "Cursor reads .cursor/worktrees.json from the project only", ".cursor", "worktrees.json"),
	Edit: func(path string, o SetupOptions) (*Edit, error) {
		return EditJSON(path, func(d *docedit.Doc, e *Edit) error { return cursorEdit(d, e, o.Ferry, o.Install) })
	},
	Installed: localInstalled(ToolCursor),
}

// cursorEdit puts Ferry's setup line in the commands Cursor runs on this
// platform: setup-worktree-unix when the file has it, else setup-worktree.
func cursorEdit(d *docedit.Doc, e *Edit, ferry string, install bool) error {
	keys := []string{"setup-worktree-unix", "setup-worktree"}
	if !install {
		for _, k := range keys {
			list := d.Root().Get(k)
			if list == nil || !list.IsArray() {
				continue
			}
			removed := false
			for i := list.Len() - 1; i >= 0; i-- {
				if s, ok := list.At(i).Str(); ok && ourLine(s, ToolCursor) {
					list.Remove(i)
					removed = true
				}
			}
			if removed {
				if list.Len() == 0 {
					d.Root().RemoveKey(k)
				}
				e.Removed = append(e.Removed, k)
			}
		}
		return nil
	}
	key := keys[1]
	if d.Root().Get(keys[0]) != nil {
		key = keys[0]
	}
	line := SetupLine(ferry, ToolCursor)
	list := d.Root().Get(key)
	switch {
	case list == nil:
		d.Root().Add(key, docedit.Array(docedit.String(line)))
		e.Added = append(e.Added, key)
		return nil
	case list.IsString():
		script, _ := list.Str()
		return failure.New(failure.Refused,
			fmt.Sprintf("add this line to the script %s names (%s): %s", key, script, line),
			"%s: %s names a script file, which Ferry does not edit", e.Path, key)
	case !list.IsArray():
		return notEditable(e.Path, key+" is neither a list of commands nor a script path")
	}
	for i := range list.Len() {
		m := list.At(i)
		if s, ok := m.Str(); ok && ourLine(s, ToolCursor) {
			if s == line {
				return nil
			}
			m.SetString(line)
			e.Updated = append(e.Updated, key)
			return nil
		}
	}
	list.Push(docedit.String(line))
	e.Updated = append(e.Updated, key)
	return nil
}
