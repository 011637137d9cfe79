package platform

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestFilesystemType(t *testing.T) {
	if got := filesystemName(unix.EXT4_SUPER_MAGIC); got != FSExt4 {
		t.Errorf("ext4 magic: %q", got)
	}
	if got := filesystemName(unix.OVERLAYFS_SUPER_MAGIC); got != FSOverlay {
		t.Errorf("overlay magic: %q", got)
	}
	if got, err := FilesystemType("/proc"); err != nil || got != "0x9fa0" {
		t.Errorf("FilesystemType(/proc) = %q, %v; want the magic of a type without a name here", got, err)
	}
	if _, err := FilesystemType(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing path: %v", err)
	}
	if got, err := FilesystemType(t.TempDir()); err != nil || got == "" {
		t.Errorf("FilesystemType(temp) = %q, %v", got, err)
	} else {
		t.Logf("the temp dir is on %s", got)
	}
	t.Run("xfs", func(t *testing.T) {
		if got, _ := FilesystemType(xfsDir(t)); got != FSXFS {
			t.Errorf("FERRY_TEST_XFS is on %q, want xfs", got)
		}
	})
}
