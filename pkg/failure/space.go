package failure

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Full is a filesystem that ran out of space, as the printer describes it.
type Full struct {
	Path       string // where the failed write went
	MountPoint string // the mount holding Path; "" when unknown
	Free       uint64 // bytes an unprivileged writer may still use (f_bavail, as df shows)
	Size       uint64 // the filesystem's size in bytes
	Measured   bool   // Free and Size are known
}

// where names the filesystem: its mount point, else a path on it, else "".
func (f Full) where() string {
	switch {
	case f.MountPoint != "":
		return f.MountPoint
	case f.Path != "":
		return "the filesystem holding " + f.Path
	}
	return ""
}

// String is the line the printer shows: "no space left on /mnt: 12 KiB free
// of 64 MiB".
func (f Full) String() string {
	where := f.where()
	switch {
	case where == "":
		return syscall.ENOSPC.Error() // nothing to add to the errno
	case !f.Measured:
		return "no space left on " + where
	}
	return fmt.Sprintf("no space left on %s: %s free of %s", where, Bytes(f.Free), Bytes(f.Size))
}

// Hint says what to do about a full filesystem.
func (f Full) Hint() string {
	where := f.where()
	if where == "" {
		where = "the full filesystem"
	}
	return "free space on " + where + " (`ferry gc` deletes bases nothing uses, `ferry rm NAME` removes an agent you are done with), then run the command again"
}

// spaceNote gives a full-filesystem error the path it failed to write, when
// its own chain names none (or names another filesystem's path), and the
// free space measured when it happened.
type spaceNote struct {
	full Full
	err  error
}

// Error is the cause's text: the note adds data, not words.
func (n *spaceNote) Error() string { return n.err.Error() }
func (n *spaceNote) Unwrap() error { return n.err }

// NoSpaceAt marks err, a write under path that failed, with path and the
// free space of path's filesystem now, when err's chain holds ENOSPC; other
// errors are returned unchanged. Call it where the chain names no path of
// the full filesystem (copy_file_range reports none; a child process only
// says "No space left on device"), and before cleaning up, so the figures
// show the filesystem as the failure left it. The outermost mark counts: a
// caller that knows where the write went (git's worktree add, which names
// files relative to the new worktree) can correct a callee's guess.
func NoSpaceAt(path string, err error) error {
	if err == nil || !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	return &spaceNote{full: Measure(path), err: err}
}

// NoSpaceSeen is NoSpaceAt for a write whose filesystem was watched while
// it ran: the note reports free, the least space seen, when that is less
// than what is free now (the failing program may have cleaned up since).
func NoSpaceSeen(path string, free uint64, err error) error {
	if err == nil || !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	n := &spaceNote{full: Measure(path), err: err}
	if n.full.Measured && free < n.full.Free {
		n.full.Free = free
	}
	return n
}

// Space returns the full filesystem err ran into, and false when err's chain
// holds no ENOSPC. The path is the one the outermost NoSpaceAt (or
// NoSpaceSeen) mark gave, measured then; else that of the innermost
// *os.PathError, or the new name of the innermost *os.LinkError, whose
// cause is ENOSPC, measured now. Without any path, Full names no
// filesystem.
func Space(err error) (Full, bool) {
	if err == nil || !errors.Is(err, syscall.ENOSPC) {
		return Full{}, false
	}
	var n *spaceNote
	if errors.As(err, &n) {
		return n.full, true
	}
	path := ""
	walk(err, func(e error) {
		switch e := e.(type) {
		case *os.PathError:
			if errors.Is(e.Err, syscall.ENOSPC) {
				path = e.Path
			}
		case *os.LinkError:
			if errors.Is(e.Err, syscall.ENOSPC) {
				path = e.New
			}
		}
	})
	if path == "" {
		return Full{}, true
	}
	return Measure(path), true
}

// spaceLeft is the free space under which OutOfSpace counts a filesystem as
// full: a few blocks, less than any write a tool gives up on.
const spaceLeft = 64 << 10

// OutOfSpace reports whether the filesystem holding path (or its nearest
// existing ancestor) has next to no space left for this process: for a
// failed program that does not say why (git writing a lock file says
// "couldn't write", without the errno), a full filesystem where it wrote
// is the likely cause. Root may write into the blocks a filesystem keeps
// back, so for root those count as free.
func OutOfSpace(path string) bool {
	dir := existingDir(path)
	if dir == "" {
		return false
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	free := st.Bavail
	if os.Geteuid() == 0 {
		free = st.Bfree
	}
	return free*uint64(st.Bsize) < spaceLeft
}

// walk calls f on every error in err's tree, outermost first, depth first.
func walk(err error, f func(error)) {
	for err != nil {
		f(err)
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, c := range j.Unwrap() {
				walk(c, f)
			}
			return
		}
		err = errors.Unwrap(err)
	}
}

// Measure statfs's the nearest existing directory at or above path: the
// free space and size of the filesystem that holds, or would hold, path.
func Measure(path string) Full {
	f := Full{Path: path}
	dir := existingDir(path)
	if dir == "" {
		return f
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil {
		f.Free = st.Bavail * uint64(st.Bsize)
		f.Size = st.Blocks * uint64(st.Bsize)
		f.Measured = true
	}
	f.MountPoint = mountPoint(dir)
	return f
}

// existingDir returns the first of path and its ancestors that exists, with
// symlinks resolved: a failed write often leaves nothing at path itself.
func existingDir(path string) string {
	if path == "" {
		return ""
	}
	p, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	for {
		if fi, err := os.Stat(p); err == nil {
			if !fi.IsDir() {
				p = filepath.Dir(p)
			}
			if r, err := filepath.EvalSymlinks(p); err == nil {
				return r
			}
			return p
		}
		parent := filepath.Dir(p)
		if parent == p {
			return ""
		}
		p = parent
	}
}

// mountPoint returns the mount point, in this process's mount namespace,
// of the filesystem holding dir (resolved): the longest mount point in
// /proc/self/mountinfo that contains it, so a bind mount counts as its own
// mount point, as df shows it.
func mountPoint(dir string) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	best := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mount-point options ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if within(dir, mp) && len(mp) >= len(best) {
			best = mp // later lines are mounted on top of earlier ones
		}
	}
	return best
}

func within(path, dir string) bool {
	return dir == "/" || path == dir || strings.HasPrefix(path, dir+"/")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Bytes formats n in binary units: "0 B", "812 KiB", "1.5 GiB".
func Bytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + " B"
	}
	v, i := float64(n), 0
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	suffix := []string{"B", "KiB", "MiB", "GiB", "TiB"}[i]
	if v < 10 {
		return fmt.Sprintf("%.1f %s", v, suffix)
	}
	return fmt.Sprintf("%.0f %s", v, suffix)
}
