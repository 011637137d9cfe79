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
	if shimBin == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		shimBin = filepath.Join(filepath.Dir(self), "ferry-shim")
	}
	if r, err := filepath.EvalSymlinks(shimBin); err == nil {
		shimBin = r
	}
	if fi, err := os.Stat(shimBin); err != nil || !fi.Mode().IsRegular() {
		return failure.New(failure.Prereq, "install Ferry's binaries together (make build puts them all in ./bin)",
			"ferry-shim not found at %s", shimBin)
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
	link := ShimLink(s.Parent)
	if cur, err := os.Readlink(link); err == nil && cur == shimBin {
		return nil
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".cargo.tmp-%d", os.Getpid()))
	os.Remove(tmp)
	if err := os.Symlink(shimBin, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
