// Package demand is what agents build: the shim's record of every
// build-type cargo call an agent makes, and what Ferry learns from it.
//
// The record is a log per repository (<store>/demand.log, one JSON line
// per call): the call normalised (Normalize: subcommand, profile,
// features, package and target selection, target triple; never free
// arguments, paths or test filters), whether it was the agent's first
// call of that command, and, read from Cargo's JSON messages, how many
// units were fresh, how many compiled, and how many of those the agent's
// base does not hold at all ("new": another feature set, profile or
// target; a unit the base holds and an edit made stale is "rebuilt").
//
// What it promises:
//   - Appending never slows a call noticeably: one write of one line,
//     after cargo has exited, under a shared flock; concurrent shims
//     append whole lines (O_APPEND, each line one write).
//   - It is bounded: past MaxBytes the appender that notices compacts it
//     under an exclusive flock, keeping the newest entries (KeepBytes),
//     into a new file renamed over the old. An appender holding the old
//     file checks, once it has its lock, that it still holds the file the
//     path names, and opens it again if not, so no line is written to a
//     file already replaced.
//   - A damaged log never fails a build: the shim only appends, and a
//     reader skips lines it cannot read, reports how many, and rewrites
//     the log without them (Read).
//
// This package is the recording half, linked by the shim: the log, the
// command keys (Normalize, KeyOf) and a build's units (LastBuild, per
// agent). What Ferry learns from them lives in package warmset, which the
// shim does not link: the commands a base warms beyond its defaults, the
// hit rates `ferry stats` shows, and why Cargo compiled a unit.
package demand

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/atomicfile"
)

// The log's bounds: a line is about 400 bytes, so MaxBytes holds about
// ten thousand calls (weeks of a busy repository's agents), and a
// compaction keeps the newest KeepBytes of them.
const (
	MaxBytes  = 4 << 20
	KeepBytes = 2 << 20
)

// Entry is one agent call in the log.
type Entry struct {
	Time    time.Time `json:"time"`
	Agent   string    `json:"agent"`
	Base    string    `json:"base"`
	Command string    `json:"command"` // Cmd.String(): the key
	Cmd     Command   `json:"cmd"`
	// First: the agent's first call of this command.
	First bool `json:"first"`
	// InBase: the agent's base warmed exactly this command.
	InBase bool `json:"in_base"`
	// Observed: the counts are Cargo's (its JSON messages were read); a
	// call whose output the shim leaves alone (a terminal running tests,
	// a call asking for human messages) has none.
	Observed bool `json:"observed"`
	Fresh    int  `json:"fresh"`
	Compiled int  `json:"compiled"`
	// New are the compiled units the base does not hold at all.
	New     int     `json:"new"`
	Seconds float64 `json:"seconds"`
	// CPU is the CPU time cargo and everything it ran used, in seconds:
	// what Select weighs against its budget.
	CPU  float64 `json:"cpu_seconds"`
	Exit int     `json:"exit"`
}

// Units is how many units the call built: fresh and compiled.
func (e *Entry) Units() int { return e.Fresh + e.Compiled }

// Append adds e to the log at path, compacting it when it has grown past
// MaxBytes. It creates the log (0600) when there is none.
func Append(path string, e Entry) error {
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	var size int64
	for attempt := 0; ; attempt++ {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
			f.Close()
			return err
		}
		if !current(f, path) && attempt < 5 {
			f.Close() // compacted meanwhile: write to the file the path names now
			continue
		}
		out := line
		if torn(f) {
			// A line cut short (a crash mid-write, damage): start a line
			// of our own, so the damage stays on its line.
			out = append([]byte{'\n'}, line...)
		}
		_, werr := f.Write(out)
		if fi, err := f.Stat(); err == nil {
			size = fi.Size()
		}
		f.Close()
		if werr != nil {
			return werr
		}
		break
	}
	if size > MaxBytes {
		return compact(path, false)
	}
	return nil
}

// torn reports whether f does not end in a newline.
func torn(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return false
	}
	var b [1]byte
	_, err = f.ReadAt(b[:], fi.Size()-1)
	return err == nil && b[0] != '\n'
}

// current reports whether f is still the file path names.
func current(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// Log is what Read found.
type Log struct {
	Entries []Entry
	// Damaged is how many lines could not be read (and were dropped from
	// the file); Repair says what rewriting it without them did.
	Damaged int
	Repair  error
}

// Read returns the log's entries, oldest first; a missing log is empty.
// Lines it cannot read are counted in Damaged and the log is rewritten
// without them, so a damaged log is reported once and then rebuilt.
func Read(path string) (*Log, error) {
	l, err := read(path)
	if err != nil || l.Damaged == 0 {
		return l, err
	}
	l.Repair = compact(path, true)
	return l, nil
}

// Inspect reads the log as Read does, changing nothing: for ferry doctor,
// which reports what the next Read would drop.
func Inspect(path string) (*Log, error) { return read(path) }

func read(path string) (*Log, error) {
	l := &Log{}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	l.Entries, l.Damaged, err = parse(f)
	return l, err
}

// parse reads the lines of r, skipping (and counting) those that are not
// an entry.
func parse(r io.Reader) (entries []Entry, damaged int, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, rerr := br.ReadBytes('\n')
		if t := bytes.TrimSpace(line); len(t) > 0 {
			var e Entry
			if json.Unmarshal(t, &e) != nil || e.Command == "" || e.Command != e.Cmd.String() || e.Time.IsZero() {
				damaged++
			} else {
				entries = append(entries, e)
			}
		}
		if rerr == io.EOF {
			return entries, damaged, nil
		}
		if rerr != nil {
			return entries, damaged, rerr
		}
	}
}

// compact rewrites the log at path under an exclusive lock: without the
// lines it cannot read, and, past KeepBytes, without its oldest entries.
// wait says whether to wait for the lock: an appender does not (another
// is compacting already), a reader repairing the log does.
func compact(path string, wait bool) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	how := unix.LOCK_EX
	if !wait {
		how |= unix.LOCK_NB
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil
		}
		return err
	}
	if !current(f, path) {
		return nil // another compaction replaced it
	}
	entries, _, err := parse(f)
	if err != nil {
		return err
	}
	var kept [][]byte
	size := 0
	for i := len(entries) - 1; i >= 0; i-- {
		b, err := json.Marshal(entries[i])
		if err != nil {
			continue
		}
		if size+len(b)+1 > KeepBytes {
			break
		}
		size += len(b) + 1
		kept = append(kept, b)
	}
	var buf bytes.Buffer
	for i := len(kept) - 1; i >= 0; i-- {
		buf.Write(kept[i])
		buf.WriteByte('\n')
	}
	// Renamed over the old file while its lock is held: appenders waiting
	// on the old file find it replaced and open the new one.
	if err := atomicfile.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("compact the demand log: %w", err)
	}
	return nil
}

// Since returns the entries at or after t.
func Since(entries []Entry, t time.Time) []Entry {
	var out []Entry
	for _, e := range entries {
		if !e.Time.Before(t) {
			out = append(out, e)
		}
	}
	return out
}

// Seen marks that agent dir agentSeen (the agent's directory of seen
// commands) has run command, and reports whether this was its first call
// of it. It costs one open with O_EXCL.
func Seen(agentSeen, command string) bool {
	name := filepath.Join(agentSeen, key(command))
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if os.MkdirAll(agentSeen, 0o700) != nil {
			return false
		}
		f, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	}
	if err != nil {
		return false
	}
	f.Close()
	return true
}
