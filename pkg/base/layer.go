package base

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/internal/failpoint"
	"github.com/ferrydev/ferry/pkg/base/fold"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/store"
)

// Layered refreshes. A seeded refresh starts from its seed's target. It
// builds on an overlay of it where it can: the seed's target is the
// read-only lower layer, the new base's layer/upper the upper one, and the
// warm commands see the merged view at the canonical target path and write
// only into the upper. Once they are done, the upper is folded into a plain
// target (fold.Fold): what the build did not change becomes hard links of
// the seed's files. So the refresh costs the change plus one link per
// unchanged file, and takes on disk the bytes the build wrote; and the links
// are laid while the warm commands run (finishing.prefold), not before them.
//
// Where the store's filesystem clones files (XFS, btrfs), cloneSeed could
// reflink the seed's target instead, which costs per file, not per byte,
// but before the warm commands can start: on the benchmark's large
// workspace on XFS (7,600 target files; make bench, median of 3 rounds)
// the clone alone took 0.41 s, a cloned refresh 1.72 s against 0.70 s of
// plain cargo's incremental build, a layered one 1.35 s against 0.74 s.
// So a store that
// clones files clones only where no overlay is had (bases built at host
// paths, [base] layered off, no unprivileged overlay). Elsewhere (ext4) a
// copy costs the target's bytes twice over, in time and on disk: 36 s of a
// 52.6 s refresh of a 6.6 GB target.
//
// The ready base is then a plain directory like any other: agents fork it,
// the seal covers it, publishing sends it, gc removes it, and none of them
// knows of layers; a chain of refreshes is never deeper than one. Sharing
// inodes between bases is safe because a ready base's files are never
// written (invariant 2): sandboxes mount the store read-only, every fork
// backend gives an agent new inodes (a clone, a copy, an overlay's copy-up),
// and a write made on the host moves a file's change time, which the seal
// of every base holding the inode then shows (Verify). Linking a seed's
// file into a new base moves its change time and link count too, as
// removing a base that shares it does (the inodes live on in the bases
// that still link them): the seal hashes neither for a regular file, and
// the fold, the pruning after it and every removal run in link windows
// (links.go), which the seal's check of change times passes.
//
// The overlay is mounted in the warm commands' user namespace, so a base
// built at host paths, a store whose path overlayfs cannot name, and a
// kernel without unprivileged overlays get the copy. SeedMethod says which
// one a store gets, and ferry doctor shows it.

// How a refresh starts from its seed (base.json's seed_by).
const (
	SeedByReflink = "reflink"
	SeedByLayer   = "layer"
	SeedByCopy    = "copy"
)

// SeedHost is what decides how a refresh starts from its seed on a host:
// what the store's probes found, and how bases build.
type SeedHost struct {
	StoreDir string
	// Clones is whether files clone in the store (fork.ReflinkBlocker).
	Clones bool
	// Overlay is what keeps an unprivileged overlay with its upper in the
	// store from mounting (platform's OverlayBlocker), nil when it
	// mounts. Asked only when the answer matters (OverlayProbe).
	Overlay      *platform.Blocker
	OverlayProbe func() (*platform.Blocker, error)
	HostPaths    bool // bases build without the namespace sandbox
	Layered      bool // [base] layered
}

// SeedMethod says how a refresh on h starts from its seed's target, and,
// when it copies, why it does not do better. Layered first, then a clone,
// then a copy. A probe that cannot run leaves the next method, with the
// probe's error as the reason.
func SeedMethod(h SeedHost) (method, why string) {
	var without string // why there is no layer
	switch {
	case h.HostPaths:
		without = "bases build at host paths, without the user namespace an overlay is mounted in"
	case !h.Layered:
		without = "[base] layered is off"
	case strings.ContainsAny(h.StoreDir, ",:\\"):
		without = "its path holds , : or \\, which overlayfs's mount options cannot name"
	default:
		b := h.Overlay
		var err error
		if h.OverlayProbe != nil {
			b, err = h.OverlayProbe()
		}
		switch {
		case err != nil:
			without = "the overlay probe failed: " + err.Error()
		case b != nil:
			without = fmt.Sprintf("an unprivileged overlay does not mount there (%s): %s", strings.TrimSuffix(b.Problem, "."), b.Remedy)
		default:
			return SeedByLayer, ""
		}
	}
	if h.Clones {
		return SeedByReflink, ""
	}
	return SeedByCopy, "the store's filesystem cannot clone files, and " + without
}

