package units

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The record of one cargo call is a file of its own in the warm-units
// directory, named call-<start, Unix ns>-<pid>.jsonl, written by the shim
// as the call runs. Each line is one JSON object with one of three keys:
//
//	{"call": {...}}                        first: the header (Call)
//	{"msg": {...cargo's message...},       one per compiler-artifact,
//	 "files": [{"path", "dev", "ino",      build-script-executed or
//	            "size", "mtime_ns"}]}      build-finished message, verbatim,
//	                                       with every file it names
//	                                       stat'ed as it arrived
//	{"exit": {"code": N, "signal": "…"}}   last, when cargo ended
//
// Lines are appended with one write each, as they happen, and never
// rewritten: a call killed midway leaves a record without its exit line
// (perhaps with a torn last line, which readers ignore), and so reads as a
// call that did not finish. A call the shim cannot observe gets a header
// saying why (Call.Unobservable) and nothing else.

// RecordVersion is the version of the record format, in every header.
const RecordVersion = 1

const (
	recordPrefix = "call-"
	recordSuffix = ".jsonl"
)

// The messages a record keeps (Cargo's JSON message formats: the cargo
// book's "External tools" chapter).
const (
	ReasonArtifact      = "compiler-artifact"
	ReasonBuildScript   = "build-script-executed"
	ReasonBuildFinished = "build-finished"
)

// Call is the header of a record: which call it was.
type Call struct {
	Version int       `json:"version"`
	Start   time.Time `json:"start"`
	PID     int       `json:"pid"`
	Dir     string    `json:"dir"`
	Args    []string  `json:"args"`          // as the caller gave them
	Ran     []string  `json:"ran,omitempty"` // as cargo got them (the message format added)
	// Target is the base's target dir as the warm build sees it
	// (FERRY_WARM_TARGET): the paths in messages start with it.
	Target string `json:"target"`
	// CargoTarget is the target dir this call built in: Target, or the
	// target dir of a workspace nested in the checkout (Target/ferry-ws/…).
	CargoTarget string `json:"cargo_target,omitempty"`
	// JSON is set when the call asked for JSON messages itself, and got
	// them all on its stdout.
	JSON bool `json:"json,omitempty"`
	// Unobservable, when set, says why the call's units could not be
	// observed: it ran unchanged and its record ends here.
	Unobservable string `json:"unobservable,omitempty"`
}

// FileStat is a file a message names, as it was when the message arrived.
type FileStat struct {
	Path    string `json:"path"`
	Dev     uint64 `json:"dev,omitempty"`
	Ino     uint64 `json:"ino,omitempty"`
	Size    int64  `json:"size,omitempty"`
	MtimeNs int64  `json:"mtime_ns,omitempty"`
	Err     string `json:"err,omitempty"` // the stat failed
}

// Exit is how a recorded call ended.
type Exit struct {
	Code   int    `json:"code"`             // the status the shim passed on (128+n when killed by signal n)
	Signal string `json:"signal,omitempty"` // the signal that killed cargo
}

type line struct {
	Call  *Call           `json:"call,omitempty"`
	Msg   json.RawMessage `json:"msg,omitempty"`
	Files []FileStat      `json:"files,omitempty"`
	Exit  *Exit           `json:"exit,omitempty"`
}

// Recorder appends one call's record.
type Recorder struct {
	f *os.File
}

