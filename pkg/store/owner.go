package store

// The store belongs to its user (DESIGN.md §3, seed 002 "Where the rootfs
// lives"). Ferry puts <parent>/bin first on the agents' PATH as cargo,
// reads the bus's address and token from <parent>/bus, and bind-mounts the
// store's directories into every sandbox. Whoever can change one of them, or
// a directory on the way to them, can run their own program as the user's
// cargo, receive the user's events and send the user's builds elsewhere. So
// before Ferry trusts a store path it checks it, for the calling user (the
// effective uid):
//
//   - Ferry's own directories (the store parent, bin/, bus/ and the
//     repository's store dir), where they exist, are owned by the caller and
//     writable by neither group nor others.
//   - Every directory that leads to them is owned by the caller or by root,
//     and one that group or others may write to must be sticky (like /tmp):
//     in a sticky directory nobody but root and an entry's owner can rename
//     or remove that entry, and the entry itself is checked next.
//   - Symlinks are followed the way the kernel follows them, and every
//     directory and link met on the way is checked, so the real directories
//     are judged and so is each directory holding a link; a link must be
//     owned by the caller or root.
//   - What does not exist yet is fine: Ferry creates it with MkdirAll,
//     never writable by group or others whatever the umask, and checks
//     again afterwards, so a directory someone else slips in first is
//     refused then.
//
// Root is not exempt: root trusting a directory another user owns is how
// that user gets root's builds.
//
// Inside a user namespace that does not map root (an agent's sandbox, run
// by an ordinary user, maps only the caller), every directory of root's
// shows the overflow uid (nobody, 65534), and so does one of any other user
// the namespace leaves out: from inside they cannot be told apart. There a
// directory on the way owned by the overflow uid is judged as root's would
// be (the command that made the sandbox checked the path outside it);
// Ferry's own directories must still be the caller's.
//
// Cost (BenchmarkCheckOwner, on a shared 2-core machine, ext4, warm dentry
// cache): CheckOwner on a store six directories deep makes ten lstat calls,
// 26-37 µs in all. `ferry list` checks once (7 more stat calls under strace);
// `ferry spawn` walks the path eight times (Load, Init twice in the command
// and twice in agent.Spawn, InstallShim twice, bus discovery), about 0.3 ms
// of a spawn. The shim, which runs on every cargo call, only lstats the
// store's own directories (CheckOwnDirs: three calls, 5-8 µs, against a
// shim overhead of several milliseconds): the path to them was checked by
// the command that installed the shim, and directories owned by the caller
// or root do not change hands behind the caller's back.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/failure"
)

// What the checked directories are called in refusals.
const (
	RoleParent = "store parent"
	RoleShim   = "shim directory"
	RoleBus    = "bus directory"
	RoleStore  = "store"
)

// OwnerError says why a directory on a store path cannot be trusted: who
// owns it, with what mode, and which path it was met on.
type OwnerError struct {
	Role   string      // what was checked: RoleParent, RoleShim, RoleBus, RoleStore
	Path   string      // the path that was checked, as given
	Dir    string      // the real path of the directory or symlink refused
	Own    bool        // Dir is the checked directory itself, not a way to it
	Link   bool        // Dir is a symlink
	Uid    int         // Dir's owner
	Mode   fs.FileMode // Dir's permission bits, with ModeSticky
	Caller int         // the effective uid that checked

	owner bool // the owner is what is wrong (else the mode)
}

// Reason is what is wrong with Dir, in a few words.
func (e *OwnerError) Reason() string {
	switch {
	case e.owner:
		return "owned by " + DescribeUser(e.Uid)
	case e.Own && e.Mode&0o020 != 0 && e.Mode&0o002 != 0:
		return "writable by group and others"
	case e.Own && e.Mode&0o020 != 0:
		return "writable by its group"
	case e.Own:
		return "writable by others"
	case e.Mode&0o002 != 0:
		return "writable by others and not sticky"
	default:
		return "writable by its group and not sticky"
	}
}

func (e *OwnerError) Error() string {
	what := e.Dir
	if e.Link {
		what = "the symlink " + e.Dir
	}
	if e.owner {
		return fmt.Sprintf("%s is owned by %s, mode %s, and Ferry runs as %s",
			what, DescribeUser(e.Uid), modeString(e.Mode), DescribeUser(e.Caller))
	}
	return fmt.Sprintf("%s is %s (mode %s, owner %s)", what, e.Reason(), modeString(e.Mode), DescribeUser(e.Uid))
}

