// Package atomicfile writes state files so that a reader sees the old content
// or the new, never a torn mix, even across a crash.
//
// Every state file Ferry writes (base.json, agent.json, current, bus.json)
// goes through WriteFile: write a temporary file in the same directory, fsync
// it, rename it over the target, fsync the directory. After a crash the target
// is either absent, the old file, or the complete new one; a leftover
// temporary file is named ".<name>.tmp-*" and is never read.
package atomicfile

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ferrydev/ferry/pkg/failure"
)

// WriteFile atomically replaces path with data, created with perm.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return replace(path, data, perm, true)
}

// replace writes data to a temporary file beside path and renames it over
// path; durable makes it fsync the file before and the directory after.
func replace(path string, data []byte, perm os.FileMode, durable bool) (err error) {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if durable {
		if err = f.Sync(); err != nil {
			return fmt.Errorf("write %s: fsync: %w", path, err)
		}
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if !durable {
		return nil
	}
	return SyncDir(dir)
}

// ReplaceJSON replaces path with v encoded as indented JSON, atomically for
// readers (a temporary file renamed over it) but without fsync: for files
// that describe live state which a crash ends anyway (an overlay agent's
// ns.json names a namespace no reboot keeps), written on a per-call path
// where an fsync could wait for the whole filesystem's journal.
func ReplaceJSON(path string, v any, perm os.FileMode) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return replace(path, append(data, '\n'), perm, false)
}

// WriteJSON atomically replaces path with v encoded as indented JSON.
func WriteJSON(path string, v any, perm os.FileMode) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return WriteFile(path, append(data, '\n'), perm)
}

// ReadJSON decodes the JSON file at path into v. Unknown fields are ignored,
// so an older Ferry can read a newer file's known fields. A file that is
// not one JSON value of v's shape (truncated, empty, overwritten) is a
// *failure.DamagedError: WriteFile never leaves one so, so something else
// changed it. The caller adds the fix it knows.
func ReadJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return failure.Damaged(path, err, "")
	}
	return nil
}

// SyncDir fsyncs a directory so that a rename or removal in it is durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
