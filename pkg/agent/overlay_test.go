package agent_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/agenttest"
)

// Two shells of one overlay agent see one overlay: a file written in one is
// seen by the other, and both run in the same mount namespace. Once the
// last process exits, the next call mounts afresh, with the upper intact.
func TestOverlaySessionsShareOneMount(t *testing.T) {
	w := agenttest.Shared(t)
	w.SpawnOverlay(t, "ov-share")
	target := filepath.Join(w.StoreDir(t), "mnt", "target")

	first := w.StartSession(t, "ov-share",
		"echo from-first > "+target+"/first.txt; echo ready; exec sleep 60")
	nsFirst := w.In(t, "ov-share", "readlink /proc/self/ns/mnt")
	// The second call joined: same namespace, and it sees the first's file.
	if got := w.In(t, "ov-share", "cat "+target+"/first.txt"); got != "from-first" {
		t.Fatalf("second shell reads %q from the first shell's file", got)
	}
	w.In(t, "ov-share", "echo from-second > "+target+"/second.txt")
	ids := w.In(t, "ov-share", "readlink /proc/self/ns/mnt; readlink /proc/"+strconv.Itoa(first.Pid())+"/ns/mnt 2>/dev/null || true")
	if !strings.HasPrefix(ids, nsFirst) {
		t.Fatalf("calls while a session lives ran in different namespaces: %q then %q", nsFirst, ids)
	}
	// Every write went to this agent's upper dir on the host, none to the base.
	upper := filepath.Join(w.StoreDir(t), "agents", "ov-share", "upper")
	for _, f := range []string{"first.txt", "second.txt"} {
		if _, err := os.Stat(filepath.Join(upper, f)); err != nil {
			t.Errorf("%s not in the upper dir: %v", f, err)
		}
	}
	nsJSON := filepath.Join(w.StoreDir(t), "agents", "ov-share", "ns.json")
	created := func() string {
		var rec struct {
			Pid     int    `json:"pid"`
			Created string `json:"created"`
		}
		json.Unmarshal(agenttest.Must(os.ReadFile(nsJSON)), &rec)
		return fmt.Sprint(rec.Pid, " ", rec.Created)
	}
	before := created()
	first.Stop()

	// The namespace died with its last process; the next call creates a
	// new one (ns.json records it: the kernel may give the new namespace
	// the old one's id), and the upper still holds both files.
	deadline := time.Now().Add(10 * time.Second)
	var after string
	for {
		after = w.In(t, "ov-share", "cat "+target+"/first.txt "+target+"/second.txt")
		if created() != before || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if created() == before || after != "from-first\nfrom-second" {
		t.Fatalf("after the last session exited: %q, namespace record %s (was %s)", after, created(), before)
	}
}

// Two overlay agents never share an upper dir, even while both are mounted.
func TestOverlayAgentsNeverShareAnUpper(t *testing.T) {
	w := agenttest.Shared(t)
	w.SpawnOverlay(t, "ov-one")
	w.SpawnOverlay(t, "ov-two")
	target := filepath.Join(w.StoreDir(t), "mnt", "target")
	// The last mount listed at the target is the one paths reach (the
	// sealed store's recursive bind repeats the overlay below it).
	upperOf := "awk '$5 == \"" + target + "\" {print $NF}' /proc/self/mountinfo | tail -n1 | tr , '\\n' | grep '^upperdir='"

	w.StartSession(t, "ov-one", "echo one > "+target+"/mine.txt; echo ready; exec sleep 60")
	w.StartSession(t, "ov-two", "echo two > "+target+"/mine.txt; echo ready; exec sleep 60")
	if a, b := w.In(t, "ov-one", "cat "+target+"/mine.txt"), w.In(t, "ov-two", "cat "+target+"/mine.txt"); a != "one" || b != "two" {
		t.Fatalf("each agent should read its own file: ov-one %q, ov-two %q", a, b)
	}
	u1, u2 := w.In(t, "ov-one", upperOf), w.In(t, "ov-two", upperOf)
	want1 := "upperdir=" + filepath.Join(w.StoreDir(t), "agents", "ov-one", "upper")
	want2 := "upperdir=" + filepath.Join(w.StoreDir(t), "agents", "ov-two", "upper")
	if r, err := filepath.EvalSymlinks(w.StoreDir(t)); err == nil {
		want1 = "upperdir=" + filepath.Join(r, "agents", "ov-one", "upper")
		want2 = "upperdir=" + filepath.Join(r, "agents", "ov-two", "upper")
	}
	if u1 != want1 || u2 != want2 {
		t.Fatalf("upper dirs: ov-one %q, ov-two %q; want %q and %q", u1, u2, want1, want2)
	}
}

// A process in a namespace nested inside an overlay agent's sandbox, which
// closed its lock descriptors, still has the overlay mounted: no second
// mount is made on the same upper while it lives. Enter waits for it, then
// refuses naming it; list counts it as busy and rm refuses. Once it exits,
// the agent is entered again with its upper intact.
func TestOverlayNestedHolderBlocksASecondMount(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("util-linux unshare is not installed")
	}
	w := agenttest.Shared(t)
	w.SpawnOverlay(t, "ov-nested")
	target := filepath.Join(w.StoreDir(t), "mnt", "target")
	w.In(t, "ov-nested", "echo kept > "+target+"/kept.txt")

	ready := filepath.Join(t.TempDir(), "holder.pid")
	// The holder closes every inherited descriptor above stderr (busy.lock
	// and mount.lock among them), enters a nested user and mount namespace
	// (which copies the overlay mount), and outlives its session.
	script := fmt.Sprintf(`exec 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&-
unshare --user --map-current-user --mount sh -c 'echo $$ > %[1]s.tmp; mv %[1]s.tmp %[1]s; exec sleep 120' </dev/null >/dev/null 2>&1 &
while [ ! -s %[1]s ]; do sleep 0.05; done`, ready)
	w.In(t, "ov-nested", script)
	data, err := os.ReadFile(ready)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	holder, _ := os.FindProcess(pid)
	t.Cleanup(func() { holder.Kill() })

	start := time.Now()
	out, stderr, err := w.Ferry(w.Repo.Dir, nil, "run", "ov-nested", "--", "true")
	waited := time.Since(start)
	agenttest.ExpectRefusal(t, stderr, err, "still mounted where Ferry cannot join it")
	if !strings.Contains(stderr, "pid "+strconv.Itoa(pid)) {
		t.Errorf("the refusal does not name the holder %d:\n%s%s", pid, out, stderr)
	}
	if waited < 5*time.Second {
		t.Errorf("refused after %s, without waiting for the holder to exit", waited)
	}

	listOut, _, _ := w.Ferry(w.Repo.Dir, nil, "list", "--json")
	var list []struct {
		Name string `json:"name"`
		Busy bool   `json:"busy"`
	}
	if err := json.Unmarshal([]byte(listOut), &list); err != nil {
		t.Fatalf("list: %v\n%s", err, listOut)
	}
	for _, e := range list {
		if e.Name == "ov-nested" && !e.Busy {
			t.Errorf("ferry list does not count the nested holder as a user")
		}
	}
	_, stderr, err = w.Ferry(w.Repo.Dir, nil, "rm", "--force", "ov-nested")
	agenttest.ExpectRefusal(t, stderr, err, "processes still use agent")

	holder.Kill()
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, stderr, err = w.Ferry(w.Repo.Dir, nil, "run", "ov-nested", "--", "cat", target+"/kept.txt")
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || strings.TrimSpace(out) != "kept" {
		t.Fatalf("after the holder exited: %v %q\n%s", err, out, stderr)
	}
}

