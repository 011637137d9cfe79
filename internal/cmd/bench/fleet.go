package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/bus/embedded"
	"github.com/ferrydev/ferry/pkg/share"
)

// fleetRun is one round of the fleet table: host A builds a base cold and
// publishes it; runners pull it and build in an agent.
type fleetRun struct {
	cold    time.Duration // ferry base --cold on A, process wall time
	publish time.Duration // ferry base --publish of that ready base, process wall time
	upload  float64       // the publish itself (share.Published.Seconds)
	object  int64         // the object, compressed
	stream  int64         // the uncompressed tar stream
	target  int64         // the target's bytes, as sealed
	runners [2]runnerRun  // runnerOther, runnerSame
	// next is the pull, on the runner at another store path that already
	// holds the base, of the next commit's base (the first refresh of the
	// dedup table): a full object, the relocation having removed files of
	// the seed that its delta takes from it.
	next     time.Duration
	nextRead int64 // bytes it read from the bucket
	// delta is the same pull on the runner at A's paths: the refresh's
	// delta against the base it holds.
	delta      time.Duration
	deltaRead  int64
	deltaFiles int // target files it copied from the local seed
}

// The runners of a round: B has another store parent and clone (the
// pulled target is relocated), C has A's very paths.
const (
	runnerOther = iota
	runnerSame
)

// runnerRun is one runner's pull and first agent build.
type runnerRun struct {
	pull      time.Duration // ferry base --pull, process wall time
	removed   int           // unit paths the relocation removed
	rebuilds  int           // units the relocation makes the first build rebuild
	spawn     time.Duration
	first     time.Duration // the agent's first cargo build, through the shim
	compiled  int           // crates it compiled
	relocated bool
}

// refreshDiff is what one seeded refresh's target holds that its seed's
// target does not, by content (SHA-256). Files are counted once per inode:
// cargo hard-links a unit's outputs into the profile dir, and the object
// stores such links once.
type refreshDiff struct {
	edit    string
	refresh time.Duration // ferry base of the edited commit, process wall time
	seeded  bool
	files   int   // regular files of the new target
	bytes   int64 // their bytes
	// newFiles and newBytes are the files whose content is not in the
	// seed's target; distinctBytes counts each new content once, as a
	// content-addressed store would hold it, and packed is that content
	// compressed at share.Level, what a pull of the difference would move.
	newFiles      int
	newBytes      int64
	distinctBytes int64
	packed        int64
	byDir         map[string]int64 // new bytes per target subdir (deps, incremental, ...)
	object        int64            // the refreshed base's published object (a full pull)
}

