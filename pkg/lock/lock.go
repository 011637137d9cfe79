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
// because gc only ever try-locks bases. A builder also holds its seed's base
// lock shared for the build (so neither gc nor a rebuild removes the target
// it starts from), taken only by try-lock under its own: it never waits.
//
// Exclusive locks are never held while an agent's build runs; the base lock
// is held for the base's own warm build. busy.lock and mount.lock are leaves
// outside this order, held shared by every process run for an agent (and,
// for mount.lock, every process using an overlay agent's mount), and only
// ever try-locked exclusively: by rm and gc, and by the overlay backend's
// enter protocol (package lifecycle) under the agent lock, which may turn its
// exclusive hold shared (Downgrade) once the new namespace runs. A process entering an agent takes
// busy.lock shared before it waits for the agent lock; that cannot deadlock
// because the agent lock's other holders (spawn, rm) only try busy.lock.
//
// # Deleting lock files
//
// A lock is the inode linked at its path, not the path. flock locks an
// inode, so unlinking a lock file that someone holds would split the lock
// in two: the holder keeps its flock on the unlinked inode, a newcomer
// creates a new file at the path and locks that, and both believe they hold
// the lock. Lock files would then have to live for ever (one per base ever
// built), so instead every taker and every deleter follows one protocol:
//
//   - Only a holder of the exclusive lock may delete a lock file (Remove),
//     and it gives up the lock by deleting it: nothing it does after the
//     unlink is protected. Deleting a directory that holds lock files counts
//     as deleting them, so whoever does that holds each of them exclusively
//     (as rm does with an agent's lock, busy.lock and mount.lock).
//   - Every taker (Take, TryTake, Shared, TryShared), once flock succeeds,
//     compares the device and inode of its descriptor (fstat) with those of
//     the path (lstat). If the path is gone or names another file, the lock
//     it got is on a deleted file: it closes it and starts again from the
//     open, which finds (or creates) the file now at the path.
//
// Why that is enough: a taker that passes the check held a flock on the
// file linked at the path at the moment of the check. The file can only be
// unlinked by an exclusive holder, which the taker's flock excludes until it
// releases, so the file stays linked, and the taker stays the (exclusive or
// shared) holder of the path's lock, for as long as it holds the flock. A
// taker that waited on a file while its holder deleted it wakes up with the
// flock of a dead inode, fails the check and waits on the new file instead.
// The comparison cannot be fooled by a reused inode number: the taker's
// descriptor keeps its inode allocated, so no new file can get its number.
// A try-lock that finds the old file busy reports ErrBusy, which was true
// when it looked.
//
// # Opening lock files
//
// Lock files are opened with O_NOFOLLOW: a symbolic link planted at a lock
// path (by anyone who can write in the store's directories) is refused with
// an error naming it, never followed, so taking a lock can neither create
// nor truncate a file elsewhere (WriteOwner truncates). Inside an agent's
// sandbox the store is mounted read-only: there, opening for writing fails
// with EROFS, and an existing lock file is opened read-only instead, since
// flock does not care how the file was opened. Such a lock cannot
// WriteOwner, which only exclusive holders on the host do.
package lock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/failure"
)

// ErrBusy reports that a try-lock found the lock held.
var ErrBusy = errors.New("lock is held by another process")

// ErrSymlink reports a symbolic link at a lock path, which is never followed.
var ErrSymlink = errors.New("is a symbolic link")

// ErrNotExclusive reports Remove called on a lock held shared.
var ErrNotExclusive = errors.New("the lock is not held exclusively")

// Lock is a held lock.
type Lock struct {
	f         *os.File
	path      string
	exclusive bool
}

// open opens the lock file at path, creating it and its directory if
// needed, without following a symbolic link at path.
func open(path string) (*os.File, error) {
	const rw = os.O_RDWR | os.O_CREATE | unix.O_NOFOLLOW
	f, err := os.OpenFile(path, rw, 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		// Only now make the directory: on a read-only store (inside a
		// sandbox) open fails with EROFS first and never gets here.
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		f, err = os.OpenFile(path, rw, 0o644)
	}
	if errors.Is(err, unix.EROFS) {
		// A read-only store: an existing lock file can still be locked.
		// If it does not exist, it cannot be made: keep the EROFS error.
		rf, rerr := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		switch {
		case rerr == nil:
			f, err = rf, nil
		case !errors.Is(rerr, fs.ErrNotExist):
			err = rerr
		}
	}
	if errors.Is(err, unix.ELOOP) {
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, failure.Wrap(failure.Refused, ErrSymlink,
				"Ferry makes lock files as regular files and never follows a link there: find out who made it (nobody else should be able to write in the store), remove it, and try again",
				"lock %s", path)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// flock takes path's lock: open, flock, then check that the locked file is
// still the one at path (see the package doc), else start again.
func flock(path string, how int) (*Lock, error) {
	for {
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
		same, err := linked(f, path)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if same {
			return &Lock{f: f, path: path, exclusive: how&unix.LOCK_EX != 0}, nil
		}
		// Its holder deleted the file while we opened or waited: our flock
		// is on a dead inode.
		f.Close()
	}
}

// linked reports whether f is the file linked at path now (same device and
// inode; a symbolic link at path is another file).
func linked(f *os.File, path string) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	pi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(fi, pi), nil
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
		if err == nil {
			l.exclusive = false
		}
		if err != unix.EINTR {
			return err
		}
	}
}

// Remove deletes the lock file and releases the lock: the way to give up an
// exclusive lock for good (see the package doc). Nothing the caller does
// after Remove is protected by the lock any more, nor is a process that
// inherited the descriptor (File): its flock is on a deleted file. Remove
// refuses with ErrNotExclusive, keeping the lock, when the lock is held
// shared. In every other case the lock is released, even when the unlink
// fails; a file another process put at the path against the protocol is
// left alone and reported.
func (l *Lock) Remove() error {
	if l == nil || l.f == nil {
		return errors.New("remove lock: the lock was released")
	}
	if !l.exclusive {
		return fmt.Errorf("remove lock %s: %w", l.path, ErrNotExclusive)
	}
	defer l.Release()
	same, err := linked(l.f, l.path)
	if err != nil {
		return fmt.Errorf("remove lock %s: %w", l.path, err)
	}
	if !same {
		if _, err := os.Lstat(l.path); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove lock %s: the path names another file than the one locked; left alone", l.path)
	}
	if err := os.Remove(l.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove lock %s: %w", l.path, err)
	}
	return nil
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