// probeSeeding starts the probes SeedMethod needs of store dir on this
// machine: whether files clone there, and, when bases are layered, whether
// an overlay mounts. A refresh starts them with its
// checkout, before the plan resolves: each runs a process or a child of
// its own (6-11 ms on the benchmark's large workspace), which used to run
// after the seed was chosen, while the build waited for it.
func probeSeeding(dir string, layered bool) task[SeedHost] {
	return begin(func() (SeedHost, error) {
		h := SeedHost{StoreDir: dir, Layered: layered}
		clones, err := fork.ReflinkBlocker(dir)
		if err != nil {
			return h, err
		}
		h.Clones = clones == nil
		if layered && !strings.ContainsAny(dir, ",:\\") {
			b, err := platform.Real().OverlayBlocker(dir)
			h.OverlayProbe = func() (*platform.Blocker, error) { return b, err }
		}
		return h, nil
	})
}

// seedMethodHere is SeedMethod for base r, from the probes probeSeeding
// started.
func seedMethodHere(probed task[SeedHost], r *Record) (method, why string) {
	h, err := probed()
	if err != nil {
		return SeedByCopy, "the clone probe failed: " + err.Error()
	}
	h.HostPaths = r.HostPaths()
	return SeedMethod(h)
}

// seedWords says in a clause how r started from its seed.
func seedWords(method, why string) string {
	switch method {
	case SeedByReflink:
		return "the seed's target is cloned (reflink)"
	case SeedByLayer:
		return "building on an overlay of the seed's target (layered: its unchanged files are linked in afterwards)"
	}
	return "the seed's target is copied: " + why
}

// layerOf is the overlay a layered refresh's warm commands write into, from
// startLayer until foldLayer.
func layerOf(r, seed *Record) fold.Layers {
	files := store.AgentFiles(store.BaseFiles(r.Dir).Layer)
	return fold.Layers{Lower: seed.Target, Upper: files.Upper}
}

// layerWork is the overlay's work dir.
func layerWork(r *Record) string { return store.AgentFiles(store.BaseFiles(r.Dir).Layer).Work }

// layerNext is where the seed's target is laid beside the layer
// (finishing.prefold).
func layerNext(r *Record) string { return store.BaseFiles(r.Dir).LayerNext }

