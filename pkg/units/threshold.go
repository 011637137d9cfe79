package units

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The write threshold separates what the warm build wrote from what was
// cloned from a seed. Filesystems stamp a file with a coarse clock (on
// Linux the kernel's tick, a few milliseconds), so "now" read from Go's
// clock would not do: the threshold is the mtime of a file the filesystem
// stamped itself, taken only once it is strictly newer than the mtime of a
// file created before it. Every file written after the threshold is taken
// is at least as new (the clock does not go back), and every file cloned
// before is older than the first file, so strictly older than the
// threshold. Both files stay in the directory; they live on the filesystem
// of the base, which holds its target too, so both are stamped by the
// same clock with the same granularity.
const (
	thresholdBefore = "threshold-before"
	thresholdFile   = "threshold"
)

// thresholdWait bounds the wait for the filesystem's clock to tick.
const thresholdWait = 5 * time.Second

// TakeThreshold takes the write threshold of a warm build in dir, its
// warm-units directory: call it after the seed is cloned, relocated and
// stamped, and before the first warm command. It returns the threshold
// (see Analyze).
func TakeThreshold(dir string) (time.Time, error) {
	before, err := stampFile(filepath.Join(dir, thresholdBefore))
	if err != nil {
		return time.Time{}, err
	}
	deadline := time.Now().Add(thresholdWait)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		t, err := stampFile(filepath.Join(dir, thresholdFile))
		if err != nil {
			return time.Time{}, err
		}
		if t.After(before) {
			return t, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, &ThresholdError{Dir: dir, Err: fmt.Errorf("the filesystem's timestamps did not advance in %v (still %v)", thresholdWait, before)}
		}
		time.Sleep(wait)
	}
}

// Threshold reads back the threshold TakeThreshold took in dir.
func Threshold(dir string) (time.Time, error) {
	b, err := os.Lstat(filepath.Join(dir, thresholdBefore))
	if err != nil {
		return time.Time{}, &ThresholdError{Dir: dir, Err: err}
	}
	a, err := os.Lstat(filepath.Join(dir, thresholdFile))
	if err != nil {
		return time.Time{}, &ThresholdError{Dir: dir, Err: err}
	}
	if !a.ModTime().After(b.ModTime()) {
		return time.Time{}, &ThresholdError{Dir: dir, Err: errors.New("no threshold taken: its file is not newer than the one before it")}
	}
	return a.ModTime(), nil
}

// stampFile creates path anew and returns the mtime the filesystem gave it.
func stampFile(path string) (time.Time, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, &ThresholdError{Dir: filepath.Dir(path), Err: err}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return time.Time{}, &ThresholdError{Dir: filepath.Dir(path), Err: err}
	}
	fi, err := f.Stat()
	f.Close()
	if err != nil {
		return time.Time{}, &ThresholdError{Dir: filepath.Dir(path), Err: err}
	}
	return fi.ModTime(), nil
}

// ThresholdError is a write threshold that could not be taken or read.
type ThresholdError struct {
	Dir string
	Err error
}

func (e *ThresholdError) Error() string {
	return fmt.Sprintf("write threshold in %s: %v", e.Dir, e.Err)
}

func (e *ThresholdError) Unwrap() error { return e.Err }
