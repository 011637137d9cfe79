package oracle

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/ferrydev/ferry/internal/fixture"
)

// Kind is a kind of edit an agent makes.
type Kind int

// The kinds of edits, each with a weight for the random draws.
const (
	// KindSource edits a member's source: appends a comment or rewrites the
	// first doc line with as many bytes.
	KindSource Kind = iota
	// KindAssetAdd adds a file to the build script's watched directory,
	// sometimes in a (new) subdirectory.
	KindAssetAdd
	// KindAssetEdit rewrites or extends a file of the watched directory.
	KindAssetEdit
	// KindAssetDelete deletes a file of the watched directory.
	KindAssetDelete
	// KindSharedData rewrites the file the tracked symlink points to in the
	// base.
	KindSharedData
	// KindRetarget points the tracked symlink at a newly written file with
	// other content, outside the crate: a change of link text.
	KindRetarget
	// KindRevert edits a file, and after the build restores the base's exact
	// bytes for a second build.
	KindRevert
	// KindFeatures adds a [features] table (or a feature) to a member.
	KindFeatures
	// KindVersion bumps a member's version (Cargo.lock follows).
	KindVersion
	// KindPathDep adds a path dependency between two members without
	// making a cycle.
	KindPathDep
	// KindWorkspace adds a table to the workspace manifest.
	KindWorkspace
	numKinds
)

var kindNames = [numKinds]string{
	"source", "asset-add", "asset-edit", "asset-delete", "shared-data", "retarget-symlink",
	"revert", "features", "version", "path-dep", "workspace-manifest",
}

var kindWeights = [numKinds]int{
	KindSource: 28, KindAssetAdd: 7, KindAssetEdit: 7, KindAssetDelete: 7, KindSharedData: 7,
	KindRetarget: 6, KindRevert: 10, KindFeatures: 5, KindVersion: 5, KindPathDep: 5, KindWorkspace: 4,
}

func (k Kind) String() string {
	if k < 0 || k >= numKinds {
		return "kind(" + strconv.Itoa(int(k)) + ")"
	}
	return kindNames[k]
}

// AllKinds lists every kind of edit.
func AllKinds() []Kind {
	ks := make([]Kind, numKinds)
	for i := range ks {
		ks[i] = Kind(i)
	}
	return ks
}

// drawKind draws a kind by weight.
func drawKind(rng *rand.Rand) Kind {
	total := 0
	for _, w := range kindWeights {
		total += w
	}
	n := rng.IntN(total)
	for k, w := range kindWeights {
		if n < w {
			return Kind(k)
		}
		n -= w
	}
	return KindSource
}

// sourceFiles are the member sources KindSource edits.
var sourceFiles = []string{
	fixture.LibPath(fixture.ChainA), fixture.LibPath(fixture.ChainB), fixture.LibPath(fixture.ChainC),
	fixture.LibPath(fixture.DiamondTop), fixture.LibPath(fixture.DiamondLeft),
	fixture.LibPath(fixture.DiamondRight), fixture.LibPath(fixture.DiamondBottom),
	fixture.MainPath,
	fixture.LibPath(fixture.MacroCrate),
	fixture.CrateDir(fixture.BuildScriptCrate) + "/build.rs",
	fixture.LibPath(fixture.BuildScriptCrate),
	fixture.LibPath(fixture.ManifestCrate),
	fixture.LibPath(fixture.RegistryCrate),
}

// edit is one applied edit. restore, when set, puts the base's bytes back
// (the second half of a reverted edit) and describes what it did.
type edit struct {
	kind    Kind
	desc    string
	restore func() (string, error)
}

// editor makes the edits of one agent in its tree, keeping what it needs to
// stay buildable: the member dependency graph and the base's bytes.
type editor struct {
	tree  string
	agent string
	rng   *rand.Rand
	n     int

	members  []string
	base     map[string][]byte          // rel path -> the base's bytes, for reverts
	baseDeps map[string]map[string]bool // member -> member dependencies in the base
	deps     map[string]map[string]bool // member -> member dependencies now
}

