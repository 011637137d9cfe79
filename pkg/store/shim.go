package store

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ferrydev/ferry/pkg/failure"
)

// InstallShim makes <store parent>/bin/cargo a link to the ferry-shim
// binary installed beside the running executable (or named by shimBin).
// It replaces the link atomically, so a concurrent cargo call never finds
// it missing, and refuses a store others could change (CheckOwner).
func (s *Store) InstallShim(shimBin string) error {
	return s.install("ferry-shim", shimBin, ShimLink(s.Parent))
}

// InstallRemapWrapper makes <store parent>/bin/ferry-rustc (RemapWrapper)
// a link to the ferry-rustc binary beside the running executable (or named
// by rustcBin), as InstallShim does for the shim: remap mode's builds run
// rustc through it.
func (s *Store) InstallRemapWrapper(rustcBin string) error {
	return s.install("ferry-rustc", rustcBin, s.RemapWrapper())
}

// install links link, in the shim's directory, to bin: Ferry's binary
// name, installed beside the running executable when bin is "".
func (s *Store) install(name, bin, link string) error {
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		bin = filepath.Join(filepath.Dir(self), name)
	}
	if r, err := filepath.EvalSymlinks(bin); err == nil {
		bin = r
	}
	if fi, err := os.Stat(bin); err != nil || !fi.Mode().IsRegular() {
		return failure.New(failure.Prereq, "install Ferry's binaries together (make build puts them all in ./bin)",
			"%s not found at %s", name, bin)
	}
	// The link goes into the user's PATH: refuse a bin/ someone else could
	// change, before writing and again once it exists.
	if err := s.CheckOwner(); err != nil {
		return err
	}
	dir := s.ShimDir()
	if err := MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := CheckOwned(RoleShim, dir); err != nil {
		return err
	}
	if cur, err := os.Readlink(link); err == nil && cur == bin {
		return nil
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.tmp-%d", filepath.Base(link), os.Getpid()))
	os.Remove(tmp)
	if err := os.Symlink(bin, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
