package lock

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func TestExclusiveExcludes(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x", "lock")
	a, err := Take(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := TryTake(p); err != ErrBusy {
		t.Fatalf("second TryTake = %v, want ErrBusy", err)
	}
	if _, err := TryShared(p); err != ErrBusy {
		t.Fatalf("TryShared under exclusive = %v, want ErrBusy", err)
	}
	if held, _ := Held(p); !held {
		t.Fatal("Held = false while held")
	}
	a.Release()
	a.Release()
	if held, _ := Held(p); held {
		t.Fatal("Held = true after release")
	}
}

func TestSharedAdmitsShared(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	a, err := Shared(p)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	b, err := TryShared(p)
	if err != nil {
		t.Fatalf("second shared: %v", err)
	}
	defer b.Release()
	if _, err := TryTake(p); err != ErrBusy {
		t.Fatalf("TryTake under shared = %v, want ErrBusy", err)
	}
}

func TestTakeWaitsForRelease(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	a, _ := Take(p)
	got := make(chan time.Time)
	go func() {
		b, err := Take(p)
		if err != nil {
			t.Error(err)
		}
		got <- time.Now()
		b.Release()
	}()
	time.Sleep(50 * time.Millisecond)
	released := time.Now()
	a.Release()
	if at := <-got; at.Before(released) {
		t.Fatal("Take returned while the lock was held")
	}
}

// A holder killed with SIGKILL releases its lock: the kernel drops flocks
// with the last descriptor.
func TestKilledHolderReleases(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	cmd := exec.Command("flock", "-o", p, "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("flock(1) unavailable: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if held, _ := Held(p); held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("child never took the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	l, err := TryTake(p)
	if err != nil {
		t.Fatalf("lock still held after SIGKILL: %v", err)
	}
	l.Release()
}

func TestOwner(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	l, _ := Take(p)
	defer l.Release()
	if err := l.WriteOwner(); err != nil {
		t.Fatal(err)
	}
	if got := Owner(p); got != os.Getpid() {
		t.Fatalf("Owner = %d, want %d", got, os.Getpid())
	}
}
