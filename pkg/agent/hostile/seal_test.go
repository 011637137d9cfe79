package hostile_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/agenttest"
	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/knobs"
)

type baseJSON struct {
	ID     string `json:"id"`
	Commit string `json:"commit"`
	Target string `json:"target"`
	Src    string `json:"src"`
}

func currentBase(w *agenttest.World, t *testing.T) baseJSON {
	t.Helper()
	var b baseJSON
	if err := json.Unmarshal([]byte(w.MustFerry(t, "base", "--json")), &b); err != nil || b.Target == "" {
		t.Fatalf("ferry base --json: %v", err)
	}
	return b
}

// Invariant 2 holds against the agents themselves: inside every agent's
// sandbox the store is read-only (the base's target and checkout, other
// agents' forks, the shim, the bus), whatever path names it, while the
// agent's own fork at the canonical target, its worktree, and worktrees kept
// under the store parent stay writable.
func TestAgentsCannotWriteBasesOrOtherAgents(t *testing.T) {
	w := agenttest.Shared(t)
	b := currentBase(w, t)
	ov := w.SpawnOverlay(t, "seal-ov")
	cp := w.Spawn(t, "seal-cp", "--backend", "copy")
	// A worktree under the store parent: not Ferry's, so it stays writable.
	in := w.Spawn(t, "seal-in", "--path", filepath.Join(w.Home, "worktrees-here", "seal-in"))
	store := w.StoreDir(t)
	app := filepath.Join(b.Target, "debug", fixture.BinName)
	before, err := os.ReadFile(app)
	if err != nil {
		t.Fatal(err)
	}
	cpFork := filepath.Join(store, "agents", "seal-cp", "target", "debug", fixture.BinName)
	writes := []string{
		app,
		filepath.Join(b.Src, "Cargo.toml"),
		filepath.Join(store, "bases", b.ID, "base.json"),
		filepath.Join(store, "current"),
		filepath.Join(w.Home, "bin", "planted"),
		filepath.Join(store, "agents", "seal-ov", "upper", "planted"),
		filepath.Join(w.Home, "new-file-in-the-store-parent"),
	}
	for _, name := range []string{"seal-ov", "seal-cp", "seal-in"} {
		targets := writes
		if name != "seal-cp" {
			targets = append(targets, cpFork)
		}
		for _, p := range targets {
			out, err := w.RunIn(name, "echo X > "+p)
			if err == nil || !strings.Contains(out, "Read-only file system") {
				t.Errorf("agent %s wrote %s: %v\n%s", name, p, err, out)
			}
		}
	}
	// bin/cargo is a link to the shim binary, which lives outside the store:
	// replacing the link is what would steer every agent's cargo.
	for _, name := range []string{"seal-ov", "seal-cp"} {
		if out, err := w.RunIn(name, "ln -sfn /bin/false "+filepath.Join(w.Home, "bin", "cargo")); err == nil || !strings.Contains(out, "Read-only file system") {
			t.Errorf("agent %s replaced the shim link: %v\n%s", name, err, out)
		}
	}
	if after, _ := os.ReadFile(app); string(after) != string(before) {
		t.Fatal("the base's binary changed")
	}
	if _, err := os.Stat(filepath.Join(w.Home, "new-file-in-the-store-parent")); err == nil {
		t.Fatal("an agent created a file in the store parent")
	}

	// What is the agent's own stays writable.
	mntTarget := filepath.Join(store, "mnt", "target")
	for _, a := range []agenttest.AgentJSON{ov, cp, in} {
		if out, err := w.RunIn(a.Name, "echo mine > "+mntTarget+"/mine && echo edit > "+a.Worktree+"/scratch.txt && cat "+mntTarget+"/mine"); err != nil || !strings.Contains(out, "mine") {
			t.Errorf("agent %s could not write its own fork or worktree: %v\n%s", a.Name, err, out)
		}
		os.Remove(filepath.Join(a.Worktree, "scratch.txt"))
	}
	// A cargo build still works in each (a new file in the fork).
	_, stderr, code := w.Cargo(in.Worktree, nil, "build", "-p", fixture.ChainC)
	if code != 0 {
		t.Fatalf("build in an agent whose worktree is under the store parent: %s", stderr)
	}
	if out, stderr, err := w.Ferry(w.Repo.Dir, nil, "base", "verify"); err != nil {
		t.Fatalf("base verify after the agents' attempts: %v\n%s%s", err, out, stderr)
	}
}