// runFleet measures sharing a base across hosts on one machine, per
// workspace set: A's cold build and publish; a runner's pull, install and
// first agent build, at another store path and at A's paths; and, in the
// first round, how much of a seeded refresh's target is new content.
func runFleet(bin string, n, large int) error {
	if err := fixture.CheckTools(""); err != nil {
		return err
	}
	bin, _ = filepath.Abs(bin)
	root, err := os.MkdirTemp("", "ferry-bench-fleet-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	// One bus for the "fleet", authenticated by the embedded host's token
	// (a pull refuses a bus without authentication), reached over TCP by
	// every host's ferry through FERRY_NATS_URL, as pkg/share's tests do.
	h, err := embedded.Start(embedded.Options{Dir: bus.Dir(filepath.Join(root, "bus"))})
	if err != nil {
		return err
	}
	defer h.Shutdown()
	u, err := url.Parse(h.URL())
	if err != nil {
		return err
	}
	u.User = url.User(h.Token())
	busURL := u.String()

	for _, set := range workspaceSets(large) {
		var runs []fleetRun
		var diffs []refreshDiff
		for i := 0; i < n; i++ {
			dir := filepath.Join(root, fmt.Sprintf("%s-%d", set.dirName(), i))
			r, d, err := fleetRound(bin, dir, set.opts, busURL, i == 0)
			if err != nil {
				return err
			}
			runs = append(runs, r)
			if i == 0 {
				diffs = d
			}
			fmt.Fprintf(os.Stderr, "bench: fleet %s round %d: cold %.1fs, publish %.1fs, pull %.1fs + first build %.1fs (%d crates)\n",
				set.name, i+1, r.cold.Seconds(), r.publish.Seconds(), r.runners[runnerOther].pull.Seconds(),
				r.runners[runnerOther].first.Seconds(), r.runners[runnerOther].compiled)
		}
		printFleet(set.name, n, runs)
		printDedup(set.name, runs[0], diffs)
	}
	return nil
}

func printFleet(name string, n int, runs []fleetRun) {
	med := func(f func(fleetRun) time.Duration) time.Duration {
		var ds []time.Duration
		for _, r := range runs {
			ds = append(ds, f(r))
		}
		return median(ds)
	}
	medBytes := func(f func(fleetRun) int64) float64 {
		return float64(med(func(r fleetRun) time.Duration { return time.Duration(f(r)) })) / 1e6
	}
	cold := med(func(r fleetRun) time.Duration { return r.cold })
	fmt.Printf("\n== Sharing a base: host A builds and publishes, a runner pulls, %s workspace (one embedded bus with a token; median of %d)\n", name, n)
	fmt.Printf("  %-52s %14s %14s\n", "", "runner: other", "runner: A's")
	fmt.Printf("  %-52s %14s %14s\n", "", "store path", "paths")
	one := func(label string, d time.Duration) { fmt.Printf("  %-52s %13.2fs\n", label, d.Seconds()) }
	both := func(label string, f func(runnerRun) time.Duration) {
		fmt.Printf("  %-52s", label)
		for k := range 2 {
			fmt.Printf(" %13.2fs", med(func(r fleetRun) time.Duration { return f(r.runners[k]) }).Seconds())
		}
		fmt.Println()
	}
	count := func(label string, f func(runnerRun) int) {
		fmt.Printf("  %-52s", label)
		for k := range 2 {
			fmt.Printf(" %14d", f(runs[0].runners[k]))
		}
		fmt.Println()
	}
	ratio := func(label string, f func(runnerRun) time.Duration, goal string) {
		fmt.Printf("  %-52s", label)
		for k := range 2 {
			fmt.Printf(" %13.3fx", med(func(r fleetRun) time.Duration { return f(r.runners[k]) }).Seconds()/cold.Seconds())
		}
		fmt.Println(goal)
	}
	one("A: cold base build (ferry base --cold)", cold)
	one("A: publish (ferry base --publish of the ready base)", med(func(r fleetRun) time.Duration { return r.publish }))
	one("  of which the upload", med(func(r fleetRun) time.Duration { return secs(r.upload) }))
	fmt.Printf("  %-52s %11.1f MB  (stream %.1f MB, target %.1f MB)\n", "object (zstd "+share.Level.String()+")",
		medBytes(func(r fleetRun) int64 { return r.object }), medBytes(func(r fleetRun) int64 { return r.stream }), medBytes(func(r fleetRun) int64 { return r.target }))
	both("runner: pull + install (ferry base --pull)", func(r runnerRun) time.Duration { return r.pull })
	count("runner: unit paths the relocation removed", func(r runnerRun) int { return r.removed })
	count("runner: units it rebuilds", func(r runnerRun) int { return r.rebuilds })
	both("runner: ferry spawn", func(r runnerRun) time.Duration { return r.spawn })
	both("runner: first agent build (through the shim)", func(r runnerRun) time.Duration { return r.first })
	count("runner: crates the first build compiles", func(r runnerRun) int { return r.compiled })
	ratio("(pull + install + first build) / cold build", func(r runnerRun) time.Duration { return r.pull + r.first }, "  (goal <= 0.2x)")
	ratio("(pull + install + spawn + first build) / cold", func(r runnerRun) time.Duration { return r.pull + r.spawn + r.first }, "")
	if r := runs[0]; r.next > 0 {
		fmt.Printf("  %-52s %13.2fs %13.2fs  (round 1)\n", "runner: pull of a refresh given the previous base", r.next.Seconds(), r.delta.Seconds())
		fmt.Printf("  %-52s %11.1f MB %11.1f MB  (full object; delta, %d files from the seed)\n", "  bytes it read from the bucket",
			float64(r.nextRead)/1e6, float64(r.deltaRead)/1e6, r.deltaFiles)
	}
}

func printDedup(name string, r fleetRun, diffs []refreshDiff) {
	if len(diffs) == 0 {
		return
	}
	fmt.Printf("\n== How much of a seeded refresh's target is new, %s workspace (content by SHA-256 against the seed's target; files once per inode; round 1)\n", name)
	fmt.Printf("  %-44s", "")
	for _, d := range diffs {
		fmt.Printf(" %22s", d.edit)
	}
	fmt.Println()
	row := func(label string, f func(refreshDiff) string) {
		fmt.Printf("  %-44s", label)
		for _, d := range diffs {
			fmt.Printf(" %22s", f(d))
		}
		fmt.Println()
	}
	mb := func(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }
	pct := func(a, b int64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b))
	}
	row("refresh (ferry base of the edited commit)", func(d refreshDiff) string {
		return fmt.Sprintf("%.2fs %s", d.refresh.Seconds(), map[bool]string{true: "seeded", false: "COLD"}[d.seeded])
	})
	row("target files (inodes)", func(d refreshDiff) string { return fmt.Sprint(d.files) })
	row("  whose content is new", func(d refreshDiff) string {
		return fmt.Sprintf("%d (%s)", d.newFiles, pct(int64(d.newFiles), int64(d.files)))
	})
	row("target bytes", func(d refreshDiff) string { return mb(d.bytes) })
	row("  of new content", func(d refreshDiff) string { return fmt.Sprintf("%s (%s)", mb(d.newBytes), pct(d.newBytes, d.bytes)) })
	var dirs []string
	seen := map[string]bool{}
	for _, d := range diffs {
		for k := range d.byDir {
			if !seen[k] {
				seen[k] = true
				dirs = append(dirs, k)
			}
		}
	}
	sort.Strings(dirs)
	for _, k := range dirs {
		row("    in "+k, func(d refreshDiff) string { return mb(d.byDir[k]) })
	}
	row("  distinct new contents", func(d refreshDiff) string { return mb(d.distinctBytes) })
	row("  those, zstd "+share.Level.String()+" (a pull of the difference)", func(d refreshDiff) string { return mb(d.packed) })
	row("published object of the refresh (a full pull)", func(d refreshDiff) string { return mb(d.object) })
	row("difference / full object", func(d refreshDiff) string { return pct(d.packed, d.object) })
	fmt.Printf("  (the first base's object: %s)\n", mb(r.object))
}

