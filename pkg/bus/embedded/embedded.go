// Package embedded hosts Ferry's bus: a nats-server with JetStream running
// inside the hosting process (ferry-watch), for a build host or a laptop
// that has no NATS deployment.
//
// What it promises: the server listens on 127.0.0.1 only, on a random port;
// the bus directory is created 0700, and one that anybody but the caller
// (and root) could change, or that lies on such a path, is refused before
// anything is written to it (store.CheckOwned), since clients trust the
// bus.json and token found there; clients must present the token from
// <bus dir>/token (created 0600 on first start, refused if someone else owns
// it or others may read it: bus.ReadToken); messages are fsynced before they
// are acknowledged (SyncAlways), since an acknowledged event is one the
// outbox no longer keeps; the server never installs signal handlers (the
// host process owns its signals) and logs nowhere unless asked. One host per
// bus directory: bus.lock is held (flock) for the host's lifetime and names
// its pid, and bus.json (url, pid, started) is written atomically under it
// and removed on Shutdown. bus.lock is a leaf outside pkg/lock's order:
// only a host takes it, with a try-lock, so nobody ever waits on it. A host
// killed with SIGKILL leaves a stale bus.json behind; clients then fail to
// connect within their bound and queue to the outbox, and the next host
// overwrites it.
//
// The server lives in its own package so that one-shot commands, which only
// publish, link the NATS client and not the server.
package embedded

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/lock"
	"github.com/ferrydev/ferry/pkg/store"
)

// Options configure a host.
type Options struct {
	// Dir is the bus directory, bus.Dir(store parent): token, bus.json,
	// bus.lock and the JetStream file store (jetstream/) live there.
	Dir string
	// Log receives the server's log; nil discards it.
	Log io.Writer
	// Debug adds the server's debug lines to Log.
	Debug bool
	// ReadyTimeout bounds the wait for the server to accept connections;
	// 0 means 10 s.
	ReadyTimeout time.Duration
	// Offline opens the bus directory's stored streams for this process
	// alone, to read the event log while no host runs: the server listens
	// on no port and bus.json is not written (clients use ClientConfig).
	// It takes bus.lock like a host, so it never opens a store a running
	// host is writing.
	Offline bool
	// MonitorPort, when not 0, serves NATS monitoring (/varz, /jsz,
	// /connz, ...) on 127.0.0.1 at that port, for the nats CLI,
	// nats-surveyor and the NATS Prometheus exporter. It asks for no
	// token: it shows the server's state and its clients' names and
	// addresses, never a message, which is why it stays on loopback. An
	// offline host serves none.
	MonitorPort int
}

// Host is a running embedded bus.
type Host struct {
	srv   *server.Server
	lock  *lock.Lock
	dir   string
	token string
	info  bus.Info

	offline  bool // wrote no bus.json
	stopOnce sync.Once
}

// Start starts the server, creates Ferry's streams (R1), and writes
// bus.json. A second host on the same directory is refused (failure.Refused)
// naming the holder's pid.
func Start(o Options) (_ *Host, err error) {
	if o.Dir == "" {
		return nil, errors.New("start the bus: no directory")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	// Check, create, check again: a directory someone else made in between
	// is refused too.
	if err := store.CheckOwned(store.RoleBus, dir); err != nil {
		return nil, err
	}
	if err := store.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, failure.Wrap(failure.Prereq, err, "check that the store parent is writable, or choose another with FERRY_HOME", "create the bus directory")
	}
	if err := store.MkdirAll(dir, 0o700); err != nil {
		return nil, failure.Wrap(failure.Prereq, err, "check that the store parent is writable, or choose another with FERRY_HOME", "create the bus directory")
	}
	if err := store.CheckOwned(store.RoleBus, dir); err != nil {
		return nil, err
	}
	lockPath := store.BusFiles(dir).Lock
	l, err := lock.TryTake(lockPath)
	if errors.Is(err, lock.ErrBusy) {
		pid := lock.Owner(lockPath)
		return nil, failure.New(failure.Refused,
			fmt.Sprintf("stop the other host (pid %d), or give this one another store parent with FERRY_HOME", pid),
			"the bus in %s is already hosted by pid %d", dir, pid)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			l.Release()
		}
	}()
	if err := l.WriteOwner(); err != nil {
		return nil, fmt.Errorf("start the bus: record owner: %w", err)
	}
	token, err := loadToken(store.BusFiles(dir).Token)
	if err != nil {
		return nil, err
	}

	logger := &captureLog{w: o.Log}
	opts := &server.Options{
		ServerName:         "ferry-bus",
		Host:               "127.0.0.1",
		Port:               server.RANDOM_PORT,
		Authorization:      token,
		NoSigs:             true,
		NoLog:              o.Log == nil,
		Debug:              o.Debug,
		JetStream:          true,
		StoreDir:           store.BusFiles(dir).JetStream,
		SyncAlways:         true,
		JetStreamMaxMemory: 64 << 20, // Ferry's streams are file-backed
		MaxPayload:         1 << 20,
		DontListen:         o.Offline,
	}
	if o.MonitorPort != 0 && !o.Offline {
		opts.HTTPHost, opts.HTTPPort = "127.0.0.1", o.MonitorPort
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("start the bus: %w", err)
	}
	// Always install a logger: it keeps the last error even when nothing is
	// printed, so a failed start can say why.
	srv.SetLoggerV2(logger, o.Debug, false, false)
	srv.Start()
	wait := o.ReadyTimeout
	if wait <= 0 {
		wait = 10 * time.Second
	}
	if !srv.ReadyForConnections(wait) || !srv.JetStreamEnabled() {
		srv.Shutdown()
		srv.WaitForShutdown()
		why := logger.lastError()
		if why == "" {
			why = fmt.Sprintf("not ready within %v", wait)
		}
		return nil, failure.New(failure.Prereq, "see the server log with ferry-watch --log, and check "+opts.StoreDir,
			"start the bus in %s: %s", dir, why)
	}
	h := &Host{srv: srv, lock: l, dir: dir, token: token}
	defer func() {
		if err != nil {
			h.stopServer()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, err := bus.Dial(ctx, h.ClientConfig("ferry-bus-setup"))
	if err != nil {
		return nil, err
	}
	err = c.EnsureStreams(ctx)
	c.Close()
	if err != nil {
		return nil, err
	}

	h.info = bus.Info{URL: srv.ClientURL(), PID: os.Getpid(), Started: time.Now().UTC()}
	if o.Offline {
		h.offline = true
		return h, nil
	}
	if err := atomicfile.WriteJSON(store.BusFiles(dir).Info, h.info, 0o644); err != nil {
		return nil, err
	}
	return h, nil
}

// loadToken reads the token file (bus.ReadToken, which refuses one others
// could read or wrote), creating it with a fresh random token if it is
// missing.
func loadToken(path string) (string, error) {
	_, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		tok := hex.EncodeToString(b[:])
		if err := atomicfile.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			return "", err
		}
		return tok, nil
	}
	if err != nil {
		return "", err
	}
	tok, err := bus.ReadToken(path)
	if err != nil {
		return "", err
	}
	if tok == "" {
		return "", failure.New(failure.Refused, "delete it to make a new one", "the bus token %s is empty", path)
	}
	return tok, nil
}