// From inside an agent's sandbox, `ferry run` for the same agent runs in the
// sandbox it is in, and Ferry's commands that change the store are refused
// with the reason, not with a raw read-only error.
func TestFerryInsideAnAgent(t *testing.T) {
	w := agenttest.Shared(t)
	w.Spawn(t, "inside-a")
	ferry := filepath.Join(w.Bin, "ferry")
	out, err := w.RunIn("inside-a", ferry+" run inside-a -- sh -c 'readlink /proc/self/ns/mnt; cargo build -p "+fixture.ChainC+" 2>&1'")
	if err != nil || strings.Contains(out, "Read-only") {
		t.Fatalf("ferry run inside the agent's own sandbox: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"spawn", "inside-b"}, {"rm", "inside-a"}, {"gc"}, {"base", "--rev", "HEAD", "--rebuild"}} {
		out, err := w.RunIn("inside-a", ferry+" "+strings.Join(args, " "))
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 6 || !strings.Contains(out, "read-only here") || !strings.Contains(out, "hint:") {
			t.Errorf("ferry %s inside an agent: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if w.BranchExists("ferry/inside-b") {
		t.Fatal("a spawn from inside an agent created its branch")
	}
}

// A symbolic link planted in the store is never followed: an agent whose
// fork was swapped for a link to another agent's is refused, and its build
// never writes the other fork.
func TestPlantedLinkInTheStoreIsRefused(t *testing.T) {
	w := agenttest.Shared(t)
	w.Spawn(t, "link-a", "--backend", "copy")
	w.Spawn(t, "link-b", "--backend", "copy")
	store := w.StoreDir(t)
	fork := filepath.Join(store, "agents", "link-a", "target")
	if err := os.Rename(fork, fork+".moved"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		os.Remove(fork)
		os.Rename(fork+".moved", fork)
	}()
	if err := os.Symlink(filepath.Join(store, "agents", "link-b", "target"), fork); err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(store, "agents", "link-b", "target", "written-by-a")
	_, stderr, err := w.Ferry(w.Repo.Dir, nil, "run", "link-a", "--", "sh", "-c", "echo X > "+filepath.Join(store, "mnt", "target", "written-by-a"))
	agenttest.ExpectRefusal(t, stderr, err, "is, or passes through, a symbolic link")
	t.Logf("ferry run with a planted link:\n%s", stderr)
	if strings.Contains(stderr, "namespaces") || strings.Contains(stderr, "dmesg") {
		t.Errorf("a planted link is reported as a host blocker:\n%s", stderr)
	}
	if _, err := os.Stat(probe); err == nil {
		t.Fatal("agent link-a's command wrote into link-b's fork")
	}
}

// A base changed from outside every sandbox (same user, on the host) is
// detected before it is reused, forked, or reported healthy, with the fix;
// --rebuild is the fix, refused while an overlay agent's processes use the
// base as their lower layer.
func TestChangedBaseIsRefused(t *testing.T) {
	w := agenttest.NewWorld(t, true)
	b := currentBase(w, t)
	before := w.SpawnOverlay(t, "before")
	app := filepath.Join(b.Target, "debug", fixture.BinName)
	f, err := os.OpenFile(app, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("tampered")
	f.Close()

	for _, args := range [][]string{{"base"}, {"spawn", "after"}, {"base", "verify"}} {
		out, stderr, err := w.Ferry(w.Repo.Dir, nil, args...)
		stderr = out + stderr // base verify lists what it found on stdout
		agenttest.ExpectRefusal(t, stderr, err, "changed after it was built")
		t.Logf("ferry %s:\n%s", strings.Join(args, " "), stderr)
		if !strings.Contains(stderr, "debug/"+fixture.BinName) || !strings.Contains(stderr, "ferry base --rebuild") {
			t.Errorf("ferry %s: the refusal names neither the file nor the fix:\n%s", strings.Join(args, " "), stderr)
		}
	}
	if w.BranchExists("ferry/after") {
		t.Fatal("spawn from a changed base created its branch")
	}
	out, _, err := w.Ferry(w.Repo.Dir, nil, "base", "verify", "--json")
	var results []struct {
		ID string `json:"id"`
		OK bool   `json:"ok"`
	}
	if jerr := json.Unmarshal([]byte(out), &results); jerr != nil || len(results) != 1 || results[0].OK || results[0].ID != b.ID || err == nil {
		t.Errorf("base verify --json: %v %v\n%s", err, jerr, out)
	}
	out, _, err = w.Ferry(w.Repo.Dir, nil, "doctor", "--json")
	if err == nil || !strings.Contains(out, `"name": "bases"`) || !strings.Contains(out, "changed after they were built") {
		t.Errorf("doctor does not report the changed base (%v):\n%s", err, out)
	}

	// An overlay agent's process holds the base as its lower layer.
	s := w.StartSession(t, "before", "echo ready; exec sleep 60")
	_, stderr, err := w.Ferry(w.Repo.Dir, nil, "base", "--rebuild")
	agenttest.ExpectRefusal(t, stderr, err, "lower layer of a running overlay agent")
	s.Stop()

	// A holder that keeps the agent's namespace for the host, with no
	// process running for the agent, is no user: --rebuild ends it.
	if _, stderr, code := w.Cargo(before.Worktree, []string{knobs.OverlayHold + "=2m"}, "-V"); code != 0 {
		t.Fatalf("cargo -V in the overlay agent: %s", stderr)
	}
	var ns struct {
		Holder int `json:"holder"`
	}
	if err := json.Unmarshal(agenttest.Must(os.ReadFile(filepath.Join(w.StoreDir(t), "agents", "before", "ns.json"))), &ns); err != nil || !agenttest.Alive(ns.Holder) {
		t.Fatalf("no live holder after a cargo call in the overlay agent: %v (pid %d)", err, ns.Holder)
	}
	w.MustFerry(t, "base", "--rebuild")
	if agenttest.Alive(ns.Holder) {
		t.Fatalf("ferry base --rebuild left the holder (pid %d) of an idle agent on the base running", ns.Holder)
	}
	w.MustFerry(t, "base", "verify")
	w.MustFerry(t, "base") // reused
	a := w.Spawn(t, "after")
	_, stderr, code := w.Cargo(a.Worktree, nil, "build", "--workspace", "--all-targets")
	if code != 0 || strings.Contains(stderr, "Compiling") {
		t.Fatalf("first build after the rebuild: exit %d\n%s", code, stderr)
	}
}
