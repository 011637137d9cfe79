package demand

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func entry(i int) Entry {
	return Entry{Time: t0.Add(time.Duration(i) * time.Second), Agent: fmt.Sprintf("a%d", i%7), Base: "b",
		Command: "cargo build", Cmd: Command{Dir: ".", Sub: "build"}, Observed: true, Fresh: i}
}

// Shims append at once, from processes of their own: every line arrives
// whole, and none is lost.
func TestAppendConcurrentProcesses(t *testing.T) {
	if os.Getenv("DEMAND_APPEND_CHILD") != "" {
		path, n := os.Getenv("DEMAND_APPEND_CHILD"), os.Getenv("DEMAND_APPEND_N")
		k, _ := strconv.Atoi(n)
		for i := 0; i < 50; i++ {
			if err := Append(path, entry(k*1000+i)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		os.Exit(0)
	}
	path := filepath.Join(t.TempDir(), "demand.log")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for k := 0; k < 8; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := exec.Command(os.Args[0], "-test.run=^TestAppendConcurrentProcesses$")
			c.Env = append(os.Environ(), "DEMAND_APPEND_CHILD="+path, "DEMAND_APPEND_N="+strconv.Itoa(k))
			if out, err := c.CombinedOutput(); err != nil {
				errs <- fmt.Errorf("child %d: %v\n%s", k, err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	l, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if l.Damaged != 0 || len(l.Entries) != 8*50 {
		t.Fatalf("%d entries, %d damaged; want 400 and 0", len(l.Entries), l.Damaged)
	}
	seen := map[int]bool{}
	for _, e := range l.Entries {
		seen[e.Fresh] = true
	}
	if len(seen) != 400 {
		t.Errorf("%d distinct entries, want 400", len(seen))
	}
}

// Past MaxBytes the log is compacted to its newest KeepBytes, while
// appenders go on: the newest entries are all there, the file stays bounded.
// Which of the concurrent appends are the newest depends on how the
// writers were scheduled (a writer that ran ahead finished long before the
// others), so the newest are appended last, one after another.
func TestAppendCompacts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demand.log")
	line := len(mustLine(t, entry(0)))
	n := MaxBytes/line + 200
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				if err := Append(path, entry(i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	const newest = 50
	for i := n; i < n+newest; i++ {
		if err := Append(path, entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > MaxBytes+int64(8*line) {
		t.Errorf("the log is %d bytes, past MaxBytes %d", fi.Size(), MaxBytes)
	}
	l, err := Read(path)
	if err != nil || l.Damaged != 0 {
		t.Fatalf("read: %v, %d damaged", err, l.Damaged)
	}
	if len(l.Entries) >= n || len(l.Entries) < KeepBytes/line/2 {
		t.Errorf("%d entries after %d appends: want it compacted to about %d", len(l.Entries), n+newest, KeepBytes/line)
	}
	// The newest appends survive the compaction.
	last := map[int]bool{}
	for _, e := range l.Entries {
		last[e.Fresh] = true
	}
	// Each writer's surviving entries are the newest of its own appends,
	// with no hole: a compaction keeps the newest of the log, and an
	// append lost to a compaction would leave a hole.
	for w := 0; w < 4; w++ {
		kept := false
		for i := w; i < n; i += 4 {
			if last[i] {
				kept = true
			} else if kept {
				t.Fatalf("writer %d's entry %d was lost, and later ones kept", w, i)
			}
		}
	}
	for i := n; i < n+newest; i++ {
		if !last[i] {
			t.Fatalf("entry %d of %d was lost", i, n+newest)
		}
	}
}

func mustLine(t *testing.T, e Entry) string {
	dir := t.TempDir()
	p := filepath.Join(dir, "l")
	if err := Append(p, e); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	return string(b)
}

// A damaged log (a torn line, garbage, an entry without a command) is
// read without the damage, which Read reports once and removes.
func TestReadRepairsDamage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demand.log")
	for i := 0; i < 3; i++ {
		if err := Append(path, entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("\x00\x00garbage\n{\"time\":\"2026-12-01T10:00:00Z\"}\n{\"time\":\"2026-12-01T1")
	f.Close()
	if err := Append(path, entry(9)); err != nil { // after the torn line, on a line of its own
		t.Fatal(err)
	}
	l, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if l.Damaged != 3 || len(l.Entries) != 4 || l.Repair != nil {
		t.Fatalf("%d entries, %d damaged (repair: %v); want 4 and 3", len(l.Entries), l.Damaged, l.Repair)
	}
	l, err = Read(path)
	if err != nil || l.Damaged != 0 || len(l.Entries) != 4 {
		t.Fatalf("after the repair: %d entries, %d damaged, %v", len(l.Entries), l.Damaged, err)
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), "garbage") {
		t.Errorf("the repaired log still holds the damage:\n%s", b)
	}
	// A missing log is an empty one.
	if l, err := Read(filepath.Join(t.TempDir(), "none")); err != nil || len(l.Entries) != 0 {
		t.Errorf("missing log: %v, %v", l, err)
	}
}

// Seen says first once per agent and command.
func TestSeen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "seen")
	if !Seen(dir, "cargo build") || Seen(dir, "cargo build") {
		t.Error("cargo build: want first, then not")
	}
	if !Seen(dir, "cargo build --release") {
		t.Error("another command is a first call too")
	}
}
