package lock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// inode returns the inode number of f, or of the file at path if f is nil
// (without following a link), or 0 when there is none.
func inode(t *testing.T, f *os.File, path string) uint64 {
	t.Helper()
	var fi fs.FileInfo
	var err error
	if f != nil {
		fi, err = f.Stat()
	} else {
		fi, err = os.Lstat(path)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// Many goroutines, each with its own open file description (which is what
// flock tells apart), take the lock, check they are alone, and delete the
// lock file on the way out. A taker that locked the file just deleted (it
// opened or waited on it before the unlink) must notice and lock the new
// file instead; otherwise it and the taker of the new file hold at once.
func TestRemoveKeepsExclusion(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bases", "x.lock")
	const workers, rounds = 8, 300
	var holders, removed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				l, err := Take(p)
				if err != nil {
					errs <- err
					return
				}
				if n := holders.Add(1); n != 1 {
					errs <- fmt.Errorf("%d holders at once", n)
					l.Release()
					return
				}
				// Stay a little, so takers pile up on this file.
				time.Sleep(20 * time.Microsecond)
				holders.Add(-1)
				if err := l.Remove(); err != nil {
					errs <- err
					return
				}
				removed.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := removed.Load(); n != workers*rounds {
		t.Fatalf("%d removals, want %d", n, workers*rounds)
	}
	if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("lock file after the last Remove: %v", err)
	}
}

// The same across processes (the test binary re-executed): a file created
// with O_EXCL in the critical section shows two holders at once.
func TestRemoveKeepsExclusionAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	const procs, rounds = 4, 200
	cmds := make([]*exec.Cmd, procs)
	outs := make([]*strings.Builder, procs)
	for i := range cmds {
		c := exec.Command(os.Args[0], "-test.run=^TestLockHelperProcess$", "-test.count=1")
		c.Env = append(os.Environ(), "FERRY_LOCK_HELPER="+dir, "FERRY_LOCK_ROUNDS="+strconv.Itoa(rounds))
		outs[i] = &strings.Builder{}
		c.Stdout, c.Stderr = outs[i], outs[i]
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = c
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("helper %d: %v\n%s", i, err, outs[i])
		}
	}
}

// TestLockHelperProcess is the body of one process of
// TestRemoveKeepsExclusionAcrossProcesses; run alone, it does nothing.
func TestLockHelperProcess(t *testing.T) {
	dir := os.Getenv("FERRY_LOCK_HELPER")
	if dir == "" {
		t.Skip("helper of TestRemoveKeepsExclusionAcrossProcesses")
	}
	rounds, _ := strconv.Atoi(os.Getenv("FERRY_LOCK_ROUNDS"))
	p, inside := filepath.Join(dir, "x.lock"), filepath.Join(dir, "inside")
	for i := 0; i < rounds; i++ {
		l, err := Take(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(inside, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatalf("round %d: another process holds the lock too: %v", i, err)
		}
		f.Close()
		time.Sleep(20 * time.Microsecond)
		if err := os.Remove(inside); err != nil {
			t.Fatal(err)
		}
		if err := l.Remove(); err != nil {
			t.Fatal(err)
		}
	}
}

// A taker blocked in Take while the holder deletes the file ends up
// holding the lock of the new file at the path, not of the deleted one.
func TestWaiterFollowsRemovedFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.lock")
	a, err := Take(p)
	if err != nil {
		t.Fatal(err)
	}
	old := inode(t, a.File(), "")
	// Keep the deleted file alive, so its inode number is not reused by
	// the new file and the numbers below tell the files apart.
	keep, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	got := make(chan *Lock, 1)
	go func() {
		b, err := Take(p)
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	waitBlocked(t, old)
	if err := a.Remove(); err != nil {
		t.Fatal(err)
	}
	var b *Lock
	select {
	case b = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock after Remove")
	}
	if b == nil {
		t.FailNow()
	}
	defer b.Release()
	now := inode(t, nil, p)
	if now == 0 {
		t.Fatal("no lock file at the path while the waiter holds the lock")
	}
	if held := inode(t, b.File(), ""); held != now || held == old {
		t.Fatalf("the waiter holds inode %d; the path names %d, the deleted file was %d", held, now, old)
	}
	if _, err := TryTake(p); err != ErrBusy {
		t.Fatalf("TryTake while the waiter holds the path's lock = %v, want ErrBusy", err)
	}
}

// waitBlocked waits until some process is blocked in flock on inode ino,
// as /proc/locks shows waiters ("->").
func waitBlocked(t *testing.T, ino uint64) {
	t.Helper()
	want := fmt.Sprintf(":%d ", ino)
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile("/proc/locks")
		if err != nil {
			t.Skipf("cannot see waiters in /proc/locks: %v", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "->") && strings.Contains(line, "FLOCK") && strings.Contains(line, want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiter on inode %d in /proc/locks:\n%s", ino, b)
		}
		time.Sleep(time.Millisecond)
	}
}

// Only an exclusive holder may delete a lock file: Remove refuses a shared
// lock, also one downgraded from exclusive, and keeps it held.
func TestRemoveRefusesShared(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.lock")
	s, err := Shared(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(); !errors.Is(err, ErrNotExclusive) {
		t.Fatalf("Remove of a shared lock = %v, want ErrNotExclusive", err)
	}
	if _, err := TryTake(p); err != ErrBusy {
		t.Fatalf("after a refused Remove, TryTake = %v, want ErrBusy", err)
	}
	s.Release()

	x, err := Take(p)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	if err := x.Downgrade(); err != nil {
		t.Fatal(err)
	}
	if err := x.Remove(); !errors.Is(err, ErrNotExclusive) {
		t.Fatalf("Remove of a downgraded lock = %v, want ErrNotExclusive", err)
	}
	if inode(t, nil, p) == 0 {
		t.Fatal("a refused Remove deleted the file")
	}
}
