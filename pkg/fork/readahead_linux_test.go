package fork

import (
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/ferrydev/ferry/internal/treetest"

	"golang.org/x/sys/unix"
)

func TestReadByNoOpBuild(t *testing.T) {
	for path, want := range map[string]bool{
		"target/.rustc_info.json":                         true,
		"target/debug/.fingerprint/app-0123/lib-app":      true,
		"target/debug/.fingerprint/app-0123/dep-lib-app":  true,
		"target/debug/build/app-0123/output":              true,
		"target/debug/build/app-0123/root-output":         true,
		"target/debug/libapp.d":                           true,
		"target/debug/app.d":                              true,
		"target/debug/examples/demo.d":                    true,
		"target/x86_64-unknown-linux-gnu/debug/libapp.d":  true,
		"target/debug/deps/app-0123.d":                    false,
		"target/debug/deps/libapp-0123.rlib":              false,
		"target/debug/app":                                false,
		"target/debug/incremental/app-1/s-1/query-cache":  false,
		"target/debug/build/app-0123/build-script-build":  false,
		"target/debug/.fingerprint/app-0123":              false,
		"target/debug/build/app-0123/out/generated.rs":    false,
		"target/debug/.fingerprint/app-0123/lib-app.json": true,
	} {
		if got := readByNoOpBuild(path); got != want {
			t.Errorf("readByNoOpBuild(%s) = %v, want %v", path, got, want)
		}
	}
}

// The fork asks the kernel to read ahead what a no-op build reads (the
// fingerprints, a build script's output, the dep-info beside uplifted
// artifacts), so that an agent's first build finds it in memory, while a
// file the build only stats (an rlib) or reads only when it compiles
// (rustc's dep-info in deps/) stays where it is. A clone is a new inode
// with nothing cached: the reflink fork reads its own files ahead. An
// overlay agent reads the base's files: its fork reads those ahead.
func TestForkReadsAheadWhatANoOpBuildReads(t *testing.T) {
	entries := append(treetest.CargoTarget(),
		treetest.E("debug/demo.d", 'f', 0o644, "/src/demo: /src/src/main.rs\n"),
		treetest.E("debug/libdemo.d", 'f', 0o644, "/src/libdemo.rlib: /src/src/lib.rs\n"),
		treetest.E("debug/examples", 'd', 0o755, ""),
		treetest.E("debug/examples/ex.d", 'f', 0o644, "/src/ex: /src/examples/ex.rs\n"),
		treetest.E("x86_64-unknown-linux-gnu", 'd', 0o755, ""),
		treetest.E("x86_64-unknown-linux-gnu/debug", 'd', 0o755, ""),
		treetest.E("x86_64-unknown-linux-gnu/debug/.fingerprint", 'd', 0o755, ""),
		treetest.E("x86_64-unknown-linux-gnu/debug/.fingerprint/demo-99", 'd', 0o755, ""),
		treetest.E("x86_64-unknown-linux-gnu/debug/.fingerprint/demo-99/lib-demo", 'f', 0o644, "fedcba9876543210"),
		treetest.E("x86_64-unknown-linux-gnu/debug/libdemo.d", 'f', 0o644, "/src/libdemo.rlib: /src/src/lib.rs\n"))
	warm := []string{
		".rustc_info.json",
		"debug/.fingerprint/demo-0f1e2d3c4b5a6978/lib-demo",
		"debug/.fingerprint/demo-0f1e2d3c4b5a6978/dep-lib-demo",
		"debug/build/demo-1a2b3c/output",
		"debug/demo.d",
		"debug/libdemo.d",
		"debug/examples/ex.d",
		"x86_64-unknown-linux-gnu/debug/.fingerprint/demo-99/lib-demo",
		"x86_64-unknown-linux-gnu/debug/libdemo.d",
	}
	cold := []string{
		"debug/deps/demo-0f1e2d3c4b5a6978.d",
		"debug/deps/libdemo-0f1e2d3c4b5a6978.rlib",
	}
	t.Run("reflink", func(t *testing.T) {
		xfs, why := treetest.XFSRoot()
		if xfs == "" {
			t.Skip(why)
		}
		base, agent := treetest.Layout(t, treetest.Dir(t, xfs), entries)
		p := Paths{BaseTarget: base, AgentDir: agent}
		if _, err := Reflink().Fork(p); err != nil {
			t.Fatal(err)
		}
		readAhead(t, p.Target(), warm, cold)
	})
	t.Run("overlay", func(t *testing.T) {
		base, agent := treetest.Layout(t, treetest.Dir(t, os.TempDir()), entries)
		p := Paths{BaseTarget: base, AgentDir: agent}
		// Out of memory first, as a base whose pages were reclaimed.
		for _, rel := range append(warm, cold...) {
			if !evict(t, filepath.Join(p.BaseTarget, rel)) {
				t.Skipf("%s: this filesystem keeps its pages (tmpfs?)", rel)
			}
		}
		if _, err := Overlay().Fork(p); err != nil {
			t.Fatal(err)
		}
		readAhead(t, p.BaseTarget, warm, cold)
	})
}

// readAhead checks that the files warm of the tree at root come into
// memory soon (the read-ahead is asynchronous) and those cold do not.
func readAhead(t *testing.T, root string, warm, cold []string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		missing := ""
		for _, rel := range warm {
			if !resident(t, filepath.Join(root, rel)) {
				missing = rel
				break
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not in memory 5 s after the fork", missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, rel := range cold {
		if resident(t, filepath.Join(root, rel)) {
			t.Errorf("%s is in memory: the fork read what a no-op build does not", rel)
		}
	}
}

// evict writes the file at path out and drops its pages (fadvise
// DONTNEED), and reports whether they are gone.
func evict(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	return !resident(t, path)
}

// resident reports whether the first page of the file at path is in the
// page cache (mincore over a mapping of it).
func resident(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, 1, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap %s: %v", path, err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, 1)
	// x/sys/unix has no wrapper for mincore.
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore %s: %v", path, errno)
	}
	return vec[0]&1 != 0
}