// startLayer makes r's layer: an empty upper over seed's target (the
// overlay backend's fork, made in r's layer/), and, when the seed has other
// unit inputs, hides the seed's nested workspaces' target dirs there, as
// cloneSeed removes them from a clone.
func startLayer(r, seed *Record) error {
	dir := store.BaseFiles(r.Dir).Layer
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if _, err := fork.Overlay().Fork(fork.Paths{BaseTarget: seed.Target, AgentDir: dir}); err != nil {
		return fmt.Errorf("lay the seed's target under the new base: %w", err)
	}
	r.layer = ptr(layerOf(r, seed))
	failpoint.Hit("base/layer-laid")
	if seed.UnitInputs != r.UnitInputs {
		rel, _ := filepath.Rel(seed.Target, store.NestedTargets(seed.Target))
		if _, err := os.Lstat(store.NestedTargets(seed.Target)); err == nil {
			if err := r.layer.Hide(rel); err != nil {
				return err
			}
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// foldLayer folds r's layer into its target once the warm commands are
// done, and removes the layer's directory. A no-op for a base not building
// on a layer. With laid, the seed's target laid beside the layer while the
// warm commands ran (finishing.prefold), the upper's entries move into it
// (fold.Merge); without, the seed's entries are linked into the upper
// (fold.Fold). Both leave the same target.
func foldLayer(o Options, r *Record, laid task[fold.Stats]) error {
	if r.layer == nil {
		return nil
	}
	var prior fold.Stats
	if laid != nil {
		var err error
		if prior, err = laid(); err != nil {
			return fmt.Errorf("fold the new base's layer into its target: %w", err)
		}
	}
	var st fold.Stats
	// Folding links the seed's files and unlinks some of those links
	// again: in a link window.
	err := linking(o.Store, r.ID, func() error {
		folded := r.layer.Upper
		var err error
		if laid != nil {
			folded = layerNext(r)
			st, err = fold.Merge(r.layer.Upper, folded, prior)
		} else {
			st, err = fold.Fold(r.layer.Lower, r.layer.Upper)
		}
		if err != nil {
			return fmt.Errorf("fold the new base's layer into its target: %w", err)
		}
		failpoint.Hit("base/layer-folded")
		if err := os.Rename(folded, r.Target); err != nil {
			return err
		}
		failpoint.Hit("base/layer-moved")
		return platform.RemoveTree(store.BaseFiles(r.Dir).Layer)
	})
	if err != nil {
		return err
	}
	r.layer = nil
	r.Layer = &LayerCount{Own: st.Own, OwnBytes: st.OwnBytes, Linked: st.Linked + st.Symlinks + st.Dirs, Whiteouts: st.Whiteouts, Seconds: st.Duration.Seconds()}
	o.say("folded the layer: %d entries (%.1f MB) written by the build, %d taken from the seed (%.2fs)",
		st.Own, float64(st.OwnBytes)/1e6, r.Layer.Linked, st.Duration.Seconds())
	return nil
}

// LayerCount is what folding a layered refresh's layer found.
type LayerCount = record.LayerCount

// resetLayerWork gives the overlay an empty work dir before each mount:
// the warm commands' overlay is volatile (no sync of the whole filesystem
// as each command's namespace ends; base.json is written after a syncfs),
// and the kernel refuses to mount over the marker a volatile mount leaves.
func resetLayerWork(r *Record) error {
	w := layerWork(r)
	if err := platform.RemoveTree(w); err != nil {
		return err
	}
	return os.Mkdir(w, 0o755)
}

// shown returns the host path of rel (slash-separated, inside r's target)
// as r's warm build sees it, and whether it sees one: in the target, or in
// the layers while the build writes a layer.
func (r *Record) shown(rel string) (string, bool) {
	if r.layer != nil {
		return r.layer.Show(rel)
	}
	p := filepath.Join(r.Target, filepath.FromSlash(rel))
	_, err := os.Lstat(p)
	return p, err == nil
}

// writable returns the host path to write rel of r's target at: in the
// target, or in the upper layer (with its parent directories) while the
// build writes a layer.
func (r *Record) writable(rel string) (string, error) {
	if r.layer == nil {
		return filepath.Join(r.Target, filepath.FromSlash(rel)), nil
	}
	p := filepath.Join(r.layer.Upper, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	return p, nil
}

// targetRoots are the directories of r's target a host process reads: the
// target, or the layers while the build writes a layer.
func (r *Record) targetRoots() []string {
	if r.layer != nil {
		return []string{r.layer.Upper, r.layer.Lower}
	}
	return []string{r.Target}
}

// namesBelow returns the slash-separated paths, relative to each of roots,
// of the regular files named name under rel, each once.
func namesBelow(roots []string, rel, name string) []string {
	seen := map[string]bool{}
	var out []string
	for _, root := range roots {
		filepath.WalkDir(filepath.Join(root, filepath.FromSlash(rel)), func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() || d.Name() != name {
				return nil
			}
			r, err := filepath.Rel(root, p)
			if err == nil && !seen[r] {
				seen[r] = true
				out = append(out, filepath.ToSlash(r))
			}
			return nil
		})
	}
	return out
}