// hint says how to fix e: make the directory the caller's alone, or choose
// a store of the caller's own.
func (e *OwnerError) hint() string {
	const elsewhere = "set FERRY_HOME (or [store] dir in ferry.toml) to a directory only you can change, such as ~/.cache/ferry"
	q := shellQuote(e.Dir)
	you := strconv.Itoa(e.Caller)
	if name := userName(e.Caller); name != "" {
		you = name
	}
	switch {
	case e.Link:
		return fmt.Sprintf("%s can point the symlink anywhere: %s, by its real path", DescribeUser(e.Uid), elsewhere)
	case e.owner && e.Own:
		return fmt.Sprintf("%s;\nor, if %s should be yours, look at what is in it (anyone could have put a cargo there), then as root: chown -R %s %s && chmod -R go-w %s",
			elsewhere, e.Dir, you, q, q)
	case e.owner:
		return fmt.Sprintf("%s can replace anything below %s: %s;\nor, if it should not be theirs, as root: chown root %s && chmod go-w %s",
			DescribeUser(e.Uid), e.Dir, elsewhere, q, q)
	case e.Own:
		return fmt.Sprintf("run `chmod go-w %s` and check that nobody else changed what is in it; or %s", q, elsewhere)
	case e.Uid == 0:
		return fmt.Sprintf("as root, run `chmod go-w %s` (or `chmod +t %s` for a shared directory like /tmp); or %s", q, q, elsewhere)
	default:
		return fmt.Sprintf("run `chmod go-w %s` (or `chmod +t %s` for a shared directory like /tmp); or %s", q, q, elsewhere)
	}
}

// refusal wraps e as the failure a command reports (failure.Refused).
func (e *OwnerError) refusal() error {
	return failure.Wrap(failure.Refused, e, e.hint(), "refused the %s %s", e.Role, e.Path)
}

// CheckOwned checks the directory dir, which Ferry is about to trust as
// role (RoleBus, ...), and the way to it, by the rules in this file. A
// refusal is a failure.Refused wrapping an *OwnerError. dir and any part of
// the way to it may be missing.
func CheckOwned(role, dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	c := checker{caller: os.Geteuid(), role: role, path: dir}
	_, _, err = c.walk("/", dir)
	return err
}

// CheckOwner checks the store parent and the way to it, then bin/, bus/ and
// the store dir in it (see CheckOwned). Commands call it before they use the
// store; Init and InstallShim call it again before they write.
func (s *Store) CheckOwner() error {
	c := checker{caller: os.Geteuid(), role: RoleParent, path: s.Parent}
	real, exists, err := c.walk("/", s.Parent)
	if err != nil || !exists {
		return err
	}
	for _, d := range []struct{ role, path string }{
		{RoleShim, s.ShimDir()},
		{RoleBus, s.BusDir()},
		{RoleStore, s.Dir},
	} {
		c.role, c.path = d.role, d.path
		if _, _, err := c.walk(real, filepath.Base(d.path)); err != nil {
			return err
		}
	}
	return nil
}

// CheckOwnDirs checks only the store's own directories that exist (the
// parent, bin/ and the store dir), with one lstat each, following no
// symlink: the shim's check on every cargo call, after a command has
// checked the whole path with CheckOwner.
func (s *Store) CheckOwnDirs() error {
	caller := os.Geteuid()
	for _, d := range []struct{ role, path string }{
		{RoleParent, s.Parent},
		{RoleShim, s.ShimDir()},
		{RoleStore, s.Dir},
	} {
		var st unix.Stat_t
		if err := unix.Lstat(d.path, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return &fs.PathError{Op: "lstat", Path: d.path, Err: err}
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			// A link the user made on purpose; CheckOwner judged its target.
			continue
		}
		c := checker{caller: caller, role: d.role, path: d.path}
		if err := c.judge(d.path, &st, true); err != nil {
			return err
		}
	}
	return nil
}

// maxLinks bounds the symlinks followed in one walk, as the kernel does
// (ELOOP after 40).
const maxLinks = 40

// checker walks one path for one caller.
type checker struct {
	caller int
	role   string // what the path is, for refusals
	path   string // the path as given, for refusals
}

// walk resolves rel (absolute, or relative to base, a real directory that
// has been checked already; "/" is checked here) component by component,
// following symlinks, and judges every directory and symlink it meets: the
// final directory by the rule for Ferry's own directories, the others by the
// rule for the way to them. It returns the real path of the final directory
// and whether it exists; at the first missing component it stops, since
// Ferry creates the rest.
func (c *checker) walk(base, rel string) (real string, exists bool, err error) {
	cur := base
	if base == "/" || filepath.IsAbs(rel) {
		cur = "/"
		if err := c.lstatJudge("/", len(split(rel)) == 0); err != nil {
			return "", false, err
		}
	}
	todo := split(rel)
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		if name == ".." {
			cur = filepath.Dir(cur)
			if len(todo) == 0 {
				// The path ends in "..": judge where it lands as the final
				// directory (it was met before only as a way).
				if err := c.lstatJudge(cur, true); err != nil {
					return "", false, err
				}
			}
			continue
		}
		next := filepath.Join(cur, name)
		var st unix.Stat_t
		if err := unix.Lstat(next, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return filepath.Join(append([]string{next}, todo...)...), false, nil
			}
			if errors.Is(err, unix.ENOTDIR) {
				return "", false, failure.Wrap(failure.Prereq, err,
					"set FERRY_HOME (or [store] dir in ferry.toml) to a directory",
					"the %s %s: %s is not a directory", c.role, c.path, cur)
			}
			return "", false, &fs.PathError{Op: "lstat", Path: next, Err: err}
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if links++; links > maxLinks {
				return "", false, &fs.PathError{Op: "resolve", Path: c.path, Err: unix.ELOOP}
			}
			if err := c.judge(next, &st, false); err != nil {
				return "", false, err
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", false, err
			}
			if filepath.IsAbs(target) {
				cur = "/" // judged when the walk began
			}
			todo = append(split(target), todo...)
			continue
		}
		if err := c.judge(next, &st, len(todo) == 0); err != nil {
			return "", false, err
		}
		cur = next
	}
	return cur, true, nil
}

