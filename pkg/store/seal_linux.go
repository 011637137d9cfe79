package store

import "golang.org/x/sys/unix"

// readOnlyMount reports whether dir is on a read-only mount.
func readOnlyMount(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_RDONLY != 0
}
