package base

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/failure"
)

// noSpace returns the error of a warm command that failed because the
// target's filesystem ran full, or nil. Cargo reports ENOSPC only in its
// output, and not always in words: lld writes its output through mmap, so
// on a full filesystem it dies of SIGBUS ("ld terminated with signal 7
// [Bus error]"), and it frees what it wrote as it dies, so a statfs after
// the failure can find room again. Three signs count: a line saying "No
// space left on device"; the target's filesystem seen (nearly) full while
// the command ran; and a line reporting SIGBUS while that filesystem was
// seen with less than busBelow free. The error carries ENOSPC, the target,
// and the least free space seen, so the printer names the filesystem and
// its free space as the failure left it, not as it is after cargo and the
// discarded base freed some.
func noSpace(r *Record, command string, code int, signs spaceSigns) error {
	if !signs.full() {
		return nil
	}
	cause := error(syscall.ENOSPC)
	if said := signs.said; said != "" || signs.bus != "" {
		if said == "" {
			said = signs.bus
		}
		cause = fmt.Errorf("it said %q: %w", said, syscall.ENOSPC)
	}
	err := failure.Wrap(failure.NoSpace, &WarmError{Command: command, ExitCode: code, Err: cause}, "the previous current base is unchanged",
		"warm command %q ran out of space", command)
	if signs.watched {
		return failure.NoSpaceSeen(r.Target, signs.least, err)
	}
	return failure.NoSpaceAt(r.Target, err)
}

// spaceSigns is what a failed warm command left as evidence of a full
// filesystem.
type spaceSigns struct {
	said    string // the last line of its output reporting ENOSPC
	bus     string // the last line of its output reporting SIGBUS
	least   uint64 // the least free space seen on the target's filesystem
	watched bool   // least was measured
}

// fullBelow is the free space under which the target's filesystem counts
// as full: less than most crates' rlibs, and more than the few blocks a
// filesystem can have left when it refuses a write larger than them.
const fullBelow = 1 << 20

// busBelow is the free space under which a SIGBUS counts as the filesystem
// running full: sampling misses the moment lld fills it (measured on a 24
// MiB tmpfs: 3 MiB seen free while the linker died filling it), so the bound
// is loose, but a linker dying of SIGBUS with a gigabyte free has another
// cause.
const busBelow = 1 << 30

func (s spaceSigns) full() bool {
	return s.said != "" || (s.watched && (s.least < fullBelow || (s.bus != "" && s.least < busBelow)))
}

// freeInterval is how often watchFree samples: a statfs costs about a
// microsecond. A filesystem a build fills can be full for less than this
// (a linker frees what it wrote as it dies), which busBelow allows for.
const freeInterval = 10 * time.Millisecond

// watchFree samples the free space of the filesystem holding dir until the
// returned stop is called, which returns the least seen and whether
// anything was measured. Free is what this process may write: root may use
// the blocks a filesystem keeps back, so a build as root is not out of
// space when only those are left.
func watchFree(dir string) (stop func() (uint64, bool)) {
	var (
		mu    sync.Mutex
		least uint64
		seen  bool
	)
	root := os.Geteuid() == 0
	sample := func() {
		var st unix.Statfs_t
		if unix.Statfs(dir, &st) != nil {
			return
		}
		free := st.Bavail * uint64(st.Bsize)
		if root {
			free = st.Bfree * uint64(st.Bsize)
		}
		mu.Lock()
		if !seen || free < least {
			least, seen = free, true
		}
		mu.Unlock()
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(freeInterval)
		defer t.Stop()
		for {
			sample()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() (uint64, bool) {
		close(done)
		<-finished
		sample()
		mu.Lock()
		defer mu.Unlock()
		return least, seen
	}
}

// outputTail passes a warm command's output on and keeps its last tailSize
// bytes, where Cargo's report of the error that stopped the build is.
type outputTail struct {
	w   io.Writer
	mu  sync.Mutex
	buf []byte
}

// tailSize covers the end of a failed build's output: the error, and the
// warnings and "could not compile" lines other jobs print after it.
const tailSize = 64 << 10

func (t *outputTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*tailSize {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-tailSize:]...)
	}
	t.mu.Unlock()
	return t.w.Write(p)
}

// What Rust programs (cargo, rustc, always in the C locale) and the C
// compiler driver print for ENOSPC and for a linker killed by SIGBUS.
var (
	noSpaceTexts = []string{"No space left on device"}
	busTexts     = []string{"Bus error", "SIGBUS"}
)

// lastLine returns the last line of the tail holding one of texts, trimmed
// (to its last 400 bytes), or "".
func (t *outputTail) lastLine(texts []string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	tail := t.buf
	if len(tail) > tailSize {
		tail = tail[len(tail)-tailSize:]
	}
	i := -1
	for _, text := range texts {
		i = max(i, bytes.LastIndex(tail, []byte(text)))
	}
	if i < 0 {
		return ""
	}
	start := bytes.LastIndexByte(tail[:i], '\n') + 1
	end := len(tail)
	if j := bytes.IndexByte(tail[i:], '\n'); j >= 0 {
		end = i + j
	}
	line := strings.TrimSpace(string(tail[start:end]))
	if len(line) > 400 {
		line = "..." + line[len(line)-400:]
	}
	return line
}
