// Package bus connects Ferry's stages to the NATS JetStream bus that carries
// their events, and promises that an event whose state change is durable is
// never lost.
//
// Finding the bus: an explicit URL (Config.URL, normally the url key of
// ferry.toml's bus table or FERRY_NATS_URL, as resolved by pkg/config) names an external server or
// cluster that nobody in Ferry hosts; without one, FERRY_NATS_URL is read
// here too; otherwise <store parent>/bus/bus.json, written by the process
// hosting the embedded server (package embedded, run by ferry-watch), gives
// the URL and <store parent>/bus/token the token. Both are read only from a
// bus directory that nobody but the caller (and root) could have changed,
// by the rule of store.CheckOwned, and the token only from a file the caller
// owns that nobody else may read (ReadToken): a bus.json another user wrote
// would send the caller's events, and the caller's token, to their server.
//
// Not losing events: a one-shot command calls Emit, which connects within a
// short bound (300 ms by default) and publishes with the event's id as
// Nats-Msg-Id, waiting for JetStream's acknowledgement. When the bus cannot
// be reached or does not acknowledge, Emit writes the event to
// <store parent>/<repo key>/outbox/<id>.json and reports success: the state
// change is already durable and the event will follow. Whoever connects next
// forwards the outbox (Flush) with the same Nats-Msg-Id, so JetStream drops
// any copy it already holds, and deletes each file only after its
// acknowledgement. Consumers reconcile from the store on start anyway.
//
// Streams (see Streams): FERRY_COMMITS keeps the newest commit.seen per
// repository; FERRY_EVENTS keeps base.*, agent.* and gc.* events within
// limits. Consumers are durable, one per service (Conn.Consumer).
//
// This package imports the NATS client but not the server; the hot binaries
// (ferry-shim, ferry-rustc) import neither (a test checks it).
package bus

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/store"
)

// The bus directory, <store parent>/bus, holds bus.json (Info, written by
// the host, 0644), the client token (0600), bus.lock (held by the host for
// its lifetime; it records its pid) and the server's jetstream/ store:
// store.BusFiles names them.

// Defaults.
const (
	// DefaultBound bounds how long a connection attempt may take in total.
	// Loopback connects in well under a millisecond; the bound only matters
	// when something is wrong, and a one-shot command must not hang then.
	DefaultBound = 300 * time.Millisecond
	// DefaultAckTimeout bounds the wait for one publish acknowledgement.
	// With SyncAlways the server fsyncs before it acknowledges.
	DefaultAckTimeout = time.Second
)

// ErrNoBus reports that no bus is configured or hosted.
var ErrNoBus = errors.New("no bus is running")

// Dir is the bus directory under the store parent (store.BusDir).
func Dir(parent string) string { return store.BusDir(parent) }

