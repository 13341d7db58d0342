package tlspool

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// deadline bounds every wait of these tests.
const deadline = 10 * time.Second

// newCert returns a self-signed Ed25519 certificate, as a node identity
// makes, and its public key.
func newCert(t testing.TB) (tls.Certificate, ed25519.PublicKey) {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pub
}

// server is a running Server whose handler echoes what it reads and
// reports each connection's end on ended.
type server struct {
	srv   *Server
	stop  func() // stops Run and waits for it
	addr  string
	key   ed25519.PublicKey
	peers chan string   // the peer of each admitted connection
	ended chan struct{} // one per connection whose handler returned
}

// startServer runs a Server on 127.0.0.1 admitting the keys of admit
// (named by their value) until the test ends.
func startServer(t *testing.T, admit map[string]ed25519.PublicKey, tweak func(*ServerConfig)) *server {
	t.Helper()
	cert, key := newCert(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{addr: ln.Addr().String(), key: key, peers: make(chan string, 16), ended: make(chan struct{}, 16)}
	cfg := ServerConfig{Listener: ln, Certificate: cert,
		Admit: func(k ed25519.PublicKey, _ net.Addr) (string, error) {
			for name, want := range admit {
				if k.Equal(want) {
					return name, nil
				}
			}
			return "", errors.New("not admitted")
		},
		Handle: func(_ context.Context, peer string, c net.Conn) {
			defer func() { s.ended <- struct{}{} }()
			s.peers <- peer
			_, _ = io.Copy(c, c)
		},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := NewServer(cfg)
	s.srv = srv
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	s.stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(s.stop)
	return s
}

func newPool(t *testing.T, cert tls.Certificate, tweak func(*Config)) *Pool {
	t.Helper()
	cfg := Config{Certificate: cert}
	if tweak != nil {
		tweak(&cfg)
	}
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

func echo(t *testing.T, c *Conn, msg string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(deadline))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("echo %q: got %q, %v", msg, got, err)
	}
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(deadline):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func TestPoolReusesAnAdmittedConnection(t *testing.T) {
	cert, key := newCert(t)
	srv := startServer(t, map[string]ed25519.PublicKey{"client": key}, nil)
	p := newPool(t, cert, nil)
	c, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	if peer := recv(t, srv.peers, "the admitted peer"); peer != "client" {
		t.Errorf("server saw peer %q", peer)
	}
	if v := c.ConnectionState().Version; v != tls.VersionTLS13 {
		t.Errorf("TLS version %#x", v)
	}
	echo(t, c, "one")
	p.Put(c)
	c2, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	if c2 != c {
		t.Error("a new connection, not the idle one")
	}
	echo(t, c2, "two")
	if diff := cmp.Diff(Stats{Dials: 1, Reuses: 1, Open: 1}, p.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	_ = c2.Close()
	recv(t, srv.ended, "the handler's end")
	if got := p.Stats().Open; got != 0 {
		t.Errorf("%d open after close", got)
	}
}

func TestPoolRefusesAnotherServerKey(t *testing.T) {
	cert, key := newCert(t)
	srv := startServer(t, map[string]ed25519.PublicKey{"client": key}, nil)
	_, other := newCert(t)
	p := newPool(t, cert, nil)
	if _, err := p.Get(ctxT(t), srv.addr, other); !errors.Is(err, ErrKeyMismatch) {
		t.Fatalf("Get = %v, want ErrKeyMismatch", err)
	}
	if diff := cmp.Diff(Stats{Dials: 1, DialFailures: 1}, p.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

func TestServerRefusesAClientNotAdmitted(t *testing.T) {
	_, admittedKey := newCert(t)
	srv := startServer(t, map[string]ed25519.PublicKey{"someone": admittedKey}, nil)
	cert, _ := newCert(t)
	p := newPool(t, cert, nil)
	if _, err := p.Get(ctxT(t), srv.addr, srv.key); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("Get = %v, want ErrNotAdmitted", err)
	}
	select {
	case peer := <-srv.peers:
		t.Fatalf("handler ran for %q", peer)
	default:
	}
	if got := p.Stats().Open; got != 0 {
		t.Errorf("%d open", got)
	}
}

func TestPoolFullNeverWaits(t *testing.T) {
	cert, key := newCert(t)
	srv := startServer(t, map[string]ed25519.PublicKey{"client": key}, nil)
	p := newPool(t, cert, func(c *Config) { c.MaxConnsPerPeer, c.MaxIdlePerPeer = 2, 1 })
	a, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctxT(t), srv.addr, srv.key); !errors.Is(err, ErrPoolFull) {
		t.Fatalf("third Get = %v, want ErrPoolFull", err)
	}
	p.Put(a) // idle: the one place left
	p.Put(b) // over MaxIdlePerPeer: closed
	recv(t, srv.ended, "the end of the connection put over the idle bound")
	if diff := cmp.Diff(Stats{Dials: 2, Open: 1, Idle: 1}, p.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	c, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, c, "again")
	_ = c.Close()
}

func TestIdleConnectionExpires(t *testing.T) {
	cert, key := newCert(t)
	srv := startServer(t, map[string]ed25519.PublicKey{"client": key}, nil)
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	p := newPool(t, cert, func(c *Config) {
		c.IdleTimeout = time.Minute
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	c, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	p.Put(c)
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	c2, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	if c2 == c {
		t.Fatal("an expired connection was reused")
	}
	recv(t, srv.ended, "the expired connection's end")
	echo(t, c2, "fresh")
	if diff := cmp.Diff(Stats{Dials: 2, Expired: 1, Open: 1}, p.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

// TestHandshakeBounded: a client that sends nothing is dropped by the
// server after its handshake timeout, and a dial to a server that never
// answers fails after the pool's.
func TestHandshakeBounded(t *testing.T) {
	srv := startServer(t, nil, func(c *ServerConfig) { c.HandshakeTimeout = 100 * time.Millisecond })
	raw, err := net.Dial("tcp", srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetReadDeadline(time.Now().Add(deadline))
	var ne net.Error
	if _, err := raw.Read(make([]byte, 1)); err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("silent client: read %v, want the server to close", err)
	}

	mute, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	cert, _ := newCert(t)
	p := newPool(t, cert, func(c *Config) { c.HandshakeTimeout = 100 * time.Millisecond })
	if _, err := p.Get(ctxT(t), mute.Addr().String(), srv.key); err == nil {
		t.Fatal("Get from a mute server succeeded")
	}
}

func TestConfigsReportEveryProblem(t *testing.T) {
	_, err := NewPool(Config{MaxConnsPerPeer: -1, MaxIdlePerPeer: -1, IdleTimeout: -1})
	for _, want := range []string{"certificate", "max conns per peer", "max idle per peer", "timeouts"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewPool: %v, want it to name %q", err, want)
		}
	}
	_, err = NewServer(ServerConfig{})
	for _, want := range []string{"listener", "certificate", "admit and handle"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewServer: %v, want it to name %q", err, want)
		}
	}
}

func TestClosedPoolRefuses(t *testing.T) {
	cert, _ := newCert(t)
	p := newPool(t, cert, nil)
	p.Close()
	_, key := newCert(t)
	if _, err := p.Get(ctxT(t), "127.0.0.1:1", key); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get = %v, want ErrClosed", err)
	}
}

// TestServerStopEndsItsConnections: Run returns once its context ends,
// with the handlers of open connections returned and the client seeing
// its connection closed.
func TestServerStopEndsItsConnections(t *testing.T) {
	cert, key := newCert(t)
	srv := startServer(t, map[string]ed25519.PublicKey{"client": key}, nil)
	p := newPool(t, cert, nil)
	c, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echo(t, c, "live")
	srv.stop()
	recv(t, srv.ended, "the handler's end")
	_ = c.SetReadDeadline(time.Now().Add(deadline))
	var ne net.Error
	if _, err := c.Read(make([]byte, 1)); err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("read after the server stopped: %v, want the connection closed", err)
	}
}

// TestGetOfAnIdleConnectionAllocatesNothing: taking a known peer's idle
// connection (every request's Get) makes no string of the pinned key.
func TestGetOfAnIdleConnectionAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	cert, key := newCert(t)
	srv := startServer(t, map[string]ed25519.PublicKey{"client": key}, nil)
	p := newPool(t, cert, func(c *Config) { c.PeekAfter = time.Hour })
	c, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, c, "one")
	p.Put(c)
	ctx := ctxT(t)
	n := testing.AllocsPerRun(100, func() {
		c2, err := p.Get(ctx, srv.addr, srv.key)
		if err != nil || c2 != c {
			t.Fatalf("Get: %v, %v (want the idle one)", c2, err)
		}
		p.Put(c2)
	})
	if n != 0 {
		t.Errorf("Get and Put of an idle connection allocate %v times", n)
	}
}