// fleetHost is one host of a round: its clone, store parent (dir/home) and
// worktree parent, on the round's bus.
func fleetHost(bin, dir string, repo *fixture.Repo, busURL string) (*ws, error) {
	// Every host signs with one key and trusts it, as a fleet whose
	// build hosts share their key does.
	signer, err := fleetSigner()
	if err != nil {
		return nil, err
	}
	w := &ws{name: filepath.Base(dir), dir: dir, repo: repo, bin: bin, home: filepath.Join(dir, "home"),
		extra: []string{"FERRY_NATS_URL=" + busURL, "FERRY_TRUSTED_KEYS=" + signer.Public()}}
	if err := signer.WriteTo(w.home); err != nil {
		return nil, err
	}
	// The same warm command on every host (it is part of the fingerprint),
	// kept out of git status.
	if err := os.WriteFile(filepath.Join(repo.Dir, "ferry.toml"), []byte(fmt.Sprintf("[base]\nwarm = [%q]\n", benchWarm)), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(repo.Dir, ".git", "info", "exclude"), []byte("ferry.toml\n"), 0o644); err != nil {
		return nil, err
	}
	return w, nil
}

// fleetSigner is the key the bench's hosts sign with.
var fleetSigner = sync.OnceValues(func() (*share.Signer, error) {
	dir, err := os.MkdirTemp("", "ferry-bench-key-")
	if err != nil {
		return nil, err
	}
	s, _, err := share.EnsureSigner(dir)
	return s, err
})

