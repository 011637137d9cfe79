package base

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/record"
	"github.com/ferrydev/ferry/pkg/store"
)

// makeTarget lays out n files in directories of 100, like a target dir.
func makeTarget(t testing.TB, n int) string {
	t.Helper()
	dir := t.TempDir()
	fill(t, dir, n)
	return dir
}

func fill(t testing.TB, dir string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		d := filepath.Join(dir, "debug", fmt.Sprintf("d%03d", i/100))
		os.MkdirAll(d, 0o755)
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%04d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sealedBase makes a ready base's directory in a store under t's temporary
// directory, its target holding n files, sealed as a build seals it, and
// returns its record.
func sealedBase(t testing.TB, s *store.Store, id string, n int) *Record {
	t.Helper()
	files := s.Base(id)
	if err := os.MkdirAll(files.Target, 0o755); err != nil {
		t.Fatal(err)
	}
	fill(t, files.Target, n)
	return sealDir(t, s, id)
}

func sealDir(t testing.TB, s *store.Store, id string) *Record {
	t.Helper()
	files := s.Base(id)
	seal, err := SealBase(files.Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &Record{Base: record.Base{ID: id, Commit: "c0ffee", Store: s.Dir, Dir: files.Dir, Target: files.Target, TargetSeal: seal, Created: time.Now()}}
}

func testStore(t testing.TB) *store.Store {
	return &store.Store{Dir: filepath.Join(t.TempDir(), "store")}
}

// Verify accepts the target as sealed and refuses every kind of change:
// a write, a touch, a new file, a removal, a chmod, a retargeted link.
func TestVerifyDetectsChanges(t *testing.T) {
	target := makeTarget(t, 250)
	os.Symlink("d000", filepath.Join(target, "debug", "link"))
	seal, err := Seal(target)
	if err != nil {
		t.Fatal(err)
	}
	r := &Record{Base: record.Base{ID: "c-f", Commit: "c", Target: target, TargetSeal: seal, Created: time.Now()}}
	if err := Verify(r); err != nil {
		t.Fatalf("untouched target: %v", err)
	}
	f := filepath.Join(target, "debug", "d001", "f0150")
	changes := map[string]func() func(){
		"write": func() func() {
			os.WriteFile(f, []byte("y"), 0o644)
			return func() { os.WriteFile(f, []byte("x"), 0o644) }
		},
		"append": func() func() {
			os.WriteFile(f, []byte("xx"), 0o644)
			return func() { os.WriteFile(f, []byte("x"), 0o644) }
		},
		"new file": func() func() {
			p := filepath.Join(target, "debug", "planted")
			os.WriteFile(p, nil, 0o644)
			return func() { os.Remove(p) }
		},
		"chmod": func() func() {
			os.Chmod(f, 0o755)
			return func() { os.Chmod(f, 0o644) }
		},
		"link": func() func() {
			l := filepath.Join(target, "debug", "link")
			os.Remove(l)
			os.Symlink("d001", l)
			return func() { os.Remove(l); os.Symlink("d000", l) }
		},
	}
	for name, change := range changes {
		undo := change()
		err := Verify(r)
		undo()
		if err == nil {
			t.Errorf("%s: not detected", name)
		}
		// Undoing restores bytes and mode but not mtimes: the seal still
		// differs, and rightly (Cargo compares mtimes).
		fi, _ := os.Lstat(f)
		os.Chtimes(f, fi.ModTime(), fi.ModTime())
	}
	os.RemoveAll(filepath.Join(target, "debug", "d002"))
	if err := Verify(r); err == nil {
		t.Error("a removed directory is not detected")
	}
	r.TargetSeal.Digest = ""
	if err := Verify(r); err == nil {
		t.Error("a record without a seal is trusted")
	}
}

// putBack restores p's mtime (and atime) to what fi says, as a process of
// the same user can.
func putBack(t *testing.T, p string, fi os.FileInfo) {
	t.Helper()
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// What a process of the same user can put back (bytes, size, mtime, mode)
// does not hide a change: a same-size write with its mtime restored, a
// file renamed over another with the old one's mtime, a hard link added
// from outside the target, a chmod undone. Each is refused naming the file,
// with the --rebuild hint.
func TestVerifyCatchesRestoredTimestamps(t *testing.T) {
	s := testStore(t)
	r := sealedBase(t, s, "c0ffee-f", 250)
	if err := Verify(r); err != nil {
		t.Fatalf("untouched target: %v", err)
	}
	rel := "debug/d001/f0150"
	f := filepath.Join(r.Target, rel)
	outside := filepath.Join(t.TempDir(), "elsewhere")
	changes := map[string]func(fi os.FileInfo){
		"same-size write, mtime restored": func(fi os.FileInfo) {
			os.WriteFile(f, []byte("y"), 0o644)
			putBack(t, f, fi)
		},
		"renamed over, mtime restored": func(fi os.FileInfo) {
			tmp := f + ".new"
			os.WriteFile(tmp, []byte("z"), 0o644)
			putBack(t, tmp, fi)
			os.Rename(tmp, f)
			putBack(t, filepath.Dir(f), dirInfo(t, filepath.Dir(f)))
		},
		"hard link from outside": func(fi os.FileInfo) {
			if err := os.Link(f, outside); err != nil {
				t.Fatal(err)
			}
		},
		"chmod undone": func(fi os.FileInfo) {
			os.Chmod(f, 0o600)
			os.Chmod(f, 0o644)
		},
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			r := sealedBase(t, s, "c0ffee-"+strings.ReplaceAll(name, " ", "-"), 250)
			f = filepath.Join(r.Target, rel)
			fi, err := os.Lstat(f)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // past the seal, on the kernel's coarse clock
			outside = filepath.Join(t.TempDir(), "elsewhere")
			change(fi)
			err = Verify(r)
			var ce *ChangedError
			if !errors.As(err, &ce) || failure.KindOf(err) != failure.Refused {
				t.Fatalf("not refused: %v", err)
			}
			if !strings.Contains(err.Error(), rel) || !strings.Contains(failure.HintOf(err), "ferry base --rebuild --rev c0ffee") {
				t.Errorf("the refusal names neither %s nor the fix: %v (hint %q)", rel, err, failure.HintOf(err))
			}
		})
	}
	// An added hard link inside the target is a new entry.
	r2 := sealedBase(t, s, "c0ffee-inside", 50)
	time.Sleep(20 * time.Millisecond) // past the seal, on the kernel's coarse clock
	if err := os.Link(filepath.Join(r2.Target, "debug", "d000", "f0001"), filepath.Join(r2.Target, "debug", "d000", "extra")); err != nil {
		t.Fatal(err)
	}
	if err := Verify(r2); err == nil || !strings.Contains(err.Error(), "debug/d000/extra") {
		t.Errorf("an added hard link is not named: %v", err)
	}
}

func dirInfo(t *testing.T, p string) os.FileInfo {
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// A link Ferry makes to a sealed base's file in a link window (a layered
// refresh, a pull, removing a base that shares it) passes the seal; the
// same link made outside one is refused; a window left open (a killed
// build) passes what follows until the owner's next window closes it.
func TestLinkWindows(t *testing.T) {
	s := testStore(t)
	r := sealedBase(t, s, "c0ffee-a", 20)
	other := filepath.Join(s.BaseDir("c0ffee-b"), "target")
	os.MkdirAll(other, 0o755)
	f := filepath.Join(r.Target, "debug", "d000", "f0003")
	time.Sleep(20 * time.Millisecond)
	if err := linking(s, "c0ffee-b", func() error { return os.Link(f, filepath.Join(other, "f")) }); err != nil {
		t.Fatal(err)
	}
	if err := Verify(r); err != nil {
		t.Fatalf("a link made in a window: %v", err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := os.Remove(filepath.Join(other, "f")); err != nil {
		t.Fatal(err)
	}
	if err := Verify(r); err == nil || !strings.Contains(err.Error(), "debug/d000/f0003") {
		t.Fatalf("an unlink outside every window passed: %v", err)
	}

	// Open, as a killed process leaves it.
	r = sealedBase(t, s, "c0ffee-c", 20)
	f = filepath.Join(r.Target, "debug", "d000", "f0003")
	time.Sleep(20 * time.Millisecond)
	if _, err := openWindow(s, "c0ffee-d"); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(s.BaseDir("c0ffee-d"), "target"), 0o755)
	if err := os.Link(f, filepath.Join(s.BaseDir("c0ffee-d"), "target", "f")); err != nil {
		t.Fatal(err)
	}
	if err := Verify(r); err != nil {
		t.Fatalf("a link made in an open window: %v", err)
	}
	if err := linking(s, "c0ffee-d", func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	os.Chmod(f, 0o644) // a change time after both windows
	if err := Verify(r); err == nil {
		t.Fatal("a chmod after the open window was closed passed")
	}
	// Compaction keeps what a ready base needs, and drops the rest once
	// none does.
	if err := CompactLinkWindows(s); err != nil {
		t.Fatal(err)
	}
	if ws, err := readWindows(s.Dir); err != nil || len(ws) != 0 {
		// No base here has a base.json: none needs a window.
		t.Errorf("after compaction with no ready base: %d windows (%v)", len(ws), err)
	}
}

// verify --full catches a content change whose listing was made to match
// (an attacker who also rewrote the listing's digest in base.json), naming
// the file, and a swapped SHA256SUMS.
func TestVerifyFullComparesContents(t *testing.T) {
	s := testStore(t)
	r := sealedBase(t, s, "c0ffee-f", 120)
	if err := VerifyFull(r); err != nil {
		t.Fatalf("untouched target: %v", err)
	}
	// sha256sum reads the file as written.
	if _, err := exec.LookPath("sha256sum"); err == nil {
		c := exec.Command("sha256sum", "--quiet", "--strict", "-c", "SHA256SUMS")
		c.Dir = r.Dir
		if out, err := c.CombinedOutput(); err != nil {
			t.Errorf("sha256sum -c SHA256SUMS: %v\n%s", err, out)
		}
	}
	rel := "debug/d000/f0042"
	fi := dirInfo(t, filepath.Join(r.Target, rel))
	if err := os.WriteFile(filepath.Join(r.Target, rel), []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	putBack(t, filepath.Join(r.Target, rel), fi)
	// The listing forged: its digest and time taken after the write.
	forged, err := Seal(r.Target)
	if err != nil {
		t.Fatal(err)
	}
	forged.Contents = r.TargetSeal.Contents
	r.TargetSeal = forged
	if err := Verify(r); err != nil {
		t.Fatalf("the forged listing does not pass the listing's check, so this test tries nothing: %v", err)
	}
	err = VerifyFull(r)
	if failure.KindOf(err) != failure.Refused || !strings.Contains(err.Error(), rel) || !strings.Contains(err.Error(), "bytes differ") {
		t.Fatalf("verify --full: %v", err)
	}
	// A SHA256SUMS swapped for one that matches is not base.json's.
	files := store.BaseFiles(r.Dir)
	sum, _ := hashFile(unix.AT_FDCWD, filepath.Join(r.Target, rel), make([]byte, 4096))
	b, _ := os.ReadFile(files.Contents)
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if strings.HasSuffix(l, "  target/"+rel) {
			lines[i] = sum + "  target/" + rel
		}
	}
	os.WriteFile(files.Contents, []byte(strings.Join(lines, "\n")), 0o644)
	if err := VerifyFull(r); failure.KindOf(err) != failure.Refused || !strings.Contains(err.Error(), "not the file base.json records") {
		t.Fatalf("a swapped SHA256SUMS: %v", err)
	}
}

// A record of an older Ferry (no seal version) is checked with the listing
// it recorded: it passes untouched and refuses a write that moves the
// mtime, but a same-size write with the mtime put back passes, which
// Covers tells (ferry base verify says so).
func TestOldSealStillVerifies(t *testing.T) {
	s := testStore(t)
	r := sealedBase(t, s, "c0ffee-old", 50)
	old, _, err := listing(r.Target, 0, time.Time{}, time.Time{}, false)
	if err != nil {
		t.Fatal(err)
	}
	r.TargetSeal = old
	if r.TargetSeal.Covers() {
		t.Fatal("an old seal claims to cover restored timestamps")
	}
	if err := Verify(r); err != nil {
		t.Fatalf("an untouched base with an old seal: %v", err)
	}
	if err := VerifyFull(r); !errors.Is(err, ErrNoContents) {
		t.Fatalf("verify --full of an old seal: %v, want ErrNoContents", err)
	}
	f := filepath.Join(r.Target, "debug", "d000", "f0007")
	fi, _ := os.Lstat(f)
	os.WriteFile(f, []byte("y"), 0o644)
	putBack(t, f, fi)
	if err := Verify(r); err != nil {
		t.Fatalf("the old listing is stronger than documented: %v", err)
	}
	// The old listing names a write by its mtime, after the record's
	// Created: past it on the kernel's coarse clock, which can lag a tick.
	time.Sleep(20 * time.Millisecond)
	os.WriteFile(f, []byte("z"), 0o644)
	if err := Verify(r); err == nil || !strings.Contains(err.Error(), "debug/d000/f0007") {
		t.Fatalf("an old seal misses a write: %v", err)
	}
}

// A refresh takes its seed's digest for the seed's own inodes (a layered
// refresh's links) and for clones untouched since the clone, and hashes
// the rest: here the seed's recorded digest of a linked file is made wrong
// on purpose, and only the linked file carries it on.
func TestSealReusesSeedDigests(t *testing.T) {
	s := testStore(t)
	seed := sealedBase(t, s, "c0ffee-seed", 30)
	// The seed's record of f0001 made wrong, SHA256SUMS and its digest
	// in the seal both: what takes it took the record, not the bytes.
	files := store.BaseFiles(seed.Dir)
	b, _ := os.ReadFile(files.Contents)
	bogus := strings.Repeat("0", 64)
	var lines []string
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if strings.HasSuffix(l, "/f0001") || strings.HasSuffix(l, "/f0002") || strings.HasSuffix(l, "/f0003") {
			l = bogus + l[64:]
		}
		lines = append(lines, l)
	}
	nb := []byte(strings.Join(lines, "\n") + "\n")
	os.WriteFile(files.Contents, nb, 0o644)
	seed.TargetSeal.Contents = sumHex(nb)

	next := s.Base("c0ffee-next")
	d := filepath.Join(next.Target, "debug", "d000")
	os.MkdirAll(d, 0o755)
	from := filepath.Join(seed.Target, "debug", "d000")
	// f0001 linked; f0002 a copy with the seed's mtime, made before the
	// clone ended; f0003 a copy with the seed's mtime made after it.
	if err := os.Link(filepath.Join(from, "f0001"), filepath.Join(d, "f0001")); err != nil {
		t.Fatal(err)
	}
	copyFile := func(name string) {
		fi, _ := os.Lstat(filepath.Join(from, name))
		os.WriteFile(filepath.Join(d, name), []byte("x"), 0o644)
		os.Chtimes(filepath.Join(d, name), fi.ModTime(), fi.ModTime())
	}
	copyFile("f0002")
	time.Sleep(2 * cloneMargin)
	cloned := time.Now()
	time.Sleep(20 * time.Millisecond)
	copyFile("f0003")
	took := func(reuse *Reuse) map[string]bool {
		seal, err := SealBase(next.Dir, reuse)
		if err != nil {
			t.Fatal(err)
		}
		got, err := readSums(next.Contents, seal.Contents)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, name := range []string{"f0001", "f0002", "f0003"} {
			out[name] = got["target/debug/d000/"+name] == bogus
		}
		return out
	}
	for what, c := range map[string]struct {
		reuse *Reuse
		want  map[string]bool
	}{
		"layered": {&Reuse{Seed: seed}, map[string]bool{"f0001": true, "f0002": false, "f0003": false}},
		"cloned":  {&Reuse{Seed: seed, Cloned: cloned}, map[string]bool{"f0001": true, "f0002": true, "f0003": false}},
		"cold":    {nil, map[string]bool{"f0001": false, "f0002": false, "f0003": false}},
	} {
		got := took(c.reuse)
		for name, want := range c.want {
			if got[name] != want {
				t.Errorf("%s: %s took the seed's digest: %t, want %t", what, name, got[name], want)
			}
		}
	}
	// A write during the build into the file the refresh shares with its
	// seed, which changes its size: the file keeps the seed's digest, so
	// that verify --full names it in both bases; hashing it would seal the
	// written bytes as the refresh's own.
	f, err := os.OpenFile(filepath.Join(d, "f0001"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("written during the build\n")
	f.Close()
	if !took(&Reuse{Seed: seed})["f0001"] {
		t.Error("a shared file written during the build was hashed, not held to the seed's digest")
	}
}

func sumHex(b []byte) string {
	d := sha256.Sum256(b)
	return hex.EncodeToString(d[:])
}

// BenchmarkSeal is the listing spawn and ferry base verify make, over a
// target of the benchmark's large workspace's size.
func BenchmarkSeal(b *testing.B) {
	target := makeTarget(b, 7384)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Seal(target); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSealBase is what a cold build's seal costs over the same
// target: the listing and every file's SHA-256, written to SHA256SUMS.
func BenchmarkSealBase(b *testing.B) {
	s := testStore(b)
	sealedBase(b, s, "c0ffee-bench", 7384)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := SealBase(s.BaseDir("c0ffee-bench"), nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerify is the check before reuse and spawn of a sealed base of
// that size.
func BenchmarkVerify(b *testing.B) {
	s := testStore(b)
	r := sealedBase(b, s, "c0ffee-bench", 7384)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := Verify(r); err != nil {
			b.Fatal(err)
		}
	}
}

// hashBatches keeps each batch in one directory and within its limits, and
// hands out every file once: a deps/ of many files, or of a few large ones,
// is split, so that every core hashes some of it.
func TestHashBatches(t *testing.T) {
	var files []file
	for i := range 200 {
		files = append(files, file{rel: fmt.Sprintf("debug/deps/f%03d", i), size: 1000})
	}
	for i := range 5 {
		files = append(files, file{rel: fmt.Sprintf("debug/deps/big%d", i), size: hashBatchBytes/2 + 1})
	}
	files = append(files, file{rel: "debug/huge", size: 3 * hashBatchBytes}, file{rel: "debug/small", size: 1})
	files = append(files, file{rel: "debug/deps/late", size: 1}) // a directory's files need not come together
	batches := hashBatches(files)
	seen := make([]int, len(files))
	deps := 0
	for _, b := range batches {
		if len(b) == 0 || len(b) > hashBatchFiles {
			t.Errorf("a batch of %d files", len(b))
		}
		var bytes int64
		dir := path.Dir(files[b[0]].rel)
		for _, i := range b {
			seen[i]++
			bytes += files[i].size
			if d := path.Dir(files[i].rel); d != dir {
				t.Errorf("a batch holds files of %s and %s", dir, d)
			}
		}
		if len(b) > 1 && bytes > hashBatchBytes {
			t.Errorf("a batch of %d files holds %d bytes", len(b), bytes)
		}
		if dir == "debug/deps" {
			deps++
		}
	}
	for i, n := range seen {
		if n != 1 {
			t.Errorf("%s is in %d batches", files[i].rel, n)
		}
	}
	// 201 small files make 4 batches of at most 64; the 5 large ones, two
	// to a batch at most, 3 more.
	if deps < 7 {
		t.Errorf("deps/ went out in %d batches, want at least 7", deps)
	}
}
