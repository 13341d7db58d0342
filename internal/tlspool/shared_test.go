package tlspool

import (
	"crypto/ed25519"
	"crypto/tls"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Protocols of the shared-connection tests: a connection each, and
// streams of shared connections.
const (
	testALPN    = "test/1"
	testMuxALPN = "test-mux/1"
)

func sharedServer(t *testing.T, key ed25519.PublicKey, mux bool) *server {
	return startServer(t, map[string]ed25519.PublicKey{"client": key}, func(c *ServerConfig) {
		c.ALPN = testALPN
		if mux {
			c.MuxALPN = testMuxALPN
		}
	})
}

func sharedPool(t *testing.T, cert tls.Certificate, tweak func(*Config)) *Pool {
	return newPool(t, cert, func(c *Config) {
		c.ALPN, c.MuxALPN = testALPN, testMuxALPN
		c.MaxIdlePerPeer = 16
		if tweak != nil {
			tweak(c)
		}
	})
}

// getN takes n connections to srv from p and holds them.
func getN(t *testing.T, p *Pool, srv *server, n int) []*Conn {
	t.Helper()
	var cs []*Conn
	for i := range n {
		c, err := p.Get(ctxT(t), srv.addr, srv.key)
		if err != nil {
			t.Fatalf("Get %d: %v", i, err)
		}
		cs = append(cs, c)
	}
	return cs
}

// TestExchangesPastSharedAfterShareConnections (issue 26): a peer's first
// SharedAfter exchanges in flight get a connection each; the next go as
// streams of shared connections, StreamsPerShared on one before another
// is dialed, and past SharedPerPeer on the least busy; every one carries
// its exchanges, and a stream put back is reused as a connection is,
// after the idle connections of their own.
func TestExchangesPastSharedAfterShareConnections(t *testing.T) {
	cert, key := newCert(t)
	srv := sharedServer(t, key, true)
	p := sharedPool(t, cert, func(c *Config) { c.SharedAfter, c.StreamsPerShared, c.SharedPerPeer = 2, 3, 2 })
	cs := getN(t, p, srv, 10)
	for i, c := range cs {
		if want := i >= 2; c.Shared() != want {
			t.Errorf("exchange %d shared %v, want %v", i, c.Shared(), want)
		}
	}
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { echo(t, c, "exchange "+string(rune('a'+i))) })
	}
	wg.Wait()
	if diff := cmp.Diff(Stats{Dials: 4, Open: 10, Shared: 2}, p.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	for _, c := range cs {
		p.Put(c)
	}
	if diff := cmp.Diff(Stats{Dials: 4, Open: 10, Idle: 10, Shared: 2}, p.Stats()); diff != "" {
		t.Errorf("stats after Put (-want +got):\n%s", diff)
	}
	// One at a time: a connection of its own, the one put last.
	c, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	if c != cs[1] {
		t.Errorf("Get after Put handed out %p (shared %v), want the last connection of its own put back", c, c.Shared())
	}
	echo(t, c, "again")
	p.Put(c)
	// Past the idle connections of their own, the idle streams.
	again := getN(t, p, srv, 3)
	if again[2] != cs[9] {
		t.Errorf("third Get handed out %p, want the last stream put back", again[2])
	}
	for _, c := range again {
		echo(t, c, "reused")
		p.Put(c)
	}
	if got := p.Stats().Dials; got != 4 {
		t.Errorf("%d dials, want no more than the first 4", got)
	}
}

// A server that does not speak the shared protocol (an older node) is
// dialed for a connection each, every time.
func TestSharedFallsBackToAConnectionEach(t *testing.T) {
	cert, key := newCert(t)
	srv := sharedServer(t, key, false)
	p := sharedPool(t, cert, func(c *Config) { c.SharedAfter = 1 })
	cs := getN(t, p, srv, 3)
	for i, c := range cs {
		if c.Shared() {
			t.Errorf("exchange %d went as a stream to a server without %s", i, testMuxALPN)
		}
		echo(t, c, "plain")
		_ = c.Close()
	}
	if st := p.Stats(); st.Shared != 0 || st.Dials != 3 {
		t.Errorf("stats %+v, want 3 dials and nothing shared", st)
	}
}

// A pool that does not offer the shared protocol (an older node) gets a
// connection each from a server that speaks it.
func TestServerSpeaksBothProtocols(t *testing.T) {
	cert, key := newCert(t)
	srv := sharedServer(t, key, true)
	p := newPool(t, cert, func(c *Config) { c.ALPN = testALPN })
	cs := getN(t, p, srv, 6)
	for _, c := range cs {
		if c.Shared() || c.ConnectionState().NegotiatedProtocol != testALPN {
			t.Fatalf("shared %v over %q, want a connection of its own", c.Shared(), c.ConnectionState().NegotiatedProtocol)
		}
		echo(t, c, "old")
		_ = c.Close()
	}
}

// ClosePeer fails every stream to the peer, in use and idle, at once, and
// closes its shared connections.
func TestClosePeerFailsSharedStreams(t *testing.T) {
	cert, key := newCert(t)
	srv := sharedServer(t, key, true)
	p := sharedPool(t, cert, func(c *Config) { c.SharedAfter = 1 })
	cs := getN(t, p, srv, 4)
	for _, c := range cs {
		echo(t, c, "before")
	}
	p.Put(cs[3])
	read := make(chan error, 1)
	go func() {
		_, err := cs[2].Read(make([]byte, 1)) // nothing comes
		read <- err
	}()
	if n := p.ClosePeer(srv.key); n != 4+1 {
		t.Errorf("ClosePeer closed %d, want 4 connections and streams and 1 shared connection", n)
	}
	if err := recv(t, read, "the blocked read"); err == nil {
		t.Error("read on a stream of a closed peer succeeded")
	}
	for _, c := range cs[:3] {
		p.Put(c)
	}
	if st := p.Stats(); st.Open != 0 || st.Idle != 0 || st.Shared != 0 {
		t.Errorf("stats %+v after ClosePeer, want nothing open", st)
	}
}