// jsonRun runs ferry with args and decodes its --json answer into v.
func (h *ws) jsonRun(v any, args ...string) (time.Duration, error) {
	out, d, _, err := h.ferry(args...)
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(out, v); err != nil {
		return 0, fmt.Errorf("ferry %s: %w", strings.Join(args, " "), err)
	}
	return d, nil
}

type baseAnswer struct {
	ID        string `json:"id"`
	Commit    string `json:"commit"`
	Target    string `json:"target"`
	Seed      string `json:"seed"`
	Published *struct {
		Meta struct {
			Compressed int64 `json:"compressed"`
			Stream     int64 `json:"stream"`
			Bytes      int64 `json:"bytes"`
		} `json:"meta"`
		Seconds float64 `json:"seconds"`
	} `json:"published"`
}

// pullAnswer is what ferry base --pull --json says of the bytes it moved.
type pullAnswer struct {
	Object      string `json:"object"`
	Transferred int64  `json:"transferred"`
	Seeded      int    `json:"seeded"`
}

// pullRun pulls rev's base, spawns an agent and builds it once.
func (h *ws) pullRun(rev, agent string) (runnerRun, error) {
	return h.installRun(agent, "base", "--pull", "--rev", rev, "--json")
}

// installRun installs a base with ferry args (a pull or an import, with
// --json), spawns an agent and builds it once.
func (h *ws) installRun(agent string, args ...string) (runnerRun, error) {
	var r runnerRun
	var p struct {
		Reused    bool `json:"reused"`
		Relocated *struct {
			Paths int `json:"paths"`
		} `json:"relocated"`
		Rebuilds []string `json:"rebuilds"`
	}
	d, err := h.jsonRun(&p, args...)
	if err != nil {
		return r, err
	}
	if p.Reused {
		return r, fmt.Errorf("%s: ferry %s reused a base: the round is not a fresh host", h.name, strings.Join(args, " "))
	}
	r.pull = d
	if p.Relocated != nil {
		r.relocated, r.removed = true, p.Relocated.Paths
	}
	r.rebuilds = len(p.Rebuilds)
	var a struct {
		Worktree string `json:"worktree"`
	}
	if r.spawn, err = h.jsonRun(&a, "spawn", agent, "--json"); err != nil {
		return r, err
	}
	c := exec.Command("sh", "-c", benchWarm)
	c.Dir, c.Env = a.Worktree, h.shimEnv()
	t := time.Now()
	out, err := c.CombinedOutput()
	if err != nil {
		return r, fmt.Errorf("%s: %s in agent %s: %v\n%s", h.name, benchWarm, agent, err, out)
	}
	r.first = time.Since(t)
	r.compiled = strings.Count(string(out), "Compiling ")
	return r, h.removeAgent(agent)
}

