package share

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncfs makes the pulled base's writes durable before base.json promises
// a complete target (one syncfs of the filesystem, not an fsync per file).
func syncfs(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}