// Info is bus.json: where the embedded bus listens and who hosts it.
type Info struct {
	URL     string    `json:"url"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
}

// ReadInfo reads bus.json from the bus directory dir. A missing file is an
// error wrapping fs.ErrNotExist.
func ReadInfo(dir string) (*Info, error) {
	data, err := os.ReadFile(store.BusFiles(dir).Info)
	if err != nil {
		return nil, err
	}
	var in Info
	if err := json.Unmarshal(data, &in); err != nil || in.URL == "" {
		if err == nil {
			err = errors.New("no url")
		}
		return nil, fmt.Errorf("read %s: %w", store.BusFiles(dir).Info, err)
	}
	return &in, nil
}

// Config says how to reach the bus and where outboxes live.
type Config struct {
	// Parent is the store parent: the bus directory is Dir(Parent) and the
	// outbox of repository key k is <Parent>/<k>/outbox.
	Parent string
	// URL names an external server or cluster (comma-separated URLs); it
	// wins over FERRY_NATS_URL and bus.json. Credentials may be in the URL.
	URL string
	// Token authenticates with URL or InProcess. With bus.json the token is
	// read from the token file beside it.
	Token string
	// InProcess connects to a server in this process (nats.InProcessServer)
	// instead of over TCP; it wins over everything else.
	InProcess nats.InProcessConnProvider
	// Name identifies the client to the server (e.g. "ferry-spawn").
	Name string
	// Bound bounds a connection attempt; 0 means DefaultBound.
	Bound time.Duration
	// AckTimeout bounds the wait for a publish acknowledgement; 0 means
	// DefaultAckTimeout.
	AckTimeout time.Duration
	// Replicas is the replica count for streams this client creates: 1 for
	// a single server, 3 for a three-node cluster. 0 creates R1 streams and
	// keeps the replica count of existing ones.
	Replicas int
}

func (c Config) bound() time.Duration {
	if c.Bound > 0 {
		return c.Bound
	}
	return DefaultBound
}

func (c Config) ackTimeout() time.Duration {
	if c.AckTimeout > 0 {
		return c.AckTimeout
	}
	return DefaultAckTimeout
}

// Endpoint is a discovered bus.
type Endpoint struct {
	URL    string
	Token  string
	Source string // "in-process", "config", "env" or the path of bus.json
	// busDir is set for a hosted bus: reconnects re-read bus.json there,
	// since a restarted host listens on a new random port.
	busDir string
}

// Discover finds the bus cfg describes, without connecting. With no explicit
// URL, no FERRY_NATS_URL and no bus.json it returns an error wrapping ErrNoBus.
// A bus directory or token others could have changed is refused
// (failure.Refused, wrapping a *store.OwnerError for the directory).
func Discover(cfg Config) (Endpoint, error) {
	switch {
	case cfg.InProcess != nil:
		return Endpoint{Token: cfg.Token, Source: "in-process"}, nil
	case cfg.URL != "":
		return Endpoint{URL: cfg.URL, Token: cfg.Token, Source: "config"}, nil
	}
	dir := Dir(cfg.Parent)
	if err := store.CheckOwned(store.RoleBus, dir); err != nil {
		return Endpoint{}, err
	}
	in, err := ReadInfo(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return Endpoint{}, failure.Wrap(failure.Prereq, ErrNoBus,
			"start the pipeline with `ferry up` (or ferry-watch), or point FERRY_NATS_URL or [bus] url at a NATS server",
			"no %s", store.BusFiles(dir).Info)
	}
	if err != nil {
		return Endpoint{}, err
	}
	tok, err := readToken(dir)
	if err != nil {
		return Endpoint{}, err
	}
	return Endpoint{URL: in.URL, Token: tok, Source: store.BusFiles(dir).Info, busDir: dir}, nil
}

func readToken(dir string) (string, error) {
	tok, err := ReadToken(store.BusFiles(dir).Token)
	if err != nil && failure.KindOf(err) != failure.Refused {
		return "", failure.Wrap(failure.Prereq, err,
			"the bus token is readable only by the user who hosts the bus; run Ferry as that user",
			"read the bus token")
	}
	return tok, err
}

// ReadToken reads the token file at path. It refuses (failure.Refused) a
// file that is a symlink, is not a regular file, is owned by someone other
// than the caller or may be read by group or others: anyone holding the
// token can publish events that make Ferry build and delete, and a token
// someone else wrote is one they know.
func ReadToken(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ELOOP) {
		return "", failure.New(failure.Refused, tokenRemedy(path), "the bus token %s is a symlink", path)
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular() || st == nil:
		return "", failure.New(failure.Refused, tokenRemedy(path), "the bus token %s is not a regular file", path)
	case int(st.Uid) != os.Geteuid():
		return "", failure.New(failure.Refused, tokenRemedy(path),
			"the bus token %s is owned by %s, and Ferry runs as %s", path, store.DescribeUser(int(st.Uid)), store.DescribeUser(os.Geteuid()))
	case fi.Mode().Perm()&0o077 != 0:
		return "", failure.New(failure.Refused,
			fmt.Sprintf("run `chmod 600 %s` if nobody else could have read it, or delete it and restart ferry-watch to make a new one", path),
			"the bus token %s is readable by others (mode %04o)", path, fi.Mode().Perm())
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func tokenRemedy(path string) string {
	return fmt.Sprintf("someone else may know this token: stop the bus, delete %s, and restart ferry-watch (it makes a new one)", path)
}

// Conn is a connection to the bus with JetStream.
type Conn struct {
	NC  *nats.Conn
	JS  jetstream.JetStream
	cfg Config
	ep  Endpoint

	ensureMu sync.Mutex // serializes EnsureStreams after a missing stream
}

// Endpoint returns where c is connected.
func (c *Conn) Endpoint() Endpoint { return c.ep }

// Config returns the configuration c was dialled with.
func (c *Conn) Config() Config { return c.cfg }

// Close closes the connection. Publishes have already been acknowledged.
func (c *Conn) Close() {
	if c != nil && c.NC != nil {
		c.NC.Close()
	}
}

// Dial connects once, within cfg's bound. The connection does not reconnect;
// long-running processes use DialWait.
func Dial(ctx context.Context, cfg Config) (*Conn, error) {
	ep, err := Discover(cfg)
	if err != nil {
		return nil, err
	}
	return dial(ctx, cfg, ep, false)
}

// DialWait connects for a long-running process: it retries with exponential
// backoff (up to 2 s apart) until the bus can be reached or ctx ends, then
// flushes every outbox under the store parent. The connection reconnects
// forever (re-reading bus.json, since a restarted host has a new port) and
// flushes the outboxes again after each reconnect; a failed flush there is
// reported to onFlushErr, which may be nil.
func DialWait(ctx context.Context, cfg Config, onFlushErr func(error)) (*Conn, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxInterval = 2 * time.Second
	b.MaxElapsedTime = 0
	var c *Conn
	err := backoff.Retry(func() error {
		ep, err := Discover(cfg)
		if err != nil && failure.KindOf(err) == failure.Refused {
			return backoff.Permanent(err) // nor does a bus directory others can change
		}
		if err != nil {
			return err
		}
		c, err = dial(ctx, cfg, ep, true)
		if err != nil && failure.KindOf(err) == failure.Refused {
			return backoff.Permanent(err) // a wrong token does not fix itself
		}
		return err
	}, backoff.WithContext(b, ctx))
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("wait for the bus: %w (last: %v)", ctx.Err(), err)
		}
		return nil, err
	}
	if _, err := c.Flush(ctx); err != nil && onFlushErr != nil {
		onFlushErr(err)
	}
	c.NC.SetReconnectHandler(func(*nats.Conn) {
		go func() {
			fctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := c.Flush(fctx); err != nil && onFlushErr != nil {
				onFlushErr(err)
			}
		}()
	})
	return c, nil
}

// busFileDialer dials the address bus.json names at the time of the dial,
// whatever address the client asks for: the embedded host takes a random
// port, so after a restart the old address is dead.
type busFileDialer struct {
	dir     string
	timeout time.Duration
}

func (d busFileDialer) Dial(network, address string) (net.Conn, error) {
	if in, err := ReadInfo(d.dir); err == nil {
		if u, err := url.Parse(in.URL); err == nil && u.Host != "" {
			address = u.Host
		}
	}
	return net.DialTimeout(network, address, d.timeout)
}

func dial(ctx context.Context, cfg Config, ep Endpoint, persistent bool) (*Conn, error) {
	bound := cfg.bound()
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.Timeout(bound),
		nats.NoCallbacksAfterClientClose(),
	}
	if ep.Token != "" {
		opts = append(opts, nats.Token(ep.Token))
	}
	if ep.busDir != "" {
		opts = append(opts, nats.SetCustomDialer(busFileDialer{dir: ep.busDir, timeout: bound}), nats.IgnoreDiscoveredServers())
	}
	if cfg.InProcess != nil {
		opts = append(opts, nats.InProcessServer(cfg.InProcess))
	}
	if persistent {
		opts = append(opts, nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	} else {
		opts = append(opts, nats.NoReconnect())
	}

	// nats.Connect has no context and tries each URL of a cluster with the
	// timeout in turn; run it aside so the bound is the bound in total.
	type result struct {
		nc  *nats.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(ep.URL, opts...)
		ch <- result{nc, err}
	}()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	var r result
	select {
	case r = <-ch:
	case <-timer.C:
		r.err = fmt.Errorf("no answer within %v", bound)
	case <-ctx.Done():
		r.err = ctx.Err()
	}
	if r.nc == nil && r.err == nil {
		r.err = errors.New("no connection")
	}
	if r.err != nil {
		go func() { // a late connection is closed, not leaked
			if late := <-ch; late.nc != nil {
				late.nc.Close()
			}
		}()
		return nil, connectError(ep, r.err)
	}
	js, err := jetstream.New(r.nc)
	if err != nil {
		r.nc.Close()
		return nil, fmt.Errorf("bus: %w", err)
	}
	return &Conn{NC: r.nc, JS: js, cfg: cfg, ep: ep}, nil
}

func connectError(ep Endpoint, err error) error {
	where := redacted(ep.URL)
	if ep.Source == "in-process" {
		where = "the in-process server"
	}
	if errors.Is(err, nats.ErrAuthorization) || strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		hint := "check the credentials in FERRY_NATS_URL or [bus] url"
		if ep.busDir != "" {
			hint = fmt.Sprintf("the token in %s does not match the running bus; restart ferry-watch", store.BusFiles(ep.busDir).Token)
		}
		return failure.Wrap(failure.Refused, err, hint, "connect to the bus at %s (from %s)", where, ep.Source)
	}
	var unknownCA x509.UnknownAuthorityError
	if errors.As(err, &unknownCA) || strings.Contains(err.Error(), "x509: ") {
		return failure.Wrap(failure.Refused, err,
			"this host does not trust the server's certificate: add its CA to the system trust store, or point SSL_CERT_FILE at the CA's PEM file",
			"connect to the bus at %s (from %s)", where, ep.Source)
	}
	hint := "is the bus up? `ferry up` (or ferry-watch) hosts it"
	if ep.busDir == "" && ep.Source != "in-process" {
		hint = "check that the NATS server named by FERRY_NATS_URL or [bus] url is up"
	}
	return failure.Wrap(failure.Prereq, err, hint, "connect to the bus at %s (from %s)", where, ep.Source)
}

// redacted is a comma-separated list of server URLs with their passwords
// (or tokens) replaced, for messages.
func redacted(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			continue
		}
		if _, ok := u.User.Password(); !ok {
			u.User = url.User("xxxxx") // a token
		}
		parts[i] = u.Redacted()
	}
	return strings.Join(parts, ",")
}
