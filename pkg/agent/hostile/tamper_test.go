package hostile_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/agenttest"
	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/pkg/base"
)

// editRecord rewrites base.json of base id with edit applied to its
// target_seal, as a process of the same user could.
func editRecord(w *agenttest.World, t *testing.T, id string, edit func(seal map[string]any)) {
	t.Helper()
	p := filepath.Join(w.StoreDir(t), "bases", id, "base.json")
	var rec map[string]any
	if err := json.Unmarshal(agenttest.Must(os.ReadFile(p)), &rec); err != nil {
		t.Fatal(err)
	}
	seal := rec["target_seal"].(map[string]any)
	edit(seal)
	b, _ := json.MarshalIndent(rec, "", "  ")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A same-size write into a base's file with its mtime put back, from
// outside every sandbox, is caught by the check before a spawn forks the
// base and by ferry base verify, naming the file, with the fix. Forking
// (copy, and overlay where it mounts) does not trip the seal. With the
// listing's digest forged to match, ferry base verify --full still names
// the file by its bytes. A record as an older Ferry wrote it verifies, and
// ferry base verify says its seal does not cover restored timestamps.
func TestRestoredTimestampsAreRefused(t *testing.T) {
	w := agenttest.NewWorld(t, true)
	b := currentBase(w, t)
	w.Spawn(t, "fork-copy", "--backend", "copy")
	w.SpawnOverlay(t, "fork-ov")
	// The overlay mounted over the base, its lower layer, and read.
	if out, err := w.RunIn("fork-ov", "cat "+filepath.Join(w.StoreDir(t), "mnt", "target", "debug", fixture.BinName)+" > /dev/null"); err != nil {
		t.Fatalf("reading the overlay agent's fork: %v\n%s", err, out)
	}
	if out, stderr, err := w.Ferry(w.Repo.Dir, nil, "base", "verify", "--full"); err != nil || !strings.Contains(out, "every file read") {
		t.Fatalf("base verify --full after forking: %v\n%s%s", err, out, stderr)
	}

	rel := "debug/" + fixture.BinName
	app := filepath.Join(b.Target, rel)
	fi, err := os.Stat(app)
	if err != nil {
		t.Fatal(err)
	}
	data := agenttest.Must(os.ReadFile(app))
	data[len(data)/2] ^= 0xff
	time.Sleep(20 * time.Millisecond) // past the seal, on the kernel's coarse clock
	if err := os.WriteFile(app, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(app, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(app); after.Size() != fi.Size() || !after.ModTime().Equal(fi.ModTime()) {
		t.Fatal("the write did not keep the size and mtime, so this test tries nothing")
	}
	for _, args := range [][]string{{"spawn", "after"}, {"base", "verify"}} {
		out, stderr, err := w.Ferry(w.Repo.Dir, nil, args...)
		stderr = out + stderr
		agenttest.ExpectRefusal(t, stderr, err, "changed after it was built")
		if !strings.Contains(stderr, rel) || !strings.Contains(stderr, "ferry base --rebuild") {
			t.Errorf("ferry %s: the refusal names neither %s nor the fix:\n%s", strings.Join(args, " "), rel, stderr)
		}
	}
	if w.BranchExists("ferry/after") {
		t.Fatal("a spawn from the changed base created its branch")
	}

	// The listing forged to match: only the bytes tell.
	forged, err := base.Seal(b.Target)
	if err != nil {
		t.Fatal(err)
	}
	editRecord(w, t, b.ID, func(seal map[string]any) {
		seal["digest"], seal["entries"], seal["bytes"], seal["sealed"] = forged.Digest, forged.Entries, forged.Bytes, forged.Sealed
	})
	if out, stderr, err := w.Ferry(w.Repo.Dir, nil, "base", "verify"); err != nil {
		t.Fatalf("the forged listing does not pass, so --full below tries nothing: %v\n%s%s", err, out, stderr)
	}
	out, stderr, err := w.Ferry(w.Repo.Dir, nil, "base", "verify", "--full")
	agenttest.ExpectRefusal(t, out+stderr, err, "bytes differ")
	if !strings.Contains(out, rel) {
		t.Errorf("verify --full does not name %s:\n%s", rel, out)
	}
	out, _, err = w.Ferry(w.Repo.Dir, nil, "base", "verify", "--full", "--json")
	var results []struct {
		OK   bool `json:"ok"`
		Full bool `json:"full"`
	}
	if jerr := json.Unmarshal([]byte(out), &results); jerr != nil || len(results) != 1 || results[0].OK || !results[0].Full || err == nil {
		t.Errorf("base verify --full --json: %v %v\n%s", err, jerr, out)
	}

	// Put back, and recorded as an older Ferry recorded it.
	data[len(data)/2] ^= 0xff
	os.WriteFile(app, data, 0)
	os.Chtimes(app, fi.ModTime(), fi.ModTime())
	old := oldListing(t, b.Target)
	editRecord(w, t, b.ID, func(seal map[string]any) {
		delete(seal, "version")
		delete(seal, "sealed")
		delete(seal, "contents")
		seal["digest"] = old
	})
	out, stderr, err = w.Ferry(w.Repo.Dir, nil, "base", "verify")
	if err != nil || !strings.Contains(out, "ok") || !strings.Contains(out, "does not cover restored timestamps") || !strings.Contains(out, "ferry base --rebuild --rev") {
		t.Errorf("base verify of an old record: %v\n%s%s", err, out, stderr)
	}
	w.Spawn(t, "from-old") // an old record still seals what it did
}

// oldListing is the digest a Ferry before seal version 2 recorded of
// target: every entry's path, mode, size, mtime and link target.
func oldListing(t *testing.T, target string) string {
	t.Helper()
	h := sha256.New()
	var walk func(dir, rel string)
	line := func(rel string, fi os.FileInfo, link string) {
		size := int64(0)
		if fi.Mode().IsRegular() {
			size = fi.Size()
		}
		h.Write([]byte(strconv.Quote(rel) + " " + strconv.FormatUint(uint64(rawMode(fi)), 8) + " " + strconv.FormatInt(size, 10) + " " +
			strconv.FormatInt(fi.ModTime().UnixNano(), 10) + " " + strconv.Quote(link) + "\n"))
	}
	walk = func(dir, rel string) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents { // name order
			p := e.Name()
			if rel != "" {
				p = rel + "/" + p
			}
			full := filepath.Join(dir, e.Name())
			fi, err := os.Lstat(full)
			if err != nil {
				t.Fatal(err)
			}
			link := ""
			if fi.Mode()&os.ModeSymlink != 0 {
				link, _ = os.Readlink(full)
			}
			line(p, fi, link)
			if fi.IsDir() {
				walk(full, p)
			}
		}
	}
	fi, err := os.Lstat(target)
	if err != nil {
		t.Fatal(err)
	}
	line(".", fi, "")
	walk(target, "")
	return hex.EncodeToString(h.Sum(nil))
}

// rawMode is the st_mode the kernel reports for fi.
func rawMode(fi os.FileInfo) uint32 {
	return uint32(fi.Sys().(*syscall.Stat_t).Mode) // uint16 on macOS
}