// NewRecord creates the record of call c in dir (the warm-units
// directory) and writes its header.
func NewRecord(dir string, c Call) (*Recorder, error) {
	c.Version = RecordVersion
	if c.Start.IsZero() {
		c.Start = time.Now()
	}
	if c.PID == 0 {
		c.PID = os.Getpid()
	}
	var f *os.File
	var err error
	for i := 0; ; i++ {
		name := recordPrefix + strconv.FormatInt(c.Start.UnixNano(), 10) + "-" + strconv.Itoa(c.PID)
		if i > 0 {
			name += "." + strconv.Itoa(i)
		}
		f, err = os.OpenFile(filepath.Join(dir, name+recordSuffix), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
		if errors.Is(err, fs.ErrExist) && i < 100 {
			continue
		}
		break
	}
	if err != nil {
		return nil, &RecordError{Dir: dir, Err: err}
	}
	r := &Recorder{f: f}
	if err := r.write(line{Call: &c}); err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

// Message appends one of cargo's messages (a line of its stdout, without
// the newline) and the files it names.
func (r *Recorder) Message(msg []byte, files []FileStat) error {
	return r.write(line{Msg: json.RawMessage(msg), Files: files})
}

// Exit appends how the call ended: the record is complete.
func (r *Recorder) Exit(e Exit) error { return r.write(line{Exit: &e}) }

// Close closes the record's file.
func (r *Recorder) Close() error { return r.f.Close() }

func (r *Recorder) write(l line) error {
	b, err := json.Marshal(l)
	if err != nil {
		return &RecordError{Dir: filepath.Dir(r.f.Name()), Err: err}
	}
	// One write per line on an O_APPEND file: a kill leaves whole lines,
	// or at worst a torn last one.
	if _, err := r.f.Write(append(b, '\n')); err != nil {
		return &RecordError{Dir: filepath.Dir(r.f.Name()), Err: err}
	}
	return nil
}

// RecordError is a record that could not be written or read.
type RecordError struct {
	Dir string
	Err error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("warm-units record in %s: %v", e.Dir, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// message is what the analysis reads from one of cargo's messages. Cargo
// never removes a field of these messages; unknown fields are ignored.
type message struct {
	Reason    string `json:"reason"`
	PackageID string `json:"package_id"`
	Target    struct {
		Kind []string `json:"kind"`
		Name string   `json:"name"`
	} `json:"target"`
	Profile struct {
		Test bool `json:"test"`
	} `json:"profile"`
	Filenames  []string `json:"filenames"`
	Executable *string  `json:"executable"`
	Fresh      bool     `json:"fresh"`
	OutDir     string   `json:"out_dir"`
	Success    bool     `json:"success"`
}

// paths returns every path the message names, each once.
func (m *message) paths() []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, f := range m.Filenames {
		add(f)
	}
	if m.Executable != nil {
		add(*m.Executable)
	}
	add(m.OutDir)
	return out
}

// messagePrefix starts every message Cargo prints (its JSON objects are
// serialized with the reason first).
var messagePrefix = []byte(`{"reason":"`)

// ParseMessage reads a line of a cargo call's stdout (without its newline).
// It reports whether the line is one of Cargo's JSON messages, its reason,
// whether a record keeps it (compiler-artifact, build-script-executed,
// build-finished), and the paths of the files it names, which the caller
// stats (Stat) for the record.
func ParseMessage(l []byte) (reason string, keep bool, paths []string, ok bool) {
	if !bytes.HasPrefix(l, messagePrefix) {
		return "", false, nil, false
	}
	var m message
	if json.Unmarshal(l, &m) != nil || m.Reason == "" {
		return "", false, nil, false
	}
	switch m.Reason {
	case ReasonArtifact, ReasonBuildScript:
		return m.Reason, true, m.paths(), true
	case ReasonBuildFinished:
		return m.Reason, true, nil, true
	}
	return m.Reason, false, nil, true
}

// Stat stats each path (without following a final symlink), for a record.
func Stat(paths []string) []FileStat {
	out := make([]FileStat, 0, len(paths))
	for _, p := range paths {
		fs := FileStat{Path: p}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			fs.Err = err.Error()
		} else {
			fs.Dev, fs.Ino, fs.Size = uint64(st.Dev), uint64(st.Ino), st.Size
			fs.MtimeNs = st.Mtim.Nano()
		}
		out = append(out, fs)
	}
	return out
}

// Record is one recorded call, as read back.
type Record struct {
	File string // the record's path
	Call
	Messages []Message
	Finished bool // the exit line is there
	Exit     Exit
	// Damaged, when set, says why the record cannot be trusted: a line
	// other than a torn last one could not be read, or the header is
	// missing or of another version.
	Damaged string
}

// Failed reports whether the call finished with a failure.
func (r *Record) Failed() bool { return r.Finished && r.Exit.Code != 0 }

// Message is one recorded message of Cargo.
type Message struct {
	Raw   json.RawMessage
	Files []FileStat
	m     message
}

// Reason is the message's reason (compiler-artifact, …).
func (m *Message) Reason() string { return m.m.Reason }

// ReadRecords reads every record in dir (the warm-units directory), in the
// order the calls started. Files that are not records are ignored.
func ReadRecords(dir string) ([]*Record, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, &RecordError{Dir: dir, Err: err}
	}
	var out []*Record
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), recordPrefix) || !strings.HasSuffix(e.Name(), recordSuffix) {
			continue
		}
		r, err := ReadRecord(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out, nil
}

// ReadRecord reads one record file. What is wrong inside it is reported
// in Record.Damaged, not as an error.
func ReadRecord(path string) (*Record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &RecordError{Dir: filepath.Dir(path), Err: err}
	}
	r := &Record{File: path}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	whole := bytes.Count(data, []byte{'\n'}) // lines that end with their newline
	n := 0
	for sc.Scan() {
		n++
		raw := sc.Bytes()
		torn := n > whole // the last line, without its newline: the writer was killed
		var l line
		if err := json.Unmarshal(raw, &l); err != nil {
			if torn {
				break
			}
			r.Damaged = fmt.Sprintf("line %d: %v", n, err)
			return r, nil
		}
		switch {
		case n == 1:
			if l.Call == nil {
				r.Damaged = "no header"
				return r, nil
			}
			r.Call = *l.Call
			if r.Version != RecordVersion {
				r.Damaged = fmt.Sprintf("record version %d, not %d", r.Version, RecordVersion)
				return r, nil
			}
		case r.Finished:
			r.Damaged = fmt.Sprintf("line %d after the exit line", n)
			return r, nil
		case l.Exit != nil:
			r.Finished, r.Exit = true, *l.Exit
		case l.Msg != nil:
			m := Message{Raw: l.Msg, Files: l.Files}
			if err := json.Unmarshal(l.Msg, &m.m); err != nil {
				r.Damaged = fmt.Sprintf("line %d: message: %v", n, err)
				return r, nil
			}
			r.Messages = append(r.Messages, m)
		default:
			r.Damaged = fmt.Sprintf("line %d: neither a message nor the exit", n)
			return r, nil
		}
	}
	if n == 0 {
		r.Damaged = "empty"
	}
	return r, nil
}
