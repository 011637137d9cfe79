package fork

import (
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/lifecycle"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/store"
)

// Overlay forks by copying nothing: the agent's target is an overlayfs with
// the base target as its read-only lower layer and the agent's own upper/
// and work/ dirs, mounted inside the agent's namespace (package sandbox,
// and the join-or-create protocol in package lifecycle). Spawn makes two
// empty directories, so its cost does not grow with the target; the
// kernel copies a file up into upper/ when Cargo first writes it,
// preserving its mtime, and never writes to the lower. The fork exists
// only inside a namespace that has it mounted: on the host, AgentDir/upper
// holds only what the agent changed.
func Overlay() Backend { return overlayBackend{} }

type overlayBackend struct{}

func (overlayBackend) Name() string { return NameOverlay }

func (overlayBackend) Needs() Needs { return Needs{Overlay: true, Sandbox: true} }

func (overlayBackend) Cost() string {
	return "forks copy nothing, and an agent's processes share one namespace, entered through its mount lock"
}

// Upper and Work are an overlay agent's layer dirs.
func (p Paths) Upper() string { return store.AgentFiles(p.AgentDir).Upper }
func (p Paths) Work() string  { return store.AgentFiles(p.AgentDir).Work }

// Fork makes upper/ and work/, empty, after checking that the base target
// is a directory overlayfs can name. Both are made in a temporary sibling
// and renamed into place last, so a fork is finished or absent.
func (overlayBackend) Fork(p Paths) (Stats, error) {
	start := time.Now()
	var st unix.Stat_t
	if err := unix.Stat(p.BaseTarget, &st); err != nil {
		return Stats{}, fmt.Errorf("fork %s: %w", p.BaseTarget, &os.PathError{Op: "stat", Path: p.BaseTarget, Err: err})
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return Stats{}, fmt.Errorf("fork %s: not a directory", p.BaseTarget)
	}
	for _, d := range []string{p.BaseTarget, p.AgentDir} {
		if err := expressible(d); err != nil {
			return Stats{}, err
		}
	}
	// An existing target counts too: a fork made by another backend is
	// not the overlay's, and never merged into.
	for _, d := range []string{p.Upper(), p.Work(), p.Target()} {
		if err := checkAbsent(d); err != nil {
			return Stats{}, fmt.Errorf("fork %s into %s: %w", p.BaseTarget, p.AgentDir, err)
		}
	}
	tmp, err := os.MkdirTemp(p.AgentDir, ".overlay.tmp-*")
	if err != nil {
		return Stats{}, err
	}
	ok := false
	defer func() {
		if !ok {
			platform.RemoveTree(tmp)
		}
	}()
	// The layers are made in tmp under their final names, then renamed.
	if err := lifecycle.NewLayers(tmp, &st); err != nil {
		return Stats{}, err
	}
	staged := store.AgentFiles(tmp)
	// work first: an upper without its work dir is unusable, so its
	// presence marks a finished fork. A plain rename would replace an empty
	// directory that appeared since the check.
	if err := renameNoReplace(staged.Work, p.Work()); err != nil {
		return Stats{}, err
	}
	if err := renameNoReplace(staged.Upper, p.Upper()); err != nil {
		os.Remove(p.Work())
		return Stats{}, err
	}
	ok = true
	os.Remove(tmp)
	// Beside what the spawn does next (the link, the settling, the
	// record): advice only, so nothing waits for it, and a process that
	// ends first has only asked for less.
	go warmNoOpReads(p.BaseTarget)
	return Stats{Dirs: 1, Duration: time.Since(start)}, nil
}

// TargetSpec is the overlay to mount on the canonical target.
func (overlayBackend) TargetSpec(p Paths) TargetSpec {
	return TargetSpec{Overlay: &OverlaySpec{Lower: p.BaseTarget, Upper: p.Upper(), Work: p.Work()}}
}

// PrivateBytes is the upper dir's usage: everything the agent wrote or
// copied up. The lower is the base's and shared.
func (overlayBackend) PrivateBytes(p Paths) (int64, error) {
	return walkPrivate(p.Upper(), func(_ string, st *unix.Stat_t) (int64, error) {
		return allocated(st), nil
	})
}

// expressible refuses a path overlayfs's mount options cannot carry.
func expressible(path string) error {
	if strings.ContainsAny(path, ",:\\") {
		return failure.New(failure.Refused,
			"move Ferry's store to a path without , : or \\ (FERRY_HOME or [store] dir in ferry.toml), or use backend copy",
			"overlay: %s holds a comma, colon or backslash, which overlayfs's mount options cannot express", path)
	}
	return nil
}