// fleetRound generates a workspace for host A in dir, builds and publishes
// its base, then pulls it on a runner with another store parent and clone
// and on one with A's paths (A's directories moved aside first, as if A's
// host were wiped and a fresh runner took its place). With dedup it first
// refreshes A's base after two edits, compares each refreshed target with
// the base's before it and publishes it.
func fleetRound(bin, dir string, opts fixture.Options, busURL string, dedup bool) (fleetRun, []refreshDiff, error) {
	var r fleetRun
	aDir := filepath.Join(dir, "a")
	repo, err := fixture.Generate(filepath.Join(aDir, "repo"), opts)
	if err != nil {
		return r, nil, err
	}
	a, err := fleetHost(bin, aDir, repo, busURL)
	if err != nil {
		return r, nil, err
	}
	var cold baseAnswer
	if r.cold, err = a.jsonRun(&cold, "base", "--cold", "--json"); err != nil {
		return r, nil, err
	}
	var pub baseAnswer
	if r.publish, err = a.jsonRun(&pub, "base", "--publish", "--json"); err != nil {
		return r, nil, err
	}
	if pub.Published == nil || pub.ID != cold.ID {
		return r, nil, fmt.Errorf("ferry base --publish published nothing, or not base %s", cold.ID)
	}
	m := pub.Published.Meta
	r.upload, r.object, r.stream, r.target = pub.Published.Seconds, m.Compressed, m.Stream, m.Bytes

	var diffs []refreshDiff
	var firstEdit string // the commit of the first edit, when dedup
	if dedup {
		edits := []struct{ label, path string }{
			// Nothing depends on app: its binary and tests alone rebuild.
			{"edit app (top)", fixture.MainPath},
			// The bottom of app -> chain-a -> chain-b -> chain-c (the
			// refresh section's one-leaf edit): four crates rebuild.
			{"edit chain-c (deep)", fixture.LibPath(fixture.ChainC)},
		}
		// Each refresh against the base before it: what a runner that
		// holds that one lacks.
		prev, err := targetFiles(cold.Target)
		if err != nil {
			return r, nil, fmt.Errorf("hash the first base's target: %w", err)
		}
		for _, e := range edits {
			if err := repo.Append(e.path, "\n// edited\n"); err != nil {
				return r, nil, err
			}
			c, err := repo.Commit(e.label)
			if err != nil {
				return r, nil, err
			}
			var next baseAnswer
			d := refreshDiff{edit: e.label}
			if d.refresh, err = a.jsonRun(&next, "base", "--rev", c, "--json"); err != nil {
				return r, nil, err
			}
			d.seeded = next.Seed != ""
			if prev, err = compareTargets(prev, next.Target, &d); err != nil {
				return r, nil, err
			}
			var p baseAnswer
			if _, err := a.jsonRun(&p, "base", "--publish", "--rev", c, "--json"); err != nil {
				return r, nil, err
			}
			if p.Published != nil {
				d.object = p.Published.Meta.Compressed
			}
			diffs = append(diffs, d)
			if firstEdit == "" {
				firstEdit = c
			}
			fmt.Fprintf(os.Stderr, "bench: fleet: %s: %d of %d files, %.1f of %.1f MB new content\n",
				e.label, d.newFiles, d.files, float64(d.newBytes)/1e6, float64(d.bytes)/1e6)
		}
	}

	// B: its own clone and store parent.
	bDir := filepath.Join(dir, "b")
	if err := gitClone(repo.Dir, filepath.Join(bDir, "repo"), cold.Commit); err != nil {
		return r, nil, err
	}
	b, err := fleetHost(bin, bDir, &fixture.Repo{Dir: filepath.Join(bDir, "repo")}, busURL)
	if err != nil {
		return r, nil, err
	}
	if r.runners[runnerOther], err = b.pullRun(cold.Commit, "b1"); err != nil {
		return r, nil, err
	}
	if !r.runners[runnerOther].relocated {
		return r, nil, fmt.Errorf("the pull into another store path relocated nothing")
	}
	if firstEdit != "" {
		// The next base, with this one installed: its seed lost the
		// relocated units here, so the whole object.
		var p pullAnswer
		if r.next, err = b.jsonRun(&p, "base", "--pull", "--rev", firstEdit, "--json"); err != nil {
			return r, nil, err
		}
		r.nextRead = p.Transferred
	}

	// C: A's very paths. A's directories move aside (its host "wiped"),
	// and a fresh clone and an empty store parent take their place.
	moved := filepath.Join(dir, "a-published")
	if err := os.Rename(aDir, moved); err != nil {
		return r, nil, err
	}
	if err := gitClone(filepath.Join(moved, "repo"), filepath.Join(aDir, "repo"), cold.Commit); err != nil {
		return r, nil, err
	}
	c, err := fleetHost(bin, aDir, &fixture.Repo{Dir: filepath.Join(aDir, "repo")}, busURL)
	if err != nil {
		return r, nil, err
	}
	if r.runners[runnerSame], err = c.pullRun(cold.Commit, "c1"); err != nil {
		return r, nil, err
	}
	if r.runners[runnerSame].relocated {
		return r, nil, fmt.Errorf("the pull at the publisher's paths relocated the target")
	}
	if firstEdit != "" {
		// The next base, with this one installed at A's paths: its delta.
		var p pullAnswer
		if r.delta, err = c.jsonRun(&p, "base", "--pull", "--rev", firstEdit, "--json"); err != nil {
			return r, nil, err
		}
		r.deltaRead, r.deltaFiles = p.Transferred, p.Seeded
		if p.Seeded == 0 {
			return r, nil, fmt.Errorf("the pull of the refresh at A's paths took nothing from the base before it (object %s)", p.Object)
		}
	}
	return r, diffs, nil
}

