package agent_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/agenttest"
	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/freshness"
	"github.com/ferrydev/ferry/pkg/git"
)

// hostRun runs the agent's binary the way an agent tool's shell does:
// ./target/debug/app from the worktree, outside any sandbox.
func hostRun(t *testing.T, wt string) (string, error) {
	t.Helper()
	c := exec.Command("./" + filepath.Join("target", "debug", fixture.BinName))
	c.Dir = wt
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	if err != nil {
		return stderr.String(), err
	}
	return strings.TrimSpace(stdout.String()), nil
}

// buildAndRunFromHost spawns agent name, builds through the shim, runs
// ./target/debug/app from a plain host process, edits a source, builds and
// runs again: each run must print the agent's own marker.
func buildAndRunFromHost(w *agenttest.World, t *testing.T, name string, extra []string, spawnArgs ...string) agenttest.AgentJSON {
	t.Helper()
	a := w.Spawn(t, name, spawnArgs...)
	link := filepath.Join(a.Worktree, "target")
	if _, err := os.Lstat(link); err != nil {
		t.Fatalf("no target in the worktree: %v", err)
	}
	// Nothing spawn did, the link included, is the agent's change: the
	// shim's first check finds nothing to freshen.
	gitDir, err := git.WorktreeGitDir(a.Worktree)
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(w.StoreDir(t), "agents", a.Name, "freshness")
	if mv, err := freshness.FreshenMoved(a.Worktree, gitDir, state, "", nil); err != nil || mv.Full || len(mv.Files)+len(mv.Links) != 0 {
		t.Fatalf("right after spawn the check freshens %q and links %q (full %v, err %v): spawn's own changes taken for the agent's", mv.Files, mv.Links, mv.Full, err)
	}
	for i, edit := range []string{"", "\n// edited by the agent\n"} {
		if edit != "" {
			p := filepath.Join(a.Worktree, fixture.LibPath(fixture.ChainC))
			if err := os.WriteFile(p, append(agenttest.Must(os.ReadFile(p)), edit...), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if _, stderr, code := w.Cargo(a.Worktree, extra, "build", "--workspace"); code != 0 {
			t.Fatalf("build %d: %s", i, stderr)
		}
		want, err := fixture.ExpectedMarker(a.Worktree)
		if err != nil {
			t.Fatal(err)
		}
		got, err := hostRun(t, a.Worktree)
		if err != nil {
			t.Fatalf("run %d: ./target/debug/%s from the host: %v\n%s", i, fixture.BinName, err, got)
		}
		if got != strings.TrimSpace(want) {
			t.Fatalf("run %d: ./target/debug/%s from the host prints\n%s\nwant the agent's\n%s", i, fixture.BinName, got, want)
		}
	}
	// ferry list and ferry env name where the host reaches it.
	var list []struct {
		Name       string `json:"name"`
		HostTarget string `json:"host_target"`
		TargetLink string `json:"target_link"`
	}
	if err := json.Unmarshal([]byte(w.MustFerry(t, "list", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	var env map[string]string
	if err := json.Unmarshal([]byte(w.MustFerry(t, "env", name, "--json")), &env); err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		if e.Name != name {
			continue
		}
		if e.HostTarget == "" || env["FERRY_HOST_TARGET"] != e.HostTarget {
			t.Fatalf("ferry list host_target %q, ferry env FERRY_HOST_TARGET %q", e.HostTarget, env["FERRY_HOST_TARGET"])
		}
		if _, err := os.Stat(filepath.Join(e.HostTarget, "debug", fixture.BinName)); err != nil {
			t.Fatalf("host_target %s does not hold the binary: %v", e.HostTarget, err)
		}
		if fi, _ := os.Lstat(link); fi != nil && fi.IsDir() {
			// A directory of links (the rules ignore target/ only).
			if dest, err := os.Readlink(filepath.Join(link, "debug")); err != nil || dest != filepath.Join(e.TargetLink, "debug") {
				t.Fatalf("the worktree's target/debug points to %q (%v), the record says %q", dest, err, e.TargetLink)
			}
		} else if dest, err := os.Readlink(link); err != nil || dest != e.TargetLink {
			t.Fatalf("the worktree's link points to %q (%v), the record says %q", dest, err, e.TargetLink)
		}
		// The edit goes, so what rm judges is the link alone.
		if out, err := w.Repo.Git("-C", a.Worktree, "checkout", "--", "."); err != nil {
			t.Fatalf("git checkout: %v\n%s", err, out)
		}
		return a
	}
	t.Fatalf("agent %s not listed", name)
	return a
}

// A copy agent's binary runs from the worktree's ./target on the host, is
// the agent's own after an edit, and the link is not the agent's work: rm
// without --force removes the agent.
func TestHostTargetCopy(t *testing.T) {
	w := agenttest.Shared(t)
	a := buildAndRunFromHost(w, t, "hostcopy", nil, "--backend", "copy")
	w.MustFerry(t, "rm", "hostcopy")
	if _, err := os.Lstat(a.Worktree); err == nil {
		t.Fatal("rm left the worktree")
	}
}

// The same for a reflink agent, on a filesystem that clones.
func TestHostTargetReflink(t *testing.T) {
	xfs := knobs.XFS()
	if xfs == "" {
		t.Skip("FERRY_TEST_XFS is not set (.ci/run mounts XFS with reflink=1 and sets it)")
	}
	root, err := os.MkdirTemp(xfs, "hosttarget-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	w := agenttest.NewWorld(t, false)
	w.Home, w.Worktrees = filepath.Join(root, "home"), filepath.Join(root, "worktrees")
	w.MustFerry(t, "base")
	buildAndRunFromHost(w, t, "hostreflink", nil, "--backend", "reflink")
	w.MustFerry(t, "rm", "hostreflink")
}

// Where the ignore rules ignore target only as a directory (target/, a
// trailing slash), spawn makes target a directory of links, one per entry
// of the base's target: ./target/debug/app runs the agent's build from the
// host, the worktree stays clean, and the directory is no work of the
// agent's (rm without --force); an entry the user adds in it is theirs.
func TestHostTargetDirectory(t *testing.T) {
	w := agenttest.NewWorld(t, false)
	w.Repo.Write(".gitignore", "target/\n/tools/target\n")
	if _, err := w.Repo.Commit("ignore target/ as a directory"); err != nil {
		t.Fatal(err)
	}
	w.MustFerry(t, "base")
	a := buildAndRunFromHost(w, t, "slash", nil, "--backend", "copy")
	rec := readRecord(t, w, "slash")
	if fi, err := os.Lstat(filepath.Join(a.Worktree, "target")); err != nil || !fi.IsDir() {
		t.Fatalf("target is not a directory: %v", err)
	}
	if !slices.Contains(rec.TargetLinks, "debug") || !slices.Contains(rec.TargetLinks, "release") || slices.Contains(rec.TargetLinks, "ferry-ws") {
		t.Fatalf("target_links %q", rec.TargetLinks)
	}
	if out, _ := w.Repo.Git("-C", a.Worktree, "status", "--porcelain"); strings.TrimSpace(out) != "" {
		t.Fatalf("the agent's worktree is not clean:\n%s", out)
	}
	if !agent.OwnEntry(rec, "target/") || !agent.OwnEntry(rec, "target/debug") {
		t.Fatal("the directory spawn made is not Ferry's own entry")
	}
	// The user's file in it makes the directory theirs.
	mine := filepath.Join(a.Worktree, "target", "notes.txt")
	if err := os.WriteFile(mine, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if agent.OwnEntry(rec, "target/") {
		t.Fatal("a target directory holding the user's file counts as Ferry's own entry")
	}
	os.Remove(mine)
	w.MustFerry(t, "rm", "slash")
	if _, err := os.Lstat(a.Worktree); err == nil {
		t.Fatal("rm left the worktree")
	}
}

// Where the ignore rules ignore neither a link nor a directory named
// target, spawn makes none and says why; the worktree stays clean.
func TestHostTargetSkipped(t *testing.T) {
	w := agenttest.NewWorld(t, false)
	w.Repo.Write(".gitignore", "/tools/target\n")
	if _, err := w.Repo.Commit("ignore no target"); err != nil {
		t.Fatal(err)
	}
	w.MustFerry(t, "base")
	a := w.Spawn(t, "noignore", "--backend", "copy")
	if _, err := os.Lstat(filepath.Join(a.Worktree, "target")); err == nil {
		t.Fatal("spawn made a target the ignore rules do not ignore")
	}
	rec := readRecord(t, w, "noignore")
	if rec.TargetLink != "" || !strings.Contains(rec.TargetLinkSkipped, "ignore neither") {
		t.Fatalf("record: target_link %q, skipped %q", rec.TargetLink, rec.TargetLinkSkipped)
	}
	if out, _ := w.Repo.Git("-C", a.Worktree, "status", "--porcelain"); strings.TrimSpace(out) != "" {
		t.Fatalf("the new agent's worktree is not clean:\n%s", out)
	}
	w.MustFerry(t, "rm", "noignore")
}

func readRecord(t *testing.T, w *agenttest.World, name string) *agent.Record {
	t.Helper()
	var r agent.Record
	if err := json.Unmarshal(agenttest.Must(os.ReadFile(filepath.Join(w.StoreDir(t), "agents", name, "agent.json"))), &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// OwnEntry names the link while it is as spawn made it, and not once the
// user retargets or replaces it.
func TestOwnEntry(t *testing.T) {
	w := agenttest.Shared(t)
	a := w.Spawn(t, "ownentry", "--backend", "copy")
	r := readRecord(t, w, "ownentry")
	if !agent.OwnEntry(r, "target") {
		t.Fatal("the link spawn made is not Ferry's own entry")
	}
	if agent.OwnEntry(r, "target/") || agent.OwnEntry(r, "src") {
		t.Fatal("another path counts as Ferry's own entry")
	}
	link := filepath.Join(a.Worktree, "target")
	os.Remove(link)
	os.Symlink(t.TempDir(), link)
	if agent.OwnEntry(r, "target") {
		t.Fatal("a link the user retargeted counts as Ferry's own entry")
	}
	os.Remove(link)
	os.Mkdir(link, 0o755)
	if agent.OwnEntry(r, "target") {
		t.Fatal("a directory the user made counts as Ferry's own entry")
	}
	w.MustFerry(t, "rm", "--force", "ownentry")
}

// An overlay agent's build output exists only in its namespace: a holder
// keeps it alive after the shim's cargo exits, ./target/debug/app runs
// from the host through it, and the agent is not busy for it. Once idle,
// the holder goes and ./target leads nowhere (never to the base's output);
// the next build brings it back; rm without --force ends the holder.
func TestHostTargetOverlay(t *testing.T) {
	w := agenttest.Shared(t)
	if _, stderr, err := w.Ferry(w.Repo.Dir, nil, "spawn", "probe-overlay", "--backend", "overlay"); err != nil {
		t.Skipf("no overlay backend here: %s", stderr)
	}
	w.MustFerry(t, "rm", "probe-overlay")
	hold := []string{knobs.OverlayHold + "=3s"}
	a := buildAndRunFromHost(w, t, "hostoverlay", hold, "--backend", "overlay")
	var ns struct {
		Holder int `json:"holder"`
	}
	nsPath := filepath.Join(w.StoreDir(t), "agents", "hostoverlay", "ns.json")
	if err := json.Unmarshal(agenttest.Must(os.ReadFile(nsPath)), &ns); err != nil || ns.Holder == 0 {
		t.Fatalf("ns.json names no holder: %v", err)
	}
	if out := w.MustFerry(t, "list", "--json"); !strings.Contains(out, `"busy": false`) {
		t.Fatalf("the holder makes the agent busy:\n%s", out)
	}
	// Idle: the holder goes within its idle time and a tick.
	deadline := time.Now().Add(20 * time.Second)
	for agenttest.Alive(ns.Holder) {
		if time.Now().After(deadline) {
			t.Fatal("the holder outlived its idle time")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, err := hostRun(t, a.Worktree); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("./target/debug/app without a live namespace: %v %q, want no such file", err, out)
	}
	var env map[string]string
	json.Unmarshal([]byte(w.MustFerry(t, "env", "hostoverlay", "--json")), &env)
	if env["FERRY_HOST_TARGET"] != "" {
		t.Fatalf("ferry env names %q without a live namespace", env["FERRY_HOST_TARGET"])
	}
	if out := w.MustFerry(t, "env", "hostoverlay"); !strings.Contains(out, "\nunset FERRY_HOST_TARGET") || strings.Contains(out, "export FERRY_HOST_TARGET") {
		t.Fatalf("ferry env without a live namespace exports an empty FERRY_HOST_TARGET, or does not unset it:\n%s", out)
	}
	// A build brings it back; rm ends the holder it made.
	if _, stderr, code := w.Cargo(a.Worktree, hold, "build", "--workspace"); code != 0 {
		t.Fatalf("build: %s", stderr)
	}
	if _, err := hostRun(t, a.Worktree); err != nil {
		t.Fatalf("after a new build: %v", err)
	}
	json.Unmarshal(agenttest.Must(os.ReadFile(nsPath)), &ns)
	w.MustFerry(t, "rm", "hostoverlay")
	if agenttest.Alive(ns.Holder) {
		t.Fatal("rm left the holder running")
	}
}

// An overlay agent's host-target leads to its view, a directory only its
// own namespace mounts the fork on: through another agent's holder (a pid
// reused after this agent's holder died unannounced) or the host, the same
// path shows nothing, never the other agent's build.
func TestOverlayViewIsTheAgentsOwn(t *testing.T) {
	w := agenttest.Shared(t)
	if _, stderr, err := w.Ferry(w.Repo.Dir, nil, "spawn", "probe-view", "--backend", "overlay"); err != nil {
		t.Skipf("no overlay backend here: %s", stderr)
	}
	w.MustFerry(t, "rm", "probe-view")
	hold := []string{knobs.OverlayHold + "=2m"}
	holderOf := func(name string) int {
		var ns struct {
			Holder int `json:"holder"`
		}
		p := filepath.Join(w.StoreDir(t), "agents", name, "ns.json")
		if err := json.Unmarshal(agenttest.Must(os.ReadFile(p)), &ns); err != nil || ns.Holder == 0 {
			t.Fatalf("%s names no holder: %v", p, err)
		}
		return ns.Holder
	}
	buildAndRunFromHost(w, t, "viewone", hold, "--backend", "overlay")
	buildAndRunFromHost(w, t, "viewtwo", hold, "--backend", "overlay")
	one, two := holderOf("viewone"), holderOf("viewtwo")
	dest, err := os.Readlink(filepath.Join(w.StoreDir(t), "agents", "viewone", "host-target"))
	if err != nil {
		t.Fatal(err)
	}
	prefix := "/proc/" + strconv.Itoa(one) + "/root/"
	if !strings.HasPrefix(dest, prefix) || !strings.HasSuffix(dest, "/agents/viewone/view") {
		t.Fatalf("viewone's host-target is %s, want %s…/agents/viewone/view", dest, prefix)
	}
	app := filepath.Join("debug", fixture.BinName)
	if _, err := os.Stat(filepath.Join(dest, app)); err != nil {
		t.Fatalf("viewone's own holder does not show its build: %v", err)
	}
	for what, other := range map[string]string{
		"viewtwo's holder": "/proc/" + strconv.Itoa(two) + "/root/",
		"the host":         "/proc/self/root/",
	} {
		p := filepath.Join(other+strings.TrimPrefix(dest, prefix), app)
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("viewone's view through %s (%s): %v, want it missing", what, p, err)
		}
	}
	w.MustFerry(t, "rm", "--force", "viewone")
	w.MustFerry(t, "rm", "--force", "viewtwo")
	if agenttest.Alive(one) || agenttest.Alive(two) {
		t.Fatal("rm left a holder running")
	}
}
