package lock

import (
	"io"
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
// holdEnv makes this test binary a lock holder: it takes the lock at the
// path it names, says so on stdout, and sleeps until killed. One process,
// no child that could keep a copy of the descriptor past its death.
const holdEnv = "FERRY_LOCK_TEST_HOLD"

func TestMain(m *testing.M) {
	if p := os.Getenv(holdEnv); p != "" {
		l, err := Take(p)
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("held\n")
		time.Sleep(time.Minute)
		l.Release()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestKilledHolderReleases(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"="+p)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "held\n" {
		cmd.Process.Kill()
		t.Fatalf("the holder did not take the lock: %q, %v", buf, err)
	}
	if held, _ := Held(p); !held {
		t.Fatal("the holder says it holds the lock; Held says nobody does")
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
