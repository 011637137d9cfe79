package lock

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Inside an agent's sandbox the store is read-only: an existing lock file
// can still be locked (shared, as the shim holds busy.lock), and it is the
// same lock as on the writable side. A missing one cannot be made.
func TestReadOnlyStore(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to bind-mount a directory read-only")
	}
	dir, ro := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "agents", "a1"), 0o755); err != nil {
		t.Fatal(err)
	}
	rw := filepath.Join(dir, "agents", "a1", "busy.lock")
	if err := os.WriteFile(rw, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(dir, ro, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("cannot bind-mount %s: %v", dir, err)
	}
	// Registered after TempDir's removal, so it runs first.
	t.Cleanup(func() {
		if err := unix.Unmount(ro, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", ro, err)
		}
	})
	if err := unix.Mount("", ro, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Skipf("cannot remount %s read-only: %v", ro, err)
	}
	p := filepath.Join(ro, "agents", "a1", "busy.lock")
	if err := unix.Access(filepath.Dir(p), unix.W_OK); err != unix.EROFS {
		t.Fatalf("%s is not read-only: access(W_OK) = %v", ro, err)
	}

	a, err := Shared(p)
	if err != nil {
		t.Fatalf("Shared on a read-only store: %v", err)
	}
	defer a.Release()
	b, err := TryShared(p)
	if err != nil {
		t.Fatalf("TryShared on a read-only store: %v", err)
	}
	defer b.Release()
	if _, err := TryTake(rw); err != ErrBusy {
		t.Fatalf("TryTake on the writable side under the read-only holders = %v, want ErrBusy", err)
	}
	if err := a.WriteOwner(); err == nil {
		t.Error("WriteOwner wrote through a read-only mount")
	}

	for _, missing := range []string{
		filepath.Join(ro, "agents", "a1", "mount.lock"),
		filepath.Join(ro, "agents", "a2", "lock"),
	} {
		if l, err := Shared(missing); !errors.Is(err, unix.EROFS) || !strings.Contains(err.Error(), missing) {
			l.Release()
			t.Errorf("Shared(%s) = %v, want EROFS naming the path", missing, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "agents", "a2")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a directory was made under the read-only mount: %v", err)
	}
}