// newEditor reads what the editor needs: the base's bytes of every file a
// reverted edit may restore from baseTree (the base checkout, or tree itself
// when that holds the base's files), the member graph from both.
func newEditor(tree, baseTree, agent string, rng *rand.Rand) (*editor, error) {
	e := &editor{tree: tree, agent: agent, rng: rng, members: fixture.Members(fixture.Options{}),
		base: map[string][]byte{}, baseDeps: map[string]map[string]bool{}, deps: map[string]map[string]bool{}}
	baseEd := &editor{tree: baseTree}
	revertable := append([]string{fixture.SharedData, "Cargo.toml"}, sourceFiles...)
	for _, m := range e.members {
		revertable = append(revertable, manifestPath(m))
	}
	assets, err := baseEd.assets()
	if err != nil {
		return nil, err
	}
	revertable = append(revertable, assets...)
	for _, rel := range revertable {
		data, err := os.ReadFile(baseEd.path(rel))
		if err != nil {
			return nil, fmt.Errorf("oracle: read the base's %s: %w", rel, err)
		}
		e.base[rel] = data
	}
	for _, m := range e.members {
		d, err := memberDeps(e.base[manifestPath(m)], e.members)
		if err != nil {
			return nil, fmt.Errorf("oracle: %s in %s: %w", manifestPath(m), baseTree, err)
		}
		e.baseDeps[m] = d
		data, err := os.ReadFile(e.path(manifestPath(m)))
		if err != nil {
			return nil, err
		}
		if e.deps[m], err = memberDeps(data, e.members); err != nil {
			return nil, fmt.Errorf("oracle: %s in %s: %w", manifestPath(m), tree, err)
		}
		for d := range e.baseDeps[m] {
			if !e.deps[m][d] {
				// A revert would add the edge back: refuse a tree that dropped one.
				return nil, fmt.Errorf("oracle: %s depends on %s in the base but not in %s", m, d, tree)
			}
		}
	}
	return e, nil
}

// linkTarget is the path, relative to the tree, the tracked symlink
// resolves to.
func (e *editor) linkTarget() (string, error) {
	text, err := os.Readlink(e.path(fixture.SymlinkPath))
	if err != nil {
		return "", err
	}
	return path.Join(path.Dir(fixture.SymlinkPath), text), nil
}

func manifestPath(member string) string { return fixture.CrateDir(member) + "/Cargo.toml" }

// memberDeps returns the members a manifest depends on.
func memberDeps(manifest []byte, members []string) (map[string]bool, error) {
	var m struct {
		Dependencies map[string]any `toml:"dependencies"`
	}
	if err := toml.Unmarshal(manifest, &m); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, name := range members {
		if _, ok := m.Dependencies[name]; ok {
			out[name] = true
		}
	}
	return out, nil
}

func copySet(s map[string]bool) map[string]bool {
	out := make(map[string]bool, len(s))
	for k, v := range s {
		out[k] = v
	}
	return out
}

func (e *editor) path(rel string) string { return filepath.Join(e.tree, filepath.FromSlash(rel)) }

// tag is a unique label for the next edit.
func (e *editor) tag() string {
	e.n++
	return fmt.Sprintf("%s-%d", e.agent, e.n)
}

func (e *editor) hex() string { return fmt.Sprintf("%016x", e.rng.Uint64()) }

func (e *editor) pick(list []string) string { return list[e.rng.IntN(len(list))] }

// apply makes one edit of kind k (or of a related kind when k is impossible
// in the current tree, e.g. deleting an asset when none is left).
func (e *editor) apply(k Kind) (*edit, error) {
	switch k {
	case KindSource:
		return e.source()
	case KindAssetAdd:
		return e.assetAdd()
	case KindAssetEdit, KindAssetDelete:
		assets, err := e.assets()
		if err != nil {
			return nil, err
		}
		if k == KindAssetDelete {
			// Never the symlink's target: a dangling link breaks the build.
			link, err := e.linkTarget()
			if err != nil {
				return nil, err
			}
			assets = slices.DeleteFunc(assets, func(a string) bool { return a == link })
		}
		if len(assets) == 0 {
			return e.assetAdd()
		}
		rel := e.pick(assets)
		if k == KindAssetDelete {
			if err := os.Remove(e.path(rel)); err != nil {
				return nil, err
			}
			return &edit{kind: k, desc: "delete asset " + rel}, nil
		}
		how, err := e.rewrite(rel, "asset edit "+e.tag()+" "+e.hex()+"\n")
		if err != nil {
			return nil, err
		}
		return &edit{kind: k, desc: how + " asset " + rel}, nil
	case KindSharedData:
		how, err := e.rewrite(fixture.SharedData, "shared data edit "+e.tag()+" "+e.hex()+"\n")
		if err != nil {
			return nil, err
		}
		return &edit{kind: k, desc: how + " " + fixture.SharedData + " (the symlink's base target)"}, nil
	case KindRetarget:
		return e.retarget()
	case KindRevert:
		return e.revert()
	case KindFeatures:
		return e.features()
	case KindVersion:
		return e.version()
	case KindPathDep:
		return e.pathDep()
	case KindWorkspace:
		t := e.tag()
		if err := appendFile(e.path("Cargo.toml"), fmt.Sprintf("\n[workspace.metadata.oracle-%s]\nedit = %q\n", t, e.hex())); err != nil {
			return nil, err
		}
		return &edit{kind: k, desc: "add [workspace.metadata.oracle-" + t + "] to the workspace Cargo.toml"}, nil
	}
	return nil, fmt.Errorf("unknown edit kind %d", int(k))
}

