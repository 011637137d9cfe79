package fork

import "github.com/ferrydev/ferry/pkg/platform"

// fsName names the filesystem dir is on, for test messages.
func fsName(dir string) string {
	fs, err := platform.FilesystemType(dir)
	if err != nil {
		return "unknown filesystem"
	}
	return fs
}
