package base_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/gc"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/sandbox"
)

// needLayers skips t unless a store under dir gets layered refreshes: an
// unprivileged overlay mounts there (the host's own probe).
func needLayers(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := platform.Real().OverlayBlocker(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b != nil {
		t.Skipf("no unprivileged overlay in %s (%v): refreshes there clone or copy their seed", dir, b)
	}
}

// inode identifies a file.
type inode struct{ dev, ino uint64 }

func inodeOf(t *testing.T, p string) inode {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return inode{uint64(st.Dev), st.Ino}
}

// privateBytes is the size of the regular files in root that no other
// directory links (a link count of one, or only links inside root).
func privateBytes(t *testing.T, root string) (private, total int64) {
	t.Helper()
	links := map[inode]int{}
	sizes := map[inode]int64{}
	nlink := map[inode]uint64{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		id := inode{uint64(st.Dev), st.Ino}
		links[id]++
		sizes[id], nlink[id] = fi.Size(), uint64(st.Nlink)
		return nil
	})
	for id, n := range links {
		total += sizes[id]
		if uint64(n) == nlink[id] {
			private += sizes[id]
		}
	}
	return private, total
}

// Where an overlay mounts, a refresh builds on an overlay of its
// seed's target and folds it into a plain target. Three refreshes deep,
// each base compiles only what its edit reaches, prints its own sources'
// marker, holds no layer and no whiteout, shares the inodes of what it did
// not rebuild with its seed, takes less disk than its target's size, and
// leaves every earlier base's seal as it was; clippy's rustc-info cache is
// put back through the layer. With its seeds removed the deepest base is
// still whole. With [base] layered = false the refresh copies its seed.
func TestLayeredRefresh(t *testing.T) {
	warm := []string{"cargo build --workspace --all-targets"}
	clippy := exec.Command("cargo", "clippy", "--version").Run() == nil
	if clippy {
		warm = append(warm, "cargo clippy --workspace")
	}
	e := setup(t, warm...)
	needLayers(t, e.home)
	first, _ := e.buildLogged(t, e.store, "HEAD", false)
	chain := []*base.Record{first.Record}
	leaf := fixture.LibPath(fixture.ChainC)
	for i := 1; i <= 3; i++ {
		if err := e.repo.Append(leaf, fmt.Sprintf("\n// refresh %d\n", i)); err != nil {
			t.Fatal(err)
		}
		c, err := e.repo.Commit(fmt.Sprintf("refresh %d", i))
		if err != nil {
			t.Fatal(err)
		}
		res, log := e.buildLogged(t, e.store, c, false)
		r, seed := res.Record, chain[len(chain)-1]
		if r.Seed != seed.ID || r.SeedBy != base.SeedByLayer || r.Layer == nil || r.Layer.Linked == 0 {
			t.Fatalf("refresh %d: seed %q by %q (layer %+v), want %s by layer\n%s", i, r.Seed, r.SeedBy, r.Layer, seed.ID, log)
		}
		if got := strings.Join(dedupe(compiled(log)), " "); got != "app chain-a chain-b chain-c" {
			t.Errorf("refresh %d compiled %s, want app chain-a chain-b chain-c", i, got)
		}
		want, err := fixture.ExpectedMarker(r.Src)
		if err != nil {
			t.Fatal(err)
		}
		if got := appOutput(t, r); got != strings.TrimSpace(want) {
			t.Errorf("refresh %d: the app prints\n%s\nwant\n%s", i, got, want)
		}
		if _, err := os.Lstat(filepath.Join(r.Dir, "layer")); !os.IsNotExist(err) {
			t.Errorf("refresh %d: the layer's directory is left (%v)", i, err)
		}
		filepath.WalkDir(r.Target, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type()&fs.ModeCharDevice != 0 {
				t.Errorf("refresh %d: %s is a character device (a whiteout left by the fold)", i, p)
			}
			return nil
		})
		// What the edit does not reach is the seed's: serde's rlib is
		// its inode; the app binary is new.
		rlibs, _ := filepath.Glob(filepath.Join(seed.Target, "debug", "deps", "libserde-*.rlib"))
		if len(rlibs) == 0 {
			t.Fatalf("no serde rlib in %s", seed.Target)
		}
		rel, _ := filepath.Rel(seed.Target, rlibs[0])
		if inodeOf(t, rlibs[0]) != inodeOf(t, filepath.Join(r.Target, rel)) {
			t.Errorf("refresh %d: %s is not its seed's file", i, rel)
		}
		app := filepath.Join("debug", fixture.BinName)
		if inodeOf(t, filepath.Join(seed.Target, app)) == inodeOf(t, filepath.Join(r.Target, app)) {
			t.Errorf("refresh %d: the rebuilt app is its seed's inode", i)
		}
		private, total := privateBytes(t, r.Target)
		t.Logf("refresh %d: %d of %d bytes its own; layer %+v", i, private, total, *r.Layer)
		if private*2 > total {
			t.Errorf("refresh %d: %d of its target's %d bytes are its own: the seed's unchanged files were not shared", i, private, total)
		}
		for _, earlier := range chain {
			if err := base.Verify(earlier); err != nil {
				t.Errorf("refresh %d changed an earlier base: %v", i, err)
			}
		}
		if clippy {
			got, err1 := os.ReadFile(filepath.Join(r.Target, ".rustc_info.json"))
			seedInfo, err2 := os.ReadFile(filepath.Join(seed.Target, ".rustc_info.json"))
			if err1 != nil || err2 != nil || string(got) != string(seedInfo) {
				t.Errorf("refresh %d: the rustc-info cache differs from its seed's after clippy (%v, %v)", i, err1, err2)
			}
		}
		chain = append(chain, r)
	}
	// The deepest base stands on its own.
	last := chain[len(chain)-1]
	for _, r := range chain[:len(chain)-1] {
		// Removed as gc removes a base: in a link window, since the
		// removal moves the change times of the inodes last shares.
		if err := base.Linking(e.store, r.ID, func() error { return platform.RemoveTree(r.Target) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := base.Verify(last); err != nil {
		t.Errorf("with its seeds' targets gone: %v", err)
	}
	want, _ := fixture.ExpectedMarker(last.Src)
	if got := appOutput(t, last); got != strings.TrimSpace(want) {
		t.Errorf("with its seeds' targets gone, the app prints\n%s\nwant\n%s", got, want)
	}

	// Layers off: the refresh copies. (Other warm commands, so that the
	// seed is a new base, not one whose target is gone.)
	if err := os.WriteFile(filepath.Join(e.repo.Dir, "ferry.toml"), []byte("[base]\nlayered = false\nwarm = [\"cargo build --workspace\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.repo.Append(leaf, "\n// copied\n")
	c, err := e.repo.Commit("copied refresh")
	if err != nil {
		t.Fatal(err)
	}
	cold, _ := e.buildLogged(t, e.store, "HEAD~1", false) // a seed with this fingerprint
	res, log := e.buildLogged(t, e.store, c, false)
	if res.Record.Seed != cold.Record.ID || res.Record.SeedBy != base.SeedByCopy || res.Record.Layer != nil {
		t.Fatalf("with layered off: seed %q by %q, want %s by copy\n%s", res.Record.Seed, res.Record.SeedBy, cold.Record.ID, log)
	}
	if !strings.Contains(log, "[base] layered is off") {
		t.Errorf("the copied refresh does not say why it copies:\n%s", log)
	}
}

func dedupe(sorted []string) []string {
	var out []string
	for i, s := range sorted {
		if i == 0 || s != sorted[i-1] {
			out = append(out, s)
		}
	}
	return out
}

// A layered refresh killed at any step (once its layer is laid, while the
// warm build writes through the overlay, once the layer is folded, once the
// folded layer became the target) leaves no ready base, the previous base
// current and unchanged, no overlay mounted and no process behind; the next
// build discards what is left and makes a ready, correct base.
func TestKilledLayeredRefresh(t *testing.T) {
	e := setupLight(t, "cargo build --workspace")
	needLayers(t, e.home)
	first, _ := e.buildLogged(t, e.store, "HEAD", false)
	sealed := digest(t, first.Record.Target)
	if err := e.repo.Append(fixture.LibPath(fixture.ChainC), "\n// killed refresh\n"); err != nil {
		t.Fatal(err)
	}
	c, err := e.repo.Commit("killed refresh")
	if err != nil {
		t.Fatal(err)
	}
	layerDirs := func() []string {
		m, _ := filepath.Glob(filepath.Join(e.store.BasesDir(), "*", "layer"))
		return m
	}
	for _, step := range []string{"base/layer-laid", "warm", "base/layer-folded", "base/layer-moved"} {
		// The test binaries read the failpoint knob (testenv.Binaries).
		cmd := exec.Command(filepath.Join(testenv.Binaries(t), "ferry"), "base", "--rev", c, "--json")
		cmd.Dir, cmd.Env = e.repo.Dir, append(os.Environ(), "FERRY_HOME="+e.home)
		var stderr testenv.Buffer
		cmd.Stderr = &stderr
		if step != "warm" {
			cmd.Env = append(cmd.Env, knobs.Failpoint+"="+step)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if step == "warm" {
			waitCompiling(t, cmd, &stderr)
			if len(layerDirs()) == 0 {
				t.Errorf("killed while compiling: no layer dir, so the refresh is not layered:\n%s", stderr.String())
			}
			cmd.Process.Kill()
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != -1 {
			t.Fatalf("%s: the refresh was not killed (%v):\n%s", step, err, stderr.String())
		}
		// The killed builder's PID namespace takes its processes, and
		// the last of them the overlay, with it: soon, not at once.
		mounted := func() []int {
			var users []int
			for _, l := range layerDirs() {
				users = append(users, sandbox.OverlayUsers(filepath.Join(l, "upper"), filepath.Join(l, "work"))...)
			}
			return users
		}
		deadline := time.Now().Add(10 * time.Second)
		for len(processesUsing(e.store.Dir)) > 0 || len(mounted()) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: processes outlived the killed refresh: %v; the layer is still mounted by %v", step, processesUsing(e.store.Dir), mounted())
			}
			time.Sleep(50 * time.Millisecond)
		}
		list, err := base.List(e.store)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range list {
			if en.ID != first.Record.ID && en.State == "ready" {
				t.Errorf("%s: killed refresh left a ready base %s", step, en.ID)
			}
		}
		if cur, _ := e.store.Current(); cur != first.Record.ID {
			t.Errorf("%s: current base %q, want the seed %s", step, cur, first.Record.ID)
		}
		if digest(t, first.Record.Target) != sealed {
			t.Fatalf("%s: the killed refresh changed its seed's target", step)
		}
	}
	// The builds after the first kill discarded what the one before left;
	// gc removes what the last left.
	swept, err := gc.Run(e.g, e.store, false)
	if err != nil {
		t.Fatalf("gc after the kills: %v", err)
	}
	if len(swept.Bases) != 1 || len(layerDirs()) > 0 {
		t.Errorf("gc after the kills deleted %v and left %v", swept.Bases, layerDirs())
	}
	res, log := e.buildLogged(t, e.store, c, false)
	if res.Reused || res.Record.SeedBy != base.SeedByLayer {
		t.Fatalf("after the kills: reused %v, seeded by %q\n%s", res.Reused, res.Record.SeedBy, log)
	}
	if len(layerDirs()) > 0 {
		t.Errorf("layer dirs left after the rebuild: %v", layerDirs())
	}
	want, _ := fixture.ExpectedMarker(res.Record.Src)
	if got := appOutput(t, res.Record); got != strings.TrimSpace(want) {
		t.Errorf("after the kills, the app prints\n%s\nwant\n%s", got, want)
	}
	if n := len(e.registered(t)); n != 2 {
		t.Errorf("%d base worktrees registered, want 2", n)
	}
}

// A refresh holds its seed's base lock shared while it builds: gc passes
// the seed over (it is not current: another base is) instead of removing
// the target the refresh's layer lies on, and the refresh completes.
func TestRefreshKeepsItsSeedFromGC(t *testing.T) {
	e := setupLight(t, "cargo build --workspace")
	needLayers(t, e.home)
	first, _ := e.buildLogged(t, e.store, "HEAD", false)
	e.repo.Append(fixture.LibPath(fixture.ChainB), "\n// seed\n")
	c2, _ := e.repo.Commit("seed")
	seed, _ := e.buildLogged(t, e.store, c2, false)
	if err := e.store.SetCurrent(first.Record.ID); err != nil {
		t.Fatal(err)
	}
	e.repo.Append(fixture.LibPath(fixture.ChainC), "\n// refresh\n")
	c3, _ := e.repo.Commit("refresh")
	cmd := e.command("--rev", c3, "--json")
	var stdout, stderr testenv.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitCompiling(t, cmd, &stderr)
	// Between warm commands only the lock keeps gc off: the overlay over
	// the seed is mounted only while one runs.
	held, err := lock.Held(e.store.BaseLock(seed.Record.ID))
	if err != nil || !held {
		t.Errorf("the seed's base lock is not held while the refresh builds (%v)", err)
	}
	res, err := gc.Run(e.g, e.store, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the refresh failed after gc ran beside it: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "seeded from base "+seed.Record.ID) {
		t.Fatalf("the refresh was not seeded from %s:\n%s", seed.Record.ID, stderr.String())
	}
	passed := slices.Contains(res.SkippedLocked, seed.Record.ID) || slices.Contains(res.SkippedInUse, seed.Record.ID)
	if !passed || slices.Contains(res.Bases, seed.Record.ID) {
		t.Errorf("gc beside the refresh: skipped %v (locked), %v (in use), deleted %v; want the seed %s skipped",
			res.SkippedLocked, res.SkippedInUse, res.Bases, seed.Record.ID)
	}
	if err := base.Verify(seed.Record); err != nil {
		t.Errorf("the seed after gc: %v", err)
	}
}

// A refresh builds on a layer wherever an overlay is had, clones where it
// is not and files clone, and copies otherwise, saying why.
func TestSeedMethodOrder(t *testing.T) {
	blocked := &platform.Blocker{Problem: "No overlay here.", Remedy: "mount one"}
	probeFails := func() (*platform.Blocker, error) { return nil, errors.New("no probe") }
	for _, c := range []struct {
		name      string
		h         base.SeedHost
		want, why string
	}{
		{"clones, overlay mounts", base.SeedHost{StoreDir: "/s", Clones: true, Layered: true}, base.SeedByLayer, ""},
		{"no clones, overlay mounts", base.SeedHost{StoreDir: "/s", Layered: true}, base.SeedByLayer, ""},
		{"clones, overlay blocked", base.SeedHost{StoreDir: "/s", Clones: true, Layered: true, Overlay: blocked}, base.SeedByReflink, ""},
		{"clones, overlay probe fails", base.SeedHost{StoreDir: "/s", Clones: true, Layered: true, OverlayProbe: probeFails}, base.SeedByReflink, ""},
		{"clones, host paths", base.SeedHost{StoreDir: "/s", Clones: true, Layered: true, HostPaths: true}, base.SeedByReflink, ""},
		{"clones, layered off", base.SeedHost{StoreDir: "/s", Clones: true}, base.SeedByReflink, ""},
		{"no clones, overlay blocked", base.SeedHost{StoreDir: "/s", Layered: true, Overlay: blocked}, base.SeedByCopy, "(No overlay here): mount one"},
		{"no clones, overlay probe fails", base.SeedHost{StoreDir: "/s", Layered: true, OverlayProbe: probeFails}, base.SeedByCopy, "the overlay probe failed: no probe"},
		{"no clones, host paths", base.SeedHost{StoreDir: "/s", Layered: true, HostPaths: true}, base.SeedByCopy, "host paths"},
		{"no clones, layered off", base.SeedHost{StoreDir: "/s"}, base.SeedByCopy, "[base] layered is off"},
		{"no clones, a comma in the path", base.SeedHost{StoreDir: "/s,t", Layered: true}, base.SeedByCopy, "overlayfs's mount options cannot name"},
	} {
		method, why := base.SeedMethod(c.h)
		if method != c.want || (c.why == "") != (why == "") || !strings.Contains(why, c.why) {
			t.Errorf("%s: %s (%q), want %s (%q)", c.name, method, why, c.want, c.why)
		}
		if method == base.SeedByCopy && !strings.HasPrefix(why, "the store's filesystem cannot clone files, and ") {
			t.Errorf("%s: the copy's reason %q does not say the store cannot clone", c.name, why)
		}
	}
}

// A write from outside Ferry into a file a layered refresh shares with its
// seed, while the refresh builds, is in the refresh's target before its
// seal, which would pass it. The seed's check once the target is final
// still shows it: the refresh is not made ready, and the seed (whose names
// the discard would otherwise launder, see base.ExposeSharedWrites) is made
// partial.
func TestSeedWrittenDuringALayeredRefresh(t *testing.T) {
	e := setupLight(t, "sleep 2 && cargo build --workspace")
	needLayers(t, e.home)
	first, _ := e.buildLogged(t, e.store, "HEAD", false)
	seed := first.Record
	// rustc's dep-info of a crate the edit leaves alone: a file the
	// build links in and reads nothing of (a written rlib would fail its
	// link).
	var victim string
	deps, _ := filepath.Glob(filepath.Join(seed.Target, "debug", "deps", "*.d"))
	for _, p := range deps {
		if name := filepath.Base(p); !strings.Contains(name, "chain") && !strings.Contains(name, "app") {
			victim = p
			break
		}
	}
	if victim == "" {
		t.Fatalf("no dep-info file the leaf edit leaves alone in %v", deps)
	}
	if err := e.repo.Append(fixture.LibPath(fixture.ChainC), "\n// written during the build\n"); err != nil {
		t.Fatal(err)
	}
	c, err := e.repo.Commit("leaf")
	if err != nil {
		t.Fatal(err)
	}
	// The write lands once the refresh's warm command runs (its layer is
	// there, and its links are laid well before the command's sleep ends).
	wrote := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			if layers, _ := filepath.Glob(filepath.Join(e.store.BasesDir(), c+"-*", "layer")); len(layers) > 0 {
				time.Sleep(time.Second)
				fi, err := os.Stat(victim)
				if err != nil {
					wrote <- err
					return
				}
				f, err := os.OpenFile(victim, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					wrote <- err
					return
				}
				f.WriteString("x")
				f.Close()
				wrote <- os.Chtimes(victim, fi.ModTime(), fi.ModTime())
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		wrote <- fmt.Errorf("the refresh of %s never made its layer", c)
	}()
	_, err = e.build(t, c)
	if werr := <-wrote; werr != nil {
		t.Fatal(werr)
	}
	var sc *base.SeedChangedError
	if !errors.As(err, &sc) || sc.Seed != seed.ID {
		t.Fatalf("the refresh: %v, want its seed %s named as changed", err, seed.ID)
	}
	if rel, _ := filepath.Rel(seed.Target, victim); !slices.Equal(sc.Files, []string{rel}) {
		t.Errorf("the written files named: %v, want [%s]", sc.Files, rel)
	}
	if recs, _ := filepath.Glob(filepath.Join(e.store.BasesDir(), c+"-*", "base.json")); len(recs) > 0 {
		t.Errorf("the refresh was made ready: %v", recs)
	}
	if _, err := os.Stat(e.store.Base(seed.ID).Record); !os.IsNotExist(err) {
		t.Errorf("the seed is still ready (%v); the discard hid the write from its check", err)
	}
}
