package sandbox

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/ferrydev/ferry/pkg/platform"
)

// Mount is one line of a /proc/<pid>/mountinfo.
type Mount struct {
	Point   string // where it is mounted, as the reading process sees it
	FSType  string
	Options map[string]string // the filesystem's own (super) options
}

// OverlayOn reports whether m is an overlay whose upper dir is upper or whose
// work dir is work: an overlay that writes into those directories. Paths
// are compared as the kernel prints them, resolved; callers resolve theirs.
func (m *Mount) OverlayOn(upper, work string) bool {
	if m.FSType != platform.FSOverlay {
		return false
	}
	u, w := m.Options["upperdir"], m.Options["workdir"]
	return (u != "" && u == filepath.Clean(upper)) || (w != "" && w == filepath.Clean(work))
}

// IsOverlay reports whether m is exactly the overlay with upper and work as
// its upper and work dirs.
func (m *Mount) IsOverlay(upper, work string) bool {
	return m.FSType == platform.FSOverlay && m.Options["upperdir"] == filepath.Clean(upper) && m.Options["workdir"] == filepath.Clean(work)
}

// ReadMountinfo parses a mountinfo file.
func ReadMountinfo(path string) ([]Mount, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseMountinfo(data)
}

// parseMountinfo parses lines of the form
//
//	36 35 98:0 /root /point rw,noatime shared:1 - ext4 /dev/vda rw,errors=continue
func parseMountinfo(data []byte) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 6 || sep < 0 {
			return nil, fmt.Errorf("mountinfo: malformed line %q", sc.Text())
		}
		m := Mount{Point: unescape(f[4]), Options: map[string]string{}}
		if sep+1 < len(f) {
			m.FSType = f[sep+1]
		}
		if sep+3 < len(f) {
			for _, o := range strings.Split(f[sep+3], ",") {
				k, v, _ := strings.Cut(o, "=")
				m.Options[k] = unescape(v)
			}
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// unescape undoes the kernel's octal escapes (\040 for a space, ...).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
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

// TopMount returns the mount on point that processes see (the last one
// mounted there), or nil.
func TopMount(mounts []Mount, point string) *Mount {
	point = filepath.Clean(point)
	for i := len(mounts) - 1; i >= 0; i-- {
		if mounts[i].Point == point {
			return &mounts[i]
		}
	}
	return nil
}

// NamespaceID names the mount namespace of a process ("mnt:[4026531841]");
// two processes with the same id share the namespace.
func NamespaceID(pid int, kind string) (string, error) {
	return os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
}

// pids lists the processes in /proc.
func pids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// InNamespace returns the processes this process can see in the mount
// namespace id (as NamespaceID names it), lowest pid first.
func InNamespace(id string) []int {
	var out []int
	for _, pid := range pids() {
		if got, err := NamespaceID(pid, "mnt"); err == nil && got == id {
			out = append(out, pid)
		}
	}
	return out
}

// LiveOverlay is an overlay mounted in some mount namespace, with the
// processes that see it.
type LiveOverlay struct {
	Lower, Upper, Work string
	Pids               []int // lowest first
}

// LiveOverlays scans every readable /proc/<pid>/mountinfo, one read per
// mount namespace and root, for overlays. Processes this one may not
// inspect are not seen, so the answer is a lower bound.
func LiveOverlays() []LiveOverlay {
	type key struct{ ns, root string }
	type layers struct{ lower, upper, work string }
	perNS := map[key][]layers{}
	users := map[layers]map[int]bool{}
	self := os.Getpid()
	for _, pid := range pids() {
		if pid == self {
			continue
		}
		ns, err := NamespaceID(pid, "mnt")
		if err != nil {
			continue
		}
		root, _ := os.Readlink(fmt.Sprintf("/proc/%d/root", pid))
		k := key{ns, root}
		found, seen := perNS[k]
		if !seen {
			mounts, err := ReadMountinfo(fmt.Sprintf("/proc/%d/mountinfo", pid))
			if err != nil {
				continue // exited, or not ours to read
			}
			for _, m := range mounts {
				if m.FSType == platform.FSOverlay {
					found = append(found, layers{m.Options["lowerdir"], m.Options["upperdir"], m.Options["workdir"]})
				}
			}
			perNS[k] = found
		}
		for _, l := range found {
			if users[l] == nil {
				users[l] = map[int]bool{}
			}
			users[l][pid] = true
		}
	}
	var out []LiveOverlay
	for l, ps := range users {
		o := LiveOverlay{Lower: l.lower, Upper: l.upper, Work: l.work}
		for pid := range ps {
			o.Pids = append(o.Pids, pid)
		}
		sort.Ints(o.Pids)
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Upper < out[j].Upper })
	return out
}

// OverlayUsers returns the processes that see an overlay mounted on upper
// or work (see LiveOverlays), lowest pid first.
func OverlayUsers(upper, work string) []int {
	upper, work = filepath.Clean(upper), filepath.Clean(work)
	seen := map[int]bool{}
	var out []int
	for _, o := range LiveOverlays() {
		if o.Upper == upper || o.Work == work {
			for _, pid := range o.Pids {
				if !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
		}
	}
	sort.Ints(out)
	return out
}

// MountedLowerIn reports whether one of the live overlays has dir as a lower
// layer (dir is resolved first, as the kernel prints paths).
func MountedLowerIn(live []LiveOverlay, dir string) bool {
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	for _, o := range live {
		for _, l := range strings.Split(o.Lower, ":") {
			if l == dir {
				return true
			}
		}
	}
	return false
}

// MountedLower reports whether a live overlay has dir as a lower layer.
func MountedLower(dir string) bool { return MountedLowerIn(LiveOverlays(), dir) }