// lstatJudge judges the directory dir, which exists.
func (c *checker) lstatJudge(dir string, own bool) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: dir, Err: err}
	}
	return c.judge(dir, &st, own)
}

// judge applies the rules to one directory or symlink met at real path p;
// own says it is the checked directory itself.
func (c *checker) judge(p string, st *unix.Stat_t, own bool) error {
	uid := int(st.Uid)
	mode := fs.FileMode(st.Mode & 0o777)
	if st.Mode&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	link := st.Mode&unix.S_IFMT == unix.S_IFLNK
	own = own && !link
	var ownerBad, modeBad bool
	switch {
	case link:
		// A symlink's mode means nothing; its owner can replace it.
		ownerBad = uid != c.caller && uid != 0 && !unmappedOwner(uid)
	case own:
		ownerBad, modeBad = uid != c.caller, mode&0o022 != 0
	default:
		ownerBad = uid != c.caller && uid != 0 && !unmappedOwner(uid)
		modeBad = mode&0o022 != 0 && mode&fs.ModeSticky == 0
	}
	if !ownerBad && !modeBad {
		return nil
	}
	e := &OwnerError{Role: c.role, Path: c.path, Dir: p, Own: own, Link: link, Uid: uid, Mode: mode, Caller: c.caller, owner: ownerBad}
	return e.refusal()
}

// unmappedOwner reports whether uid is the overflow uid of a user namespace
// this process runs in that leaves uids unmapped: the owner shown for
// root's files and for every other uid the namespace does not map. It reads
// /proc only when asked, which is only for an owner that is neither the
// caller nor root.
func unmappedOwner(uid int) bool {
	userns.once.Do(func() {
		userns.overflow = -1
		b, err := os.ReadFile("/proc/sys/kernel/overflowuid")
		if err != nil {
			return
		}
		overflow, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return
		}
		m, err := os.ReadFile("/proc/self/uid_map")
		// The initial namespace maps every uid to itself, in one line.
		if err != nil || strings.Join(strings.Fields(string(m)), " ") == "0 0 4294967295" {
			return
		}
		userns.overflow = overflow
	})
	return userns.overflow >= 0 && uid == userns.overflow
}

var userns struct {
	once     sync.Once
	overflow int // -1 outside a user namespace that leaves uids unmapped
}

// split splits a path into its components, without empty ones and ".".
func split(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" && s != "." {
			out = append(out, s)
		}
	}
	return out
}

// MkdirAll makes dir and its missing parents, like os.MkdirAll, but leaves
// none of the directories it creates writable by group or others, whatever
// the umask: with a umask of 002 a plain mkdir makes directories the owner
// check would refuse. Directories that exist are left alone; the check
// judges them.
func MkdirAll(dir string, perm fs.FileMode) error {
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err == nil {
		if fi.IsDir() {
			return nil
		}
		return &fs.PathError{Op: "mkdir", Path: dir, Err: unix.ENOTDIR}
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := MkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil {
		// Made meanwhile by someone else: fine if a directory, as
		// os.MkdirAll says; the owner check decides whether to trust it.
		if fi, lerr := os.Lstat(dir); lerr == nil && fi.IsDir() {
			return nil
		}
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: dir, Err: err}
	}
	if st.Mode&0o022 != 0 {
		if err := unix.Chmod(dir, uint32(st.Mode)&0o7777&^0o022); err != nil {
			return &fs.PathError{Op: "chmod", Path: dir, Err: err}
		}
	}
	return nil
}

// DescribeUser is "name (uid N)", or "uid N" for a uid /etc/passwd does not
// name. The store package reads /etc/passwd itself rather than use os/user,
// which would link cgo into the shim.
func DescribeUser(uid int) string {
	if name := userName(uid); name != "" {
		return fmt.Sprintf("%s (uid %d)", name, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}

func userName(uid int) string {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return ""
	}
	want := []byte(strconv.Itoa(uid))
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := bytes.SplitN(line, []byte(":"), 4)
		if len(f) == 4 && bytes.Equal(f[2], want) {
			return string(f[0])
		}
	}
	return ""
}

// modeString is a directory's mode in octal, with the sticky bit: 0755, 1777.
func modeString(m fs.FileMode) string {
	n := uint32(m.Perm())
	if m&fs.ModeSticky != 0 {
		n |= 0o1000
	}
	return fmt.Sprintf("%04o", n)
}

// shellQuote quotes p for a shell command in a hint when it needs it.
func shellQuote(p string) string {
	if strings.IndexFunc(p, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r == '+' || r == ',' || r == ':' || r == '@' ||
			'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	}) < 0 {
		return p
	}
	return "'" + strings.ReplaceAll(p, "'", `'\''`) + "'"
}