// A shared connection lives as long as a stream on it: the last one's
// close closes it, and the server's handlers of its streams end.
func TestLastStreamClosesItsSharedConnection(t *testing.T) {
	cert, key := newCert(t)
	srv := sharedServer(t, key, true)
	p := sharedPool(t, cert, func(c *Config) { c.SharedAfter = 1 })
	cs := getN(t, p, srv, 3) // one of its own, two streams
	for _, c := range cs {
		echo(t, c, "x")
	}
	_ = cs[1].Close()
	recv(t, srv.ended, "the first stream's handler")
	if got := p.Stats().Shared; got != 1 {
		t.Errorf("%d shared after one of two streams closed, want 1", got)
	}
	_ = cs[2].Close()
	recv(t, srv.ended, "the second stream's handler")
	if st := p.Stats(); st.Shared != 0 || st.Open != 1 {
		t.Errorf("stats %+v after the last stream closed, want nothing shared, one open", st)
	}
	_ = cs[0].Close()
}

// Idle streams expire after IdleTimeout like connections, oldest first,
// even while a connection of its own serves every exchange.
func TestIdleStreamsExpire(t *testing.T) {
	cert, key := newCert(t)
	srv := sharedServer(t, key, true)
	var mu sync.Mutex
	now := time.Now()
	p := sharedPool(t, cert, func(c *Config) {
		c.SharedAfter = 1
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	cs := getN(t, p, srv, 3)
	for _, c := range cs {
		echo(t, c, "x")
		p.Put(c)
	}
	mu.Lock()
	now = now.Add(DefaultIdleTimeout)
	mu.Unlock()
	c, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	recv(t, srv.ended, "an expired stream's handler")
	recv(t, srv.ended, "the other expired stream's handler")
	if st := p.Stats(); st.Expired != 3 || st.Shared != 0 {
		t.Errorf("stats %+v, want the connection and both streams expired, nothing shared", st)
	}
}

// A server serves at most MaxConns streams of shared connections at once,
// apart from its connections: one past them is reset as it arrives, and
// the ones in service are not disturbed.
func TestServerBoundsSharedStreams(t *testing.T) {
	cert, key := newCert(t)
	srv := startServer(t, map[string]ed25519.PublicKey{"client": key}, func(c *ServerConfig) {
		c.ALPN, c.MuxALPN, c.MaxConns = testALPN, testMuxALPN, 2
	})
	p := sharedPool(t, cert, func(c *Config) { c.SharedAfter = -1 })
	cs := getN(t, p, srv, 3)
	echo(t, cs[0], "one")
	echo(t, cs[1], "two")
	_ = cs[2].SetDeadline(time.Now().Add(deadline))
	if _, err := cs[2].Write([]byte("three")); err == nil {
		if _, err := cs[2].Read(make([]byte, 5)); err == nil {
			t.Fatal("a third stream was served past MaxConns 2")
		}
	}
	echo(t, cs[0], "one again")
	_ = cs[2].Close()
	// A place freed is taken again.
	_ = cs[1].Close()
	recv(t, srv.ended, "the closed stream's handler")
	// The handler's end is signalled before the server counts its stream
	// out (as it returns): wait for that.
	for end := time.Now().Add(deadline); srv.srv.Stats().Streams > 1; {
		if time.Now().After(end) {
			t.Fatalf("%+v in service after one of two streams ended", srv.srv.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	c := getN(t, p, srv, 1)[0]
	echo(t, c, "four")
}

// A shared connection found ended when a stream is to be opened on it (its
// peer went away while its streams were in use) is dropped, and Get dials
// another: it once re-took the pool's lock it then took again, and every
// Get, Put and Close of the pool hung (issue 26: make faults' fault 1).
func TestGetPastAnEndedSharedConnection(t *testing.T) {
	cert, key := newCert(t)
	srv := sharedServer(t, key, true)
	// Not sharedPool: its cleanup, the pool's Close, would hang on the
	// lock a hung Get holds, where this test is to fail.
	p, err := NewPool(Config{Certificate: cert, ALPN: testALPN, MuxALPN: testMuxALPN, SharedAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	held := getN(t, p, srv, 1)[0] // a stream, in use
	echo(t, held, "x")
	if n := srv.srv.ClosePeer("client"); n != 1 {
		t.Fatalf("the server closed %d connections, want 1", n)
	}
	// The stream's read sees the end: its shared connection is done, but
	// counted in the pool while the stream is held.
	_ = held.SetDeadline(time.Now().Add(deadline))
	if _, err := held.Read(make([]byte, 1)); err == nil {
		t.Fatal("a stream read past its connection's end")
	}
	got := make(chan error, 1)
	go func() {
		c, err := p.Get(ctxT(t), srv.addr, srv.key)
		if err == nil {
			echo(t, c, "after")
			p.Put(c)
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Get after the shared connection ended: %v", err)
		}
	case <-time.After(deadline):
		t.Fatal("Get hung after the shared connection ended")
	}
	defer p.Close()
	_ = held.Close()
	if st := p.Stats(); st.Shared != 1 || st.Dials != 2 {
		t.Errorf("stats %+v, want the ended connection dropped and one more dialed", st)
	}
}
