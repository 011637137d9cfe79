// Package lock provides flock(2) locks on files in the store.
//
// flock locks belong to an open file description, so they are released when
// the holder exits for any reason, including SIGKILL: a crashed build never
// leaves a lock behind. Locks are advisory; every Ferry process takes them in
// one order to stay free of deadlock:
//
//	store lock  (<store>/lock)
//	  agent lock  (<store>/agents/<name>/lock)
//	    base lock  (<store>/bases/<id>.lock)
//
// A process may skip levels but never takes a lock above one it holds, with
// one exception: ferry-base takes the store lock while holding a base lock, to
// set current before gc can see the new base unreferenced. That is safe
// because gc only ever try-locks bases.
//
// Exclusive locks are never held while an agent's build runs; the base lock
// is held for the base's own warm build. busy.lock and mount.lock are leaves
// outside this order, held shared by every process run for an agent (and,
// for mount.lock, every process using an overlay agent's mount), and only
// ever try-locked exclusively: by rm and gc, and by the overlay enter
// protocol under the agent lock, which may turn its exclusive hold shared
// (Downgrade) once the new namespace runs. A process entering an agent takes
// busy.lock shared before it waits for the agent lock; that cannot deadlock
// because the agent lock's other holders (spawn, rm) only try busy.lock.
package lock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrBusy reports that a try-lock found the lock held.
var ErrBusy = errors.New("lock is held by another process")

// Lock is a held lock.
type Lock struct {
	f *os.File
}

func open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if errors.Is(err, unix.EROFS) {
		f, err = os.OpenFile(path, os.O_RDONLY, 0) // a sealed store: flock needs no write access
	}
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	}
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

func flock(path string, how int) (*Lock, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, ErrBusy
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Take blocks until it holds path exclusively.
func Take(path string) (*Lock, error) { return flock(path, unix.LOCK_EX) }

// TryTake takes path exclusively or returns ErrBusy at once.
func TryTake(path string) (*Lock, error) { return flock(path, unix.LOCK_EX|unix.LOCK_NB) }

// Shared blocks until it holds path shared.
func Shared(path string) (*Lock, error) { return flock(path, unix.LOCK_SH) }

// TryShared takes path shared or returns ErrBusy at once.
func TryShared(path string) (*Lock, error) { return flock(path, unix.LOCK_SH|unix.LOCK_NB) }

// Held reports whether some process holds path (shared or exclusive), by
// trying an exclusive lock and releasing it at once.
func Held(path string) (bool, error) {
	l, err := TryTake(path)
	if err == ErrBusy {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	l.Release()
	return false, nil
}

// Downgrade turns an exclusive lock into a shared one, for every process
// sharing the descriptor. flock converts without a guarantee of atomicity
// (another process may take the lock in between), so callers hold a lock
// that serializes the takers while they downgrade.
func (l *Lock) Downgrade() error {
	for {
		err := unix.Flock(int(l.f.Fd()), unix.LOCK_SH)
		if err != unix.EINTR {
			return err
		}
	}
}

// File returns the locked file, e.g. to pass the descriptor to a child that
// must keep holding the lock.
func (l *Lock) File() *os.File { return l.f }

// WriteOwner records the caller's pid in the lock file, so a refused
// process can name the holder. Only meaningful for exclusive locks.
func (l *Lock) WriteOwner() error {
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	_, err := l.f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

// Owner reads the pid recorded by WriteOwner, or 0.
func Owner(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// Release drops the lock. It is safe to call more than once.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	l.f.Close() // closing the only descriptor releases the flock
	l.f = nil
}
