package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// runSteps makes a created namespace's mounts (compile's steps; the C
// constructor in package inplace reads the same steps). On failure it
// returns the step's name, and the path when the store (or a covered root)
// holds something Ferry did not make there (a link).
func runSteps(steps []Step) (string, string, error) {
	r := &stepper{root: &storeRoot{fd: -1}, cover: -1, pins: map[string]int{}}
	for _, st := range steps {
		if path, err := r.run(st); err != nil {
			return st.Name, path, err
		}
	}
	return "", "", nil
}

type stepper struct {
	root    *storeRoot
	cover   int    // a descriptor of the root just covered, or -1
	coverAt string // its path
	pins    map[string]int
}

// resolve names path for mount(2): pinned below the store, as it is
// elsewhere. A path that cannot be pinned is returned as the failure's path.
func (r *stepper) resolve(path string) (string, string, error) {
	q, err := r.root.pin(path)
	if err != nil {
		return "", path, err
	}
	return q, "", nil
}

func (r *stepper) run(st Step) (string, error) {
	switch st.Op {
	case opRoot:
		root, err := openStoreRoot(st.A)
		if err != nil {
			return st.A, err
		}
		r.root = root
	case opPin:
		fd, err := r.open(st.A)
		if err != nil {
			return st.A, err
		}
		r.pins[st.B] = fd
	case opCheck:
		if err := r.root.check(st.A); err != nil {
			return st.A, err
		}
	case opBind:
		if strings.Contains(st.C, "?") {
			if _, err := os.Lstat(st.A); errors.Is(err, os.ErrNotExist) {
				return "", nil
			}
		}
		src, path, err := r.resolve(st.A)
		if err != nil {
			return path, err
		}
		dst, path, err := r.resolve(st.B)
		if err != nil {
			return path, err
		}
		flags := uintptr(unix.MS_BIND)
		if strings.Contains(st.C, "r") {
			flags |= unix.MS_REC
		}
		return "", unix.Mount(src, dst, "", flags, "")
	case opOverlay:
		err := unix.Mount("overlay", st.A, "overlay", 0, st.B)
		if err == unix.EINVAL && st.C != "" {
			err = unix.Mount("overlay", st.A, "overlay", 0, st.C) // a kernel before 5.10 does not know volatile
		}
		return "", err
	case opCover:
		if r.cover >= 0 {
			unix.Close(r.cover)
		}
		fd, err := unix.Open(st.A, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		r.cover, r.coverAt = fd, st.A
	case opKeep:
		fd, ok := r.pins[strings.TrimPrefix(st.A, "@")]
		if !ok {
			return "", fmt.Errorf("no descriptor %s", st.A)
		}
		if r.cover < 0 || !below(st.B, r.coverAt) {
			return "", fmt.Errorf("%s is not below a covered root", st.B)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(st.B, r.coverAt), "/")
		at, err := unix.Openat2(r.cover, rel, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return st.B, err
		}
		defer unix.Close(at)
		return "", unix.Mount(fdPath(fd), fdPath(at), "", unix.MS_BIND|unix.MS_REC, "")
	case opTmpfs:
		if fi, err := os.Stat(st.A); err != nil || !fi.IsDir() {
			return "", nil
		}
		return "", unix.Mount("tmpfs", st.A, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, st.B)
	case opMask:
		_, path, err := mask(r.root, []string{st.A})
		return path, err
	case opReadOnly:
		if st.B == "r" {
			return "", unix.MountSetattr(unix.AT_FDCWD, st.A, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
		}
		return "", readOnly(st.A)
	case opWritable:
		if strings.Contains(st.C, "?") {
			if _, err := os.Lstat(st.A); errors.Is(err, os.ErrNotExist) {
				return "", nil
			}
		}
		err := unix.MountSetattr(unix.AT_FDCWD, st.A, 0, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY})
		if err == unix.EPERM {
			// Read-only on the host already (the mount came locked so
			// into the namespace): it stays as the host has it.
			err = nil
		}
		return "", err
	case opDropCaps:
		return "", dropMountCap()
	default:
		return "", fmt.Errorf("unknown step %q", st.Op)
	}
	return "", nil
}

// open pins path: below the store without following a link, elsewhere as
// it resolves now (before the cover that follows hides it).
func (r *stepper) open(path string) (int, error) {
	if rel, ok := r.root.below(path); ok {
		if rel == "." {
			return unix.Dup(r.root.fd)
		}
		return unix.Openat2(r.root.fd, rel, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
	}
	return unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
}

func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// dropMountCap drops CAP_SYS_ADMIN from the bounding set and empties the
// inheritable set, so that the command cannot mount or unmount in the
// namespace, whatever it runs as: a command running as root there (Ferry
// run as root) would otherwise get the capability back at its exec (from
// the bounding set, or the inheritable set the ambient capabilities that
// made the mounts needed) and could undo the read-only host. A caller
// without CAP_SETPCAP here runs as another user than root, and gets no
// capability at exec anyway.
func dropMountCap() error {
	err := unix.Prctl(unix.PR_CAPBSET_DROP, capSysAdmin, 0, 0, 0)
	if err == unix.EPERM && os.Getuid() != 0 {
		return nil
	}
	if err != nil {
		return err
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	return unix.Capset(&hdr, &data[0])
}

// checkWorld confirms that a joined namespace shows the host read-only and
// each of p's private layers mounted.
func checkWorld(p Plan) error {
	if !Sealed("/") {
		return errors.New("the host is writable in the joined namespace")
	}
	if len(p.Private) == 0 {
		return nil
	}
	mounts, err := ReadMountinfo("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	for _, l := range p.Private {
		if m := TopMount(mounts, l.Root); m == nil || !m.IsOverlay(l.Upper, l.Work) {
			return fmt.Errorf("%s is not the private layer on %s in the joined namespace", l.Root, l.Upper)
		}
	}
	return nil
}