// gitClone clones from into to, checked out at commit: a runner's clone
// is at the commit of the base it pulls (agents branch from HEAD).
func gitClone(from, to, commit string) error {
	if out, err := exec.Command("git", "clone", "-q", from, to).CombinedOutput(); err != nil {
		return fmt.Errorf("git clone %s: %v\n%s", from, err, out)
	}
	if out, err := exec.Command("git", "-C", to, "reset", "-q", "--hard", commit).CombinedOutput(); err != nil {
		return fmt.Errorf("git reset --hard %s: %v\n%s", commit, err, out)
	}
	return nil
}

// targetFile is a regular file of a target, once per inode.
type targetFile struct {
	rel  string
	size int64
	sum  [sha256.Size]byte
}

// targetFiles hashes the regular files of target, each inode once.
func targetFiles(target string) ([]targetFile, error) {
	var out []targetFile
	seen := map[[2]uint64]bool{}
	err := filepath.WalkDir(target, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			k := [2]uint64{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		rel, _ := filepath.Rel(target, p)
		tf := targetFile{rel: rel, size: fi.Size()}
		h.Sum(tf.sum[:0])
		out = append(out, tf)
		return nil
	})
	return out, err
}

// compareTargets fills d with what target next holds that the previous
// target, whose files are old (targetFiles), does not, by content; it
// returns next's files.
func compareTargets(old []targetFile, next string, d *refreshDiff) ([]targetFile, error) {
	have := map[[sha256.Size]byte]bool{}
	for _, f := range old {
		have[f.sum] = true
	}
	cur, err := targetFiles(next)
	if err != nil {
		return nil, fmt.Errorf("hash the new target: %w", err)
	}
	d.byDir = map[string]int64{}
	packed := &counter{}
	zw, err := zstd.NewWriter(packed, zstd.WithEncoderLevel(share.Level))
	if err != nil {
		return nil, err
	}
	distinct := map[[sha256.Size]byte]bool{}
	for _, f := range cur {
		d.files++
		d.bytes += f.size
		if have[f.sum] {
			continue
		}
		d.newFiles++
		d.newBytes += f.size
		d.byDir[targetDir(f.rel)] += f.size
		if distinct[f.sum] {
			continue
		}
		distinct[f.sum] = true
		d.distinctBytes += f.size
		if err := appendFile(zw, filepath.Join(next, f.rel)); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	d.packed = packed.n
	return cur, nil
}

func appendFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// targetDir names where in a target a file lies: the directory under the
// profile (deps, incremental, build, .fingerprint), or the top entry.
func targetDir(rel string) string {
	parts := strings.Split(filepath.ToSlash(rel), "/")
	switch {
	case len(parts) >= 3:
		return parts[0] + "/" + parts[1]
	case len(parts) == 2:
		return parts[0] + "/ (files)"
	default:
		return "(top files)"
	}
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
