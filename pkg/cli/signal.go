package cli

import (
	"context"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/ferrydev/ferry/pkg/failure"
)

// Stop is how a long-running command learns it should stop: its context
// ends on SIGINT (Ctrl-C) or SIGTERM. A command stopped by SIGINT exits
// 130, "interrupted" in the exit-code table, whatever it was doing; one
// stopped by SIGTERM, the way a service manager stops it, exits 0 after a
// clean stop.
type Stop struct {
	ctx         context.Context
	cancel      context.CancelFunc
	interrupted atomic.Bool
}

// StopOnSignals starts watching for SIGINT and SIGTERM. Call Release when
// the command ends.
func StopOnSignals() *Stop {
	s := &Stop{}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig, ok := <-ch
		if !ok {
			return
		}
		if sig == os.Interrupt {
			s.interrupted.Store(true)
		}
		signal.Stop(ch)
		s.cancel()
	}()
	context.AfterFunc(s.ctx, func() { signal.Stop(ch) })
	return s
}

// Context ends when a signal asks the command to stop.
func (s *Stop) Context() context.Context { return s.ctx }

// Release stops watching for signals.
func (s *Stop) Release() { s.cancel() }

// Err is what a command that stopped returns: a failure.Interrupted error
// after SIGINT (exit 130), err otherwise.
func (s *Stop) Err(what string, err error) error {
	if s.interrupted.Load() {
		return failure.Wrap(failure.Interrupted, context.Canceled, "", "%s interrupted", what)
	}
	return err
}
