package share_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/share"
)

// sharing runs deploy/nats/sharing.conf on loopback (a random port, a
// temporary store, monitoring off) with a certificate of a CA made for the
// test, and returns the publisher's and the runner's URLs and the CA file
// clients trust through SSL_CERT_FILE.
type sharing struct {
	publisher, runner, anonymous, ca string
}

func startSharing(t *testing.T) sharing {
	t.Helper()
	dir := t.TempDir()
	ca, cert, key := certificates(t, dir)
	t.Setenv("SHARING_TLS_CERT", cert)
	t.Setenv("SHARING_TLS_KEY", key)
	t.Setenv("PUBLISHER_PASSWORD", "publisher-secret")
	t.Setenv("RUNNER_PASSWORD", "runner-secret")
	opts, err := server.ProcessConfigFile(filepath.Join("..", "..", "deploy", "nats", "sharing.conf"))
	if err != nil {
		t.Fatalf("deploy/nats/sharing.conf: %v", err)
	}
	if opts.TLSConfig == nil || len(opts.Users) != 2 {
		t.Fatalf("deploy/nats/sharing.conf: want TLS and two users, got TLS %v, %d users", opts.TLSConfig != nil, len(opts.Users))
	}
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.StoreDir = filepath.Join(dir, "jetstream")
	opts.NoSigs, opts.NoLog = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("the sharing server did not start")
	}
	addr := srv.Addr().String()
	return sharing{
		publisher: "tls://publisher:publisher-secret@" + addr,
		runner:    "tls://runner:runner-secret@" + addr,
		anonymous: "tls://" + addr,
		ca:        ca,
	}
}

// certificates writes a CA and a certificate for 127.0.0.1 it signed.
func certificates(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ferry test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}

// A pull needs a bus that authenticates its clients: on a server that
// lets anyone in, anyone could have published the base it would run.
func TestPullRefusesABusWithoutAuthentication(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server did not start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := bus.Dial(ctx, bus.Config{URL: srv.ClientURL(), Bound: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = share.Authenticated(conn)
	if failure.KindOf(err) != failure.Refused || !strings.Contains(fmt.Sprint(err), "does not require authentication") {
		t.Fatalf("pull on a bus without authentication: %v", err)
	}
	_, err = share.Pull(ctx, conn, share.PullOptions{})
	if failure.KindOf(err) != failure.Refused {
		t.Fatalf("share.Pull on a bus without authentication: %v", err)
	}
}
