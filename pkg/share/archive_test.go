package share

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

var benchBase = flag.String("share.base", "", "a ready base directory for BenchmarkCompress")

// BenchmarkCompress writes a ready base's stream at each zstd level and
// reports the compressed size per byte of stream, and the seconds a pull
// spends decompressing it (decode-s): the measurement behind Level. Run it
// on a real base:
//
//	go test ./pkg/share -run '^$' -bench Compress -benchtime 1x -args -share.base=<store>/bases/<id>
func BenchmarkCompress(b *testing.B) {
	if *benchBase == "" {
		b.Skip("skipping: give a base directory with -args -share.base=DIR")
	}
	for _, level := range []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault, zstd.SpeedBetterCompression} {
		b.Run(level.String(), func(b *testing.B) {
			for b.Loop() {
				var stream counter
				var compressed bytes.Buffer
				zw, err := zstd.NewWriter(&compressed, zstd.WithEncoderLevel(level))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := writeArchive(io.MultiWriter(zw, &stream), *benchBase, ""); err != nil {
					b.Fatal(err)
				}
				if err := zw.Close(); err != nil {
					b.Fatal(err)
				}
				size := compressed.Len()
				b.StopTimer()
				start := time.Now()
				zr, err := zstd.NewReader(&compressed)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, zr); err != nil {
					b.Fatal(err)
				}
				zr.Close()
				b.ReportMetric(time.Since(start).Seconds(), "decode-s")
				b.StartTimer()
				b.SetBytes(stream.n)
				b.ReportMetric(float64(size)/1e6, "MB")
				b.ReportMetric(float64(stream.n)/float64(size), "ratio")
			}
		})
	}
}

// TestExtractRoundTrip writes a base directory's stream and extracts it
// into a directory whose src/ holds an older checkout: every file comes
// back with its content, mode and mtime (small ones written by the pool,
// large ones inline), a hard link as a link, a symlink as a symlink,
// directories with their mtimes, and the checkout's stale file replaced.
func TestExtractRoundTrip(t *testing.T) {
	from := t.TempDir()
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 678901234, time.UTC)
	write := func(rel string, data []byte, mode fs.FileMode) {
		t.Helper()
		p := filepath.Join(from, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), (pooledFileMax+4096)/16)
	write("base.json", []byte(`{"id":"x"}`), 0o644)
	write("src/lib.rs", []byte("fn new() {}\n"), 0o644)
	var small []string
	for i := range 3 * pooledQueue {
		rel := fmt.Sprintf("target/debug/deps/f%03d.rmeta", i)
		write(rel, []byte(fmt.Sprintf("unit %d\n", i)), 0o644)
		small = append(small, rel)
	}
	write("target/debug/deps/libbig.rlib", big, 0o644)
	write("target/debug/build/x/run", []byte("#!/bin/sh\n"), 0o755)
	write("target/debug/empty", nil, 0o600)
	if err := os.Link(filepath.Join(from, "target/debug/deps/libbig.rlib"), filepath.Join(from, "target/debug/libbig.rlib")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("deps/f000.rmeta", filepath.Join(from, "target/debug/link")); err != nil {
		t.Fatal(err)
	}
	dirTime := mtime.Add(time.Hour)
	for _, d := range []string{"target/debug/deps", "target/debug", "target"} {
		if err := os.Chtimes(filepath.Join(from, d), dirTime, dirTime); err != nil {
			t.Fatal(err)
		}
	}
	var stream bytes.Buffer
	if _, err := writeArchive(&stream, from, ""); err != nil {
		t.Fatal(err)
	}

	to := t.TempDir()
	if err := os.MkdirAll(filepath.Join(to, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(to, "src/lib.rs"), []byte("fn old() {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(to)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	x, err := extract(&stream, root, "")
	if err != nil {
		t.Fatal(err)
	}
	if string(x.record) != `{"id":"x"}` {
		t.Errorf("record %q", x.record)
	}
	if _, err := os.Lstat(filepath.Join(to, "base.json")); err == nil {
		t.Error("extract wrote base.json: it is the caller's to write last")
	}
	same := func(rel string) {
		t.Helper()
		a, err := os.Lstat(filepath.Join(from, rel))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.Lstat(filepath.Join(to, rel))
		if err != nil {
			t.Fatalf("%s not extracted: %v", rel, err)
		}
		// A symlink's own mtime is not kept (nothing compares it).
		link := a.Mode()&fs.ModeSymlink != 0
		if a.Mode() != b.Mode() || !link && !a.ModTime().Equal(b.ModTime()) || a.Size() != b.Size() {
			t.Errorf("%s: extracted %v %v %d, want %v %v %d", rel, b.Mode(), b.ModTime(), b.Size(), a.Mode(), a.ModTime(), a.Size())
		}
		if a.Mode().IsRegular() {
			da, _ := os.ReadFile(filepath.Join(from, rel))
			db, _ := os.ReadFile(filepath.Join(to, rel))
			if !bytes.Equal(da, db) {
				t.Errorf("%s: content differs", rel)
			}
		}
	}
	for _, rel := range append(small, "src/lib.rs", "target/debug/deps/libbig.rlib", "target/debug/build/x/run",
		"target/debug/empty", "target/debug/libbig.rlib", "target/debug/link", "target/debug/deps", "target/debug", "target") {
		same(rel)
	}
	a, _ := os.Stat(filepath.Join(to, "target/debug/deps/libbig.rlib"))
	b, _ := os.Stat(filepath.Join(to, "target/debug/libbig.rlib"))
	if !os.SameFile(a, b) {
		t.Error("the hard link came back as a copy")
	}
	if l, err := os.Readlink(filepath.Join(to, "target/debug/link")); err != nil || l != "deps/f000.rmeta" {
		t.Errorf("symlink: %q, %v", l, err)
	}
}