// Agent overlays are mounted volatile, so a call that ends the namespace
// does not wait for the upper filesystem's sync. An upper last mounted in
// this boot is trusted and remounted as it is; one last mounted before a
// reboot may hold unflushed writes, so it is emptied, and the agent's target
// is the base's again: its first build compiles nothing but what the
// worktree changed (here nothing).
func TestOverlayUpperFromAnotherBootIsReset(t *testing.T) {
	w := agenttest.Shared(t)
	a := w.SpawnOverlay(t, "ov-boot")
	dir := filepath.Join(w.StoreDir(t), "agents", "ov-boot")
	target := filepath.Join(w.StoreDir(t), "mnt", "target")
	w.In(t, "ov-boot", "echo mine > "+target+"/mine.txt")
	marker := filepath.Join(dir, "work", "work", "incompat", "volatile")
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the overlay was not mounted volatile: %v", err)
	}
	// Same boot: remounted with the upper as it was.
	if got := w.In(t, "ov-boot", "cat "+target+"/mine.txt"); got != "mine" {
		t.Fatalf("after a remount in the same boot: %q", got)
	}

	// Pretend the upper was last mounted in another boot.
	nsFile := filepath.Join(dir, "ns.json")
	var rec map[string]any
	data, err := os.ReadFile(nsFile)
	if err != nil || json.Unmarshal(data, &rec) != nil || rec["boot"] == "" {
		t.Fatalf("ns.json %s: %v", data, err)
	}
	rec["boot"] = "00000000-0000-0000-0000-000000000000"
	data, _ = json.Marshal(rec)
	if err := os.WriteFile(nsFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := w.In(t, "ov-boot", "test -e "+target+"/mine.txt && echo kept || echo reset"); got != "reset" {
		t.Fatalf("an upper from another boot was %s", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "upper", "mine.txt")); err == nil {
		t.Fatal("the upper still holds the file on the host")
	}
	_, stderr, code := w.Cargo(a.Worktree, nil, "build", "--workspace", "--all-targets")
	if code != 0 || strings.Contains(stderr, "Compiling") {
		t.Fatalf("first build after the reset (exit %d) should compile nothing:\n%s", code, stderr)
	}
}