// source appends a comment to a member source or rewrites its first doc
// line with as many bytes.
func (e *editor) source() (*edit, error) {
	rel := e.pick(sourceFiles)
	p := e.path(rel)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	if e.rng.IntN(3) == 0 {
		if i := bytes.IndexByte(data, '\n'); i > len("//! ")+4 && bytes.HasPrefix(data, []byte("//! ")) {
			old := string(data[len("//! "):i])
			line := e.letters(len(old), old)
			out := append([]byte("//! "+line), data[i:]...)
			e.tag()
			if err := os.WriteFile(p, out, 0o644); err != nil {
				return nil, err
			}
			return &edit{kind: KindSource, desc: "rewrite the first doc line of " + rel + " (same size)"}, nil
		}
	}
	if err := appendFile(p, "\n// oracle edit "+e.tag()+" "+e.hex()+"\n"); err != nil {
		return nil, err
	}
	return &edit{kind: KindSource, desc: "append a comment to " + rel}, nil
}

// letters returns n random lowercase letters other than old.
func (e *editor) letters(n int, old string) string {
	for {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + e.rng.IntN(26))
		}
		if string(b) != old {
			return string(b)
		}
	}
}

// rewrite either replaces a text file's content with as many random bytes
// (when it is long enough) or appends line; it says which.
func (e *editor) rewrite(rel, line string) (string, error) {
	p := e.path(rel)
	data, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	if len(data) > 1 && e.rng.IntN(2) == 0 {
		e.tag()
		old := string(data[:len(data)-1])
		if err := os.WriteFile(p, []byte(e.letters(len(old), old)+"\n"), 0o644); err != nil {
			return "", err
		}
		return "rewrite (same size)", nil
	}
	if err := appendFile(p, line); err != nil {
		return "", err
	}
	return "append to", nil
}

