package mux

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// testDeadline bounds every wait in these tests; reaching it is a failure.
const testDeadline = 10 * time.Second

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// testTLSConfig returns a TLS 1.3 config with a throwaway ed25519
// certificate, for both ends (the client does not verify it: the tests
// are about what runs over the connection).
func testTLSConfig(t testing.TB) *tls.Config {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: priv}},
		InsecureSkipVerify: true,
	}
}

// tlsPair returns both ends of a loopback TLS 1.3 connection, handshaken.
func tlsPair(t testing.TB, cfg *tls.Config) (client, server *tls.Conn) {
	t.Helper()
	c, s := tcpPair(t)
	client, server = tls.Client(c, cfg), tls.Server(s, cfg)
	errs := make(chan error, 1)
	go func() { errs <- server.Handshake() }()
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	return client, server
}

// sessionPair returns a client and a server session over conns, closed at
// the end of the test.
func sessionPair(t testing.TB, c, s net.Conn, cfg Config) (client, server *Session) {
	t.Helper()
	client, err := Client(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	server, err = Server(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// group runs goroutines and waits for them at the end of the test.
type group struct{ wg sync.WaitGroup }

func (g *group) Go(f func()) {
	g.wg.Add(1)
	go func() { defer g.wg.Done(); f() }()
}

// newGroup returns a group waited for at the end of the test, once the
// sessions given are closed (which ends their goroutines' calls).
func newGroup(t testing.TB, sessions ...*Session) *group {
	g := &group{}
	t.Cleanup(func() {
		for _, s := range sessions {
			s.Close()
		}
		g.wg.Wait()
	})
	return g
}

// countingConn counts the bytes written through it, and can be told to
// fail writes.
type countingConn struct {
	net.Conn
	written   atomic.Int64
	writes    atomic.Int64 // Write calls
	failWrite atomic.Bool
}

func (c *countingConn) Write(p []byte) (int, error) {
	if c.failWrite.Load() {
		return 0, errTestWrite
	}
	c.writes.Add(1)
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

var errTestWrite = &net.OpError{Op: "write", Err: net.UnknownNetworkError("test write failure")}

// waitUntil polls cond until it holds or testDeadline passes (for states
// with no channel to wait on, such as a writer parked at its window).
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(testDeadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