// URL is the client URL, nats://127.0.0.1:<port>.
func (h *Host) URL() string { return h.info.URL }

// Info is what bus.json says.
func (h *Host) Info() bus.Info { return h.info }

// Dir is the bus directory.
func (h *Host) Dir() string { return h.dir }

// MonitorURL is the NATS monitoring endpoint's base URL,
// http://127.0.0.1:<port>, or "" when the host serves none.
func (h *Host) MonitorURL() string {
	if a := h.srv.MonitorAddr(); a != nil {
		return "http://" + a.String()
	}
	return ""
}

// Token is the client token.
func (h *Host) Token() string { return h.token }

// Server is the running server, e.g. for nats.InProcessServer.
func (h *Host) Server() *server.Server { return h.srv }

// ClientConfig is a bus.Config for a client in this process: it connects
// in-process (nats.InProcessServer), with the token, and its outboxes are
// those of the store parent the bus directory lies in.
func (h *Host) ClientConfig(name string) bus.Config {
	return bus.Config{
		Parent:    filepath.Dir(h.dir),
		InProcess: h.srv,
		Token:     h.token,
		Name:      name,
	}
}

// Shutdown removes bus.json (so no new client tries this server), stops the
// server, waits for it, and releases the lock. Safe to call more than once.
func (h *Host) Shutdown() error {
	var err error
	h.stopOnce.Do(func() {
		// An offline host wrote no bus.json; one found then is a dead
		// host's, which the next host replaces.
		if !h.offline {
			if rerr := os.Remove(store.BusFiles(h.dir).Info); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = rerr
			}
		}
		h.stopServer()
	})
	return err
}

func (h *Host) stopServer() {
	h.srv.Shutdown()
	h.srv.WaitForShutdown()
	h.lock.Release()
}

// captureLog is the server's logger: it writes to w (if any) and keeps the
// last error or fatal message.
type captureLog struct {
	w    io.Writer
	mu   sync.Mutex
	last string
}

func (l *captureLog) logf(level, format string, v []any, keep bool) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	defer l.mu.Unlock()
	if keep {
		l.last = msg
	}
	if l.w != nil {
		fmt.Fprintf(l.w, "nats-server: %s %s\n", level, msg)
	}
}

func (l *captureLog) lastError() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

func (l *captureLog) Noticef(format string, v ...any) { l.logf("[INF]", format, v, false) }
func (l *captureLog) Warnf(format string, v ...any)   { l.logf("[WRN]", format, v, false) }
func (l *captureLog) Fatalf(format string, v ...any)  { l.logf("[FTL]", format, v, true) }
func (l *captureLog) Errorf(format string, v ...any)  { l.logf("[ERR]", format, v, true) }
func (l *captureLog) Debugf(format string, v ...any)  { l.logf("[DBG]", format, v, false) }
func (l *captureLog) Tracef(format string, v ...any)  { l.logf("[TRC]", format, v, false) }
