package failure

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
)

func TestBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 600 << 10: "600 KiB", 64 << 20: "64 MiB", 3 << 29: "1.5 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// ENOSPC anywhere in a chain, joined or wrapped, is kind NoSpace, whatever
// the *Error around it says; the path comes from the innermost path error
// about it, or from the outermost NoSpaceAt mark.
func TestNoSpace(t *testing.T) {
	dir := t.TempDir()
	pe := &os.PathError{Op: "write", Path: dir + "/a/b", Err: syscall.ENOSPC}
	err := Wrap(BuildFailed, fmt.Errorf("copy: %w", pe), "look in a checkout", "build failed")
	if KindOf(err) != NoSpace || KindOf(err).ExitCode() != 8 || KindOf(err).String() != "no-space" {
		t.Fatalf("kind %v", KindOf(err))
	}
	full, ok := Space(err)
	if !ok || full.Path != pe.Path || !full.Measured || full.Size == 0 || full.MountPoint == "" {
		t.Fatalf("Space = %+v, %v", full, ok)
	}
	joined := errors.Join(errors.New("other"), &os.PathError{Op: "open", Path: "/elsewhere", Err: syscall.ENOENT}, err)
	if full, ok := Space(joined); !ok || full.Path != pe.Path {
		t.Fatalf("joined: Space = %+v, %v", full, ok)
	}
	marked := NoSpaceAt("/", NoSpaceAt(dir, fmt.Errorf("copy_file_range: %w", syscall.ENOSPC)))
	if full, _ := Space(marked); full.Path != "/" || marked.Error() != "copy_file_range: no space left on device" {
		t.Fatalf("marked: Space = %+v; text %q", full, marked.Error())
	}
	if seen := NoSpaceSeen(dir, 0, syscall.ENOSPC); !errors.Is(seen, syscall.ENOSPC) {
		t.Fatal("NoSpaceSeen lost the cause")
	} else if full, _ := Space(seen); full.Free != 0 || full.String() == "" {
		t.Fatalf("NoSpaceSeen: %+v", full)
	}
	if _, ok := Space(fmt.Errorf("x: %w", syscall.ENOENT)); ok || KindOf(syscall.ENOENT) != Internal {
		t.Fatal("ENOENT taken for a full filesystem")
	}
	if got := NoSpaceAt(dir, syscall.EIO); got != syscall.EIO {
		t.Fatalf("NoSpaceAt changed another error: %v", got)
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/mnt/a\040b\134c`); got != `/mnt/a b\c` {
		t.Fatalf("%q", got)
	}
}

// Without a path, the description adds nothing to the errno text.
func TestSpaceWithoutPath(t *testing.T) {
	full, ok := Space(fmt.Errorf("copy: %w", syscall.ENOSPC))
	if !ok || full.String() != "no space left on device" || full.Hint() == "" {
		t.Fatalf("%+v %v: %q %q", full, ok, full.String(), full.Hint())
	}
}
