// Package store lays out Ferry's on-disk state for one repository.
//
// The store is the truth: base.json, agent.json, current and the lock files
// decide what exists; events only announce changes. One store per repository
// lives under the store parent, keyed by the repository's name and a hash of
// its git common dir, so every worktree of a repository shares one store and
// two clones never do:
//
//	<parent>/<repo-name>-<hash>/
//	  store.json lock current
//	  mnt/src mnt/target mnt/tmp    canonical mountpoints (empty on the host)
//	  bases/<commit>-<fp>/          immutable once base.json exists
//	    base.json src/ target/
//	  bases/<commit>-<fp>.lock
//	  agents/<name>/ ...
//	  tmp/                          scratch, safe to delete when nothing runs
//	<parent>/bin/cargo              the shim (InstallShim)
//	<parent>/bus/                   the embedded bus's bus.json, token and data
//
// The store belongs to its user: see owner.go for the check that refuses a
// store path someone else could change (CheckOwner), and MkdirAll, which
// creates the store's directories so that the check passes.
package store

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/digest"
	"github.com/ferrydev/ferry/pkg/failure"
)

// Format is the store layout version recorded in store.json.
const Format = 1

// Store is one repository's store.
type Store struct {
	Parent string // the store parent
	Dir    string // <parent>/<key>
	Key    string // <repo-name>-<hash>

	commonDir string
}

// Meta is store.json: which repository the store belongs to.
type Meta struct {
	Format    int       `json:"format"`
	Key       string    `json:"key"`
	CommonDir string    `json:"git_common_dir"`
	Created   time.Time `json:"created"`
}

var unsafeName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^A-Za-z0-9._-]+`) })

// Key returns the store key of the repository whose git common dir is
// commonDir: a readable name and the first 12 hex digits of the SHA-256 of
// the cleaned path.
func Key(commonDir string) string {
	commonDir = filepath.Clean(commonDir)
	name := filepath.Base(commonDir)
	if name == ".git" {
		name = filepath.Base(filepath.Dir(commonDir))
	}
	name = strings.TrimSuffix(name, ".git")
	name = strings.Trim(unsafeName().ReplaceAllString(name, "-"), "-.")
	if name == "" {
		name = "repo"
	}
	sum := digest.Sum256([]byte(commonDir))
	return name + "-" + hex.EncodeToString(sum[:])[:12]
}

// Open returns the store of the repository with common dir commonDir under
// parent, creating nothing: Init creates it. worktreeTop is the repository's
// worktree: a store inside it is refused, since builds would then scan and
// stamp their own state.
func Open(parent, commonDir, worktreeTop string) (*Store, error) {
	parent, err := filepath.Abs(parent)
	if err != nil {
		return nil, err
	}
	// Every path under the store is named through the resolved parent, so
	// that the sandbox can refuse a symbolic link anywhere below it.
	parent = resolve(parent)
	if within(parent, resolve(worktreeTop)) || within(parent, resolve(commonDir)) {
		return nil, failure.New(failure.Usage,
			"point the store outside the repository: set FERRY_HOME or [store] dir in ferry.toml to a directory such as ~/.cache/ferry",
			"store directory %s is inside the repository %s", parent, worktreeTop)
	}
	key := Key(commonDir)
	return &Store{Parent: parent, Dir: filepath.Join(parent, key), Key: key, commonDir: filepath.Clean(commonDir)}, nil
}

// Init creates the store's directories and store.json if they are missing,
// and refuses a store written by a newer Ferry, or one others could change
// (CheckOwner, before and after creating: a directory someone else made in
// between is refused too). No directory it creates is writable by group or
// others, whatever the umask.
func (s *Store) Init() error {
	if err := s.CheckWritable(); err != nil {
		return err
	}
	if err := s.CheckOwner(); err != nil {
		return err
	}
	for _, d := range []string{s.MntSrc(), s.MntTarget(), s.MntTmp(), s.BasesDir(), s.AgentsDir(), s.TmpDir()} {
		if err := MkdirAll(d, 0o755); err != nil {
			return failure.Wrap(failure.Prereq, err, "check that the store parent is writable, or choose another with FERRY_HOME", "create the store")
		}
	}
	if err := s.CheckOwner(); err != nil {
		return err
	}
	metaPath := s.MetaPath()
	m, err := ReadMeta(s)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		m = &Meta{Format: Format, Key: s.Key, CommonDir: s.commonDir, Created: time.Now().UTC()}
		return atomicfile.WriteJSON(metaPath, m, 0o644)
	case err != nil:
		return err
	case m.Format > Format:
		return failure.New(failure.Refused, "upgrade Ferry, or use another store with FERRY_HOME",
			"store %s has format %d; this Ferry knows format %d", s.Dir, m.Format, Format)
	}
	return nil
}

// ReadMeta reads the store's store.json. A damaged one (failure.DamagedError)
// is not rewritten: it may be a newer Ferry's, whose format this one must
// not take for its own; moved aside, the next command that writes the
// store writes a new one.
func ReadMeta(s *Store) (*Meta, error) {
	var m Meta
	if err := atomicfile.ReadJSON(s.MetaPath(), &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// resolve returns p with symlinks resolved as far as the path exists.
func resolve(p string) string {
	p = filepath.Clean(p)
	rest := ""
	for {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(p, rest)
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// Within reports whether path p lies inside dir (both resolved).
func Within(p, dir string) bool { return within(resolve(p), resolve(dir)) }

// Current returns the id of the current base, or "" when there is none. A
// file that holds no base id (truncated, emptied, overwritten) is a
// *failure.DamagedError: the next `ferry base` writes it again.
func (s *Store) Current() (string, error) {
	b, err := os.ReadFile(s.CurrentPath())
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if !baseID().MatchString(id) {
		return "", failure.Damaged(s.CurrentPath(), fmt.Errorf("it holds %q, not a base id", clip(id)),
			"`ferry base` makes the base of HEAD current again (`ferry base list` shows the bases there are)")
	}
	return id, nil
}

// baseID matches a base id as package base makes them: a commit (SHA-1 or
// SHA-256), '-', and 16 hex digits of fingerprint.
var baseID = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?-[0-9a-f]{16}$`)
})

// clip shortens a damaged file's text for a message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// SetCurrent records id as the current base. The caller holds the store lock.
func (s *Store) SetCurrent(id string) error {
	if id == "" || strings.ContainsAny(id, "/\n") {
		return fmt.Errorf("set current: bad base id %q", id)
	}
	return atomicfile.WriteFile(s.CurrentPath(), []byte(id+"\n"), 0o644)
}