// assets lists the files under the watched directory, by path.
func (e *editor) assets() ([]string, error) {
	var out []string
	root := e.path(fixture.AssetsDir)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(e.tree, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	sort.Strings(out)
	return out, err
}

// assetAdd adds a file to the watched directory: at its top, in an existing
// subdirectory, or in a new one.
func (e *editor) assetAdd() (*edit, error) {
	t := e.tag()
	dir := fixture.AssetsDir
	ents, err := os.ReadDir(e.path(fixture.AssetsDir))
	if err != nil {
		return nil, err
	}
	var subdirs []string
	for _, d := range ents {
		if d.IsDir() {
			subdirs = append(subdirs, d.Name())
		}
	}
	switch e.rng.IntN(4) {
	case 0:
		dir += "/dir-" + t
	case 1:
		if len(subdirs) > 0 {
			dir += "/" + e.pick(subdirs)
		}
	}
	rel := dir + "/" + t + ".txt"
	if err := os.MkdirAll(e.path(dir), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(e.path(rel), []byte("asset "+t+" "+e.hex()+"\n"), 0o644); err != nil {
		return nil, err
	}
	return &edit{kind: KindAssetAdd, desc: "add asset " + rel}, nil
}

// retarget writes a new file outside the symlink's package and points the
// tracked symlink at it.
//
// Never inside the package: Cargo records an input read through a link by
// its canonical path when that lies inside the input's package, so after a
// link into the package, retargeting it again is missed by plain Cargo in
// any checkout (verified with cargo 1.95: the dep-info names the old target,
// which did not change). Never an existing file either (see
// retargetExisting).
func (e *editor) retarget() (*edit, error) {
	t := e.tag()
	var file string
	if e.rng.IntN(2) == 0 {
		file = "shared/alt-" + t + ".txt"
	} else {
		file = fixture.CratesDir + "/alt-" + t + ".txt"
	}
	text, err := filepath.Rel(filepath.Dir(e.path(fixture.SymlinkPath)), e.path(file))
	if err != nil {
		return nil, err
	}
	text = filepath.ToSlash(text)
	if err := os.WriteFile(e.path(file), []byte("retargeted data "+t+" "+e.hex()+"\n"), 0o644); err != nil {
		return nil, err
	}
	if err := e.relink(text); err != nil {
		return nil, err
	}
	return &edit{kind: KindRetarget, desc: fmt.Sprintf("retarget %s -> %s (new file %s)", fixture.SymlinkPath, text, file)}, nil
}

// retargetExisting points the tracked symlink at an existing file of the
// tree with other content than its current target: README.md or an asset
// (which the build script reads too). It is an edit for a commit an agent is
// spawned from, never for an agent's tree after a build: Cargo reads a
// symlinked input's mtime through the link, so plain Cargo misses a link
// retargeted at an older file in any checkout.
func (e *editor) retargetExisting() (*edit, error) {
	cur, err := e.linkTarget()
	if err != nil {
		return nil, err
	}
	curData, err := os.ReadFile(e.path(cur))
	if err != nil {
		return nil, err
	}
	assets, err := e.assets()
	if err != nil {
		return nil, err
	}
	var candidates []string
	for _, c := range append([]string{"README.md"}, assets...) {
		data, err := os.ReadFile(e.path(c))
		if err == nil && c != cur && !bytes.Equal(data, curData) {
			candidates = append(candidates, c)
		}
	}
	if len(candidates) == 0 {
		return nil, errors.New("no existing file to retarget the symlink to")
	}
	target := e.pick(candidates)
	text, err := filepath.Rel(filepath.Dir(e.path(fixture.SymlinkPath)), e.path(target))
	if err != nil {
		return nil, err
	}
	if err := e.relink(filepath.ToSlash(text)); err != nil {
		return nil, err
	}
	e.tag()
	return &edit{kind: KindRetarget, desc: fmt.Sprintf("retarget %s -> %s (an existing file)", fixture.SymlinkPath, filepath.ToSlash(text))}, nil
}

// relink replaces the tracked symlink through a rename, so the link is
// never missing.
func (e *editor) relink(text string) error {
	link := e.path(fixture.SymlinkPath)
	tmp := link + ".oracle-tmp"
	os.Remove(tmp)
	if err := os.Symlink(text, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// revert edits a file whose base bytes the editor knows; its restore writes
// those bytes back exactly.
func (e *editor) revert() (*edit, error) {
	keys := make([]string, 0, len(e.base))
	for k := range e.base {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	rel := e.pick(keys)
	p := e.path(rel)
	t := e.tag()
	var suffix string
	switch {
	case strings.HasSuffix(rel, ".rs"):
		suffix = "\n// oracle revert edit " + t + "\n"
	case strings.HasSuffix(rel, ".toml"):
		suffix = "\n# oracle revert edit " + t + "\n"
	default:
		suffix = "oracle revert edit " + t + "\n"
	}
	cur, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		cur, err = e.base[rel], nil // a deleted asset comes back, edited
	}
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p, append(append([]byte(nil), cur...), suffix...), 0o644); err != nil {
		return nil, err
	}
	ed := &edit{kind: KindRevert, desc: "edit " + rel + " (to be reverted to the base's bytes)"}
	ed.restore = func() (string, error) {
		if err := os.WriteFile(p, e.base[rel], 0o644); err != nil {
			return "", err
		}
		for _, m := range e.members {
			if rel == manifestPath(m) {
				e.deps[m] = copySet(e.baseDeps[m])
			}
		}
		return "restore the base's exact bytes of " + rel, nil
	}
	return ed, nil
}

func (e *editor) features() (*edit, error) {
	m := e.pick(e.members)
	feature := "oracle-" + e.tag()
	if err := insertInTable(e.path(manifestPath(m)), "features", feature+" = []\n"); err != nil {
		return nil, err
	}
	return &edit{kind: KindFeatures, desc: fmt.Sprintf("add feature %s to %s", feature, manifestPath(m))}, nil
}

var versionRE = regexp.MustCompile(`(?m)^version = "(\d+)\.(\d+)\.(\d+)"`)

func (e *editor) version() (*edit, error) {
	m := e.pick(e.members)
	p := e.path(manifestPath(m))
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	loc := versionRE.FindSubmatchIndex(data)
	if loc == nil {
		return nil, fmt.Errorf("no version in %s", manifestPath(m))
	}
	patch, _ := strconv.Atoi(string(data[loc[6]:loc[7]]))
	v := fmt.Sprintf("%s.%s.%d", data[loc[2]:loc[3]], data[loc[4]:loc[5]], patch+1)
	out := append(append(append([]byte(nil), data[:loc[0]]...), fmt.Sprintf("version = %q", v)...), data[loc[1]:]...)
	e.tag()
	if err := os.WriteFile(p, out, 0o644); err != nil {
		return nil, err
	}
	return &edit{kind: KindVersion, desc: fmt.Sprintf("bump %s to version %s", m, v)}, nil
}

// pathDep adds a dependency from one member to another that does not reach
// it already; app is nobody's dependency (and has enough of its own).
func (e *editor) pathDep() (*edit, error) {
	var pairs [][2]string
	for _, from := range e.members {
		if from == fixture.AppCrate {
			continue
		}
		for _, to := range e.members {
			if to == fixture.AppCrate || to == from || e.deps[from][to] || e.reaches(to, from) {
				continue
			}
			pairs = append(pairs, [2]string{from, to})
		}
	}
	if len(pairs) == 0 {
		return e.features()
	}
	p := pairs[e.rng.IntN(len(pairs))]
	from, to := p[0], p[1]
	if err := insertInTable(e.path(manifestPath(from)), "dependencies", fmt.Sprintf("%s = { path = \"../%s\" }\n", to, to)); err != nil {
		return nil, err
	}
	e.tag()
	e.deps[from][to] = true
	return &edit{kind: KindPathDep, desc: fmt.Sprintf("add path dependency %s -> %s", from, to)}, nil
}

// reaches reports whether member a depends on b, directly or not.
func (e *editor) reaches(a, b string) bool {
	seen := map[string]bool{}
	var walk func(string) bool
	walk = func(x string) bool {
		if x == b {
			return true
		}
		if seen[x] {
			return false
		}
		seen[x] = true
		for d := range e.deps[x] {
			if walk(d) {
				return true
			}
		}
		return false
	}
	return walk(a)
}

// insertInTable adds line at the start of the manifest's [table], creating
// the table at the end when there is none.
func insertInTable(path, table, line string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(data)
	header := "[" + table + "]\n"
	switch i := strings.Index(s, "\n"+header); {
	case strings.HasPrefix(s, header):
		s = header + line + s[len(header):]
	case i >= 0:
		at := i + 1 + len(header)
		s = s[:at] + line + s[at:]
	default:
		if !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		s += "\n" + header + line
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Diverge commits, on top of repo's HEAD, a seeded set of edits that an
// agent spawned from the result (while the current base is HEAD's) starts
// with: two source edits, an asset deleted and one added (the watched
// directory's entries change), a version bump and a path dependency (the
// lockfile goes stale), and the tracked symlink retargeted to an existing
// file with other content. Stamping must leave every file that differs from
// the base, or that Cargo reaches through the retargeted link, unstamped.
// It returns the new commit and the edits.
func Diverge(repo *fixture.Repo, seed uint64) (string, []string, error) {
	rng := rand.New(rand.NewPCG(seed, 0x646976))
	e, err := newEditor(repo.Dir, repo.Dir, "diverge", rng)
	if err != nil {
		return "", nil, err
	}
	var descs []string
	for _, k := range []Kind{KindSource, KindSource, KindAssetDelete, KindAssetAdd, KindVersion, KindPathDep} {
		ed, err := e.apply(k)
		if err != nil {
			return "", nil, err
		}
		descs = append(descs, ed.desc)
	}
	ed, err := e.retargetExisting()
	if err != nil {
		return "", nil, err
	}
	descs = append(descs, ed.desc)
	commit, err := repo.Commit("oracle: diverge from the base\n\n" + strings.Join(descs, "\n"))
	return commit, descs, err
}
