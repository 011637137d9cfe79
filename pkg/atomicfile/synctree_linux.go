package atomicfile

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// SyncTree makes the files below dir durable before a record promises
// them: on Linux one syncfs of the filesystem holding dir, not an fsync
// per file.
func SyncTree(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
