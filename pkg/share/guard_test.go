package share

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// stalling hands out its data, then blocks until released.
type stalling struct {
	data    *bytes.Reader
	release chan struct{}
	closed  chan struct{}
}

func (s *stalling) Read(p []byte) (int, error) {
	if s.data.Len() > 0 {
		return s.data.Read(p)
	}
	<-s.release
	return 0, io.ErrUnexpectedEOF
}

func (s *stalling) Close() error { close(s.closed); return nil }

// A download that stops moving fails after the stall bound instead of
// waiting for the transfer's deadline; one that moves is handed on whole.
func TestGuardFailsAStalledDownload(t *testing.T) {
	s := &stalling{data: bytes.NewReader(bytes.Repeat([]byte("x"), 1000)), release: make(chan struct{}), closed: make(chan struct{})}
	r := guard(func() (io.ReadCloser, error) { return s, nil }, 200*time.Millisecond)
	start := time.Now()
	got, err := io.ReadAll(r)
	if len(got) != 1000 || err == nil || !strings.Contains(err.Error(), "nothing came from the bus") {
		t.Fatalf("stalled download: %d bytes, %v", len(got), err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the stall was noticed after %v", took)
	}
	close(s.release) // the blocked read ends (at the transfer's deadline, in a pull)
	<-s.closed       // and the goroutine closes the object

	// Opening that never answers fails the same way.
	never := make(chan struct{})
	defer close(never)
	r = guard(func() (io.ReadCloser, error) { <-never; return nil, io.ErrClosedPipe }, 200*time.Millisecond)
	if _, err := io.ReadAll(r); err == nil || !strings.Contains(err.Error(), "nothing came from the bus") {
		t.Fatalf("stalled open: %v", err)
	}

	data := bytes.Repeat([]byte("0123456789"), 100000)
	r = guard(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, time.Second)
	if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("moving download: %d of %d bytes, %v", len(got), len(data), err)
	}
}
