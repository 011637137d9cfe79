//go:build !linux

package share

import "os"

// startWriteback does nothing where there is no sync_file_range: SyncTree
// writes everything at the end.
func startWriteback(*os.File) {}
