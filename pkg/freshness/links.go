package freshness

import (
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/ferrydev/ferry/pkg/git"
	"golang.org/x/sys/unix"
)

// maxHops bounds the symlinks one resolution follows, as the kernel's
// ELOOP limit does.
const maxHops = 40

// resolution is where a path of a checkout leads when every symlink on the
// way is followed.
type resolution struct {
	isLink bool   // the path itself is a symlink
	text   string // its link text, when it is one
	loop   bool   // the chain does not end (too many links)
	// end is the absolute path reached: canonical as far as it exists, the
	// remaining components appended lexically once one is missing or not a
	// directory (a dangling link still leads somewhere, just not to a file).
	end string
}

// resolve follows rel (slash-separated, relative to root) the way the kernel
// would, component by component, so a link anywhere on the way, inside the
// checkout or out of it, is taken into account. root must be canonical.
func resolve(root, rel string) resolution {
	var r resolution
	p := filepath.Join(root, filepath.FromSlash(rel))
	if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		r.isLink = true
		r.text, _ = os.Readlink(p)
	}
	cur := root
	rest := splitPath(rel)
	hops := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			// cur never holds a symlink, so its parent is the lexical one.
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			r.end = filepath.Join(append([]string{next}, rest...)...)
			return r
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			hops++
			target, err := os.Readlink(next)
			if hops > maxHops || err != nil {
				r.loop = true
				return r
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			rest = append(splitPath(filepath.ToSlash(target)), rest...)
			continue
		}
		if len(rest) > 0 && !fi.IsDir() {
			// ENOTDIR: nothing exists below a file.
			r.end = filepath.Join(append([]string{next}, rest...)...)
			return r
		}
		cur = next
	}
	r.end = cur
	return r
}

func splitPath(p string) []string {
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// key is what two resolutions are compared by: where they end relative to
// their own checkout, or the absolute path when they leave it.
func (r resolution) key(root string) string {
	switch {
	case r.loop:
		return "loop"
	default:
		if rel, ok := within(root, r.end); ok {
			return "in:" + rel
		}
		return "out:" + r.end
	}
}

// within returns p relative to root, slash-separated ("" for root itself),
// if p is root or below it.
func within(root, p string) (string, bool) {
	if p == root {
		return "", true
	}
	prefix := root
	if !strings.HasSuffix(prefix, string(filepath.Separator)) {
		prefix += string(filepath.Separator)
	}
	if !strings.HasPrefix(p, prefix) {
		return "", false
	}
	return filepath.ToSlash(p[len(prefix):]), true
}

// linkCheck is one tracked symlink seen from both checkouts.
type linkCheck struct {
	path        string
	agent, base resolution
}

func (l linkCheck) differs(agentRoot, baseRoot string) bool {
	a, b := l.agent, l.base
	if !a.isLink && !b.isLink {
		return false
	}
	return a.isLink != b.isLink || a.text != b.text || a.key(agentRoot) != b.key(baseRoot)
}

// retargeted resolves, in both checkouts, every path that is a symlink in either
// tree or in either working tree: every tracked symlink, and every tracked
// file or directory that a checkout has as a link (a hook may have made
// one). It returns the ones whose resolution differs, sorted by path.
func retargeted(agentRoot, baseRoot string, agentIndex, baseTree []git.Entry) []linkCheck {
	paths := map[string]bool{}
	for _, list := range [][]git.Entry{agentIndex, baseTree} {
		for _, e := range list {
			paths[e.Path] = true
		}
		for _, d := range git.TrackedDirs(list) {
			if d != "" {
				paths[d] = true
			}
		}
	}
	links := map[string]bool{}
	for _, list := range [][]git.Entry{agentIndex, baseTree} {
		for _, e := range list {
			if e.Mode == git.ModeSymlink {
				links[e.Path] = true
			}
		}
	}
	var rest []string
	for p := range paths {
		if !links[p] {
			rest = append(rest, p)
		}
	}
	var agentLinks map[string]bool
	done := make(chan struct{})
	go func() {
		agentLinks = symlinks(agentRoot, rest)
		close(done)
	}()
	baseLinks := symlinks(baseRoot, rest)
	<-done
	for p := range agentLinks {
		links[p] = true
	}
	for p := range baseLinks {
		links[p] = true
	}
	var out []linkCheck
	for p := range links {
		l := linkCheck{path: p, agent: resolve(agentRoot, p), base: resolve(baseRoot, p)}
		if l.differs(agentRoot, baseRoot) {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

func isSymlink(root, rel string) bool {
	fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(rel)))
	return err == nil && fi.Mode()&os.ModeSymlink != 0
}

// symlinks returns which of paths (slash-separated, relative to root) are
// symlinks in root, as isSymlink of each would tell: each parent directory
// is opened once (following links, as lstat follows the components above
// the last) and its entries are stat'ed relative to it, not following the
// last, on a few goroutines; a directory that does not open is left to
// isSymlink. A stat by the full path resolved every
// component again: on BenchmarkVerify the serial lstats were 13% of the
// comparison's CPU.
func symlinks(root string, paths []string) map[string]bool {
	byDir := map[string][]string{}
	for _, p := range paths {
		d, name := path.Split(p)
		byDir[d] = append(byDir[d], name)
	}
	dirs := make(chan string, len(byDir))
	for d := range byDir {
		dirs <- d
	}
	close(dirs)
	var mu sync.Mutex
	out := map[string]bool{}
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(byDir)) {
		wg.Go(func() {
			var st unix.Stat_t
			for d := range dirs {
				fd, err := unix.Open(filepath.Join(root, filepath.FromSlash(d)), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				for _, name := range byDir[d] {
					var link bool
					if err == nil {
						link = unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
					} else {
						// Not there, or searchable but not readable:
						// lstat tells, as before.
						link = isSymlink(root, d+name)
					}
					if link {
						mu.Lock()
						out[d+name] = true
						mu.Unlock()
					}
				}
				if err == nil {
					unix.Close(fd)
				}
			}
		})
	}
	wg.Wait()
	return out
}

// exclusion is the set of agent paths that a retargeted link leads to, in
// either checkout: each such path and everything below it.
type exclusion map[string]bool

// add excludes, for each end of l that lies in either checkout, the same
// relative path in the agent's, and the link's own path.
func (x exclusion) add(l linkCheck, agentRoot, baseRoot string) {
	x[l.path] = true
	for _, r := range []resolution{l.agent, l.base} {
		if r.loop {
			continue
		}
		for _, root := range []string{agentRoot, baseRoot} {
			if rel, ok := within(root, r.end); ok {
				x[rel] = true
			}
		}
	}
}

// covers reports whether rel or one of its ancestors is excluded.
func (x exclusion) covers(rel string) bool {
	if len(x) == 0 {
		return false
	}
	for p := rel; ; p = path.Dir(p) {
		if p == "." || p == "/" {
			p = ""
		}
		if x[p] {
			return true
		}
		if p == "" {
			return false
		}
	}
}

// LinkRetargeted returns the paths, sorted, of the symlinks that resolve
// differently in the agent's checkout and the base's: a different place in
// the checkout, into or out of it, another path outside it, other link text,
// or a link in only one of them. Units that read an input through one of them
// need their dep-info invalidated under checksum freshness (see the
// Freshness modes of the architecture contract). Besides the tracked
// symlinks of either tree it lists any tracked path that is a symlink in
// either working tree.
func LinkRetargeted(in Input) ([]string, error) {
	agentRoot, baseRoot, err := roots(in)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range retargeted(agentRoot, baseRoot, in.AgentIndex, in.BaseTree) {
		out = append(out, l.path)
	}
	return out, nil
}
