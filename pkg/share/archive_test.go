package share

import (
	"crypto/sha256"
	"flag"
	"io"
	"testing"

	"github.com/klauspost/compress/zstd"
)

var benchBase = flag.String("share.base", "", "a ready base directory for BenchmarkCompress")

// BenchmarkCompress writes a ready base's stream at each zstd level and
// reports the compressed size per byte of stream: the measurement behind
// Level. Run it on a real base:
//
//	go test ./pkg/share -run '^$' -bench Compress -benchtime 1x -args -share.base=<store>/bases/<id>
func BenchmarkCompress(b *testing.B) {
	if *benchBase == "" {
		b.Skip("skipping: give a base directory with -args -share.base=DIR")
	}
	for _, level := range []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault, zstd.SpeedBetterCompression} {
		b.Run(level.String(), func(b *testing.B) {
			for b.Loop() {
				var stream, compressed counter
				zw, err := zstd.NewWriter(&compressed, zstd.WithEncoderLevel(level))
				if err != nil {
					b.Fatal(err)
				}
				if err := writeArchive(io.MultiWriter(zw, sha256.New(), &stream), *benchBase); err != nil {
					b.Fatal(err)
				}
				if err := zw.Close(); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(stream.n)
				b.ReportMetric(float64(compressed.n)/1e6, "MB")
				b.ReportMetric(float64(stream.n)/float64(compressed.n), "ratio")
			}
		})
	}
}
