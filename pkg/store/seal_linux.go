package store

import "golang.org/x/sys/unix"

// readOnlyMount reports whether dir is on a read-only mount.
func readOnlyMount(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_RDONLY != 0
}

// masked reports whether the secrets of the store parent are covered, as
// a sandbox covers them (each a mount of its own): what tells a sealed
// store from one on a read-only filesystem.
func masked(parent string) bool {
	var p unix.Stat_t
	if unix.Stat(parent, &p) != nil {
		return false
	}
	for _, d := range Secrets(parent) {
		var st unix.Stat_t
		if unix.Stat(d, &st) == nil && st.Dev != p.Dev {
			return true
		}
	}
	return false
}
