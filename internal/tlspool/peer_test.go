package tlspool

import (
	"context"
	"crypto/ed25519"
	"errors"
	"net"
	"testing"
	"time"
)

// An idle connection its peer closed (the server's handler returned, as
// on a restart) is not handed out again: Get dials a new one and counts
// the dead one.
func TestPoolSkipsAnIdleConnectionThePeerClosed(t *testing.T) {
	cert, key := newCert(t)
	srv := startServer(t, map[string]ed25519.PublicKey{"client": key}, nil)
	p := newPool(t, cert, nil)
	c, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, srv.peers, "the admitted peer")
	echo(t, c, "one")
	p.Put(c)
	// The server closes every connection of the peer; the client's idle
	// one sees the end of stream.
	closeFromServer(t, srv)
	c2, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if c2 == c {
		t.Fatal("the closed idle connection was handed out again")
	}
	echo(t, c2, "two")
	if st := p.Stats(); st.Dead != 1 || st.Dials != 2 || st.Reuses != 0 {
		t.Errorf("stats %+v, want one dead, two dials, no reuse", st)
	}
}

// ClosePeer aborts a connection in use: a read blocked on it returns at
// once, and putting it back afterwards does not make it idle.
func TestClosePeerAbortsConnectionsInUse(t *testing.T) {
	cert, key := newCert(t)
	srv := startServer(t, map[string]ed25519.PublicKey{"client": key}, nil)
	p := newPool(t, cert, nil)
	c, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, c, "one")
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1)) // nothing comes
		read <- err
	}()
	if n := p.ClosePeer(srv.key); n != 1 {
		t.Errorf("ClosePeer closed %d, want 1", n)
	}
	if err := recv(t, read, "the blocked read"); err == nil {
		t.Error("read on an aborted connection succeeded")
	}
	p.Put(c)
	if st := p.Stats(); st.Open != 0 || st.Idle != 0 {
		t.Errorf("stats %+v after ClosePeer and Put, want nothing open", st)
	}
	recv(t, srv.ended, "the handler's end")
}

// A pool and a server with different protocols never talk: the dial
// fails (ErrALPN, or the server's handshake failure), and a matching one
// works.
func TestALPNMustMatch(t *testing.T) {
	cert, key := newCert(t)
	srv := startServer(t, map[string]ed25519.PublicKey{"client": key}, func(c *ServerConfig) { c.ALPN = "proto/2" })
	other := newPool(t, cert, func(c *Config) { c.ALPN = "proto/1" })
	if _, err := other.Get(ctxT(t), srv.addr, srv.key); err == nil {
		t.Fatal("a dial offering another protocol succeeded")
	}
	none := newPool(t, cert, nil)
	if _, err := none.Get(ctxT(t), srv.addr, srv.key); err == nil {
		t.Fatal("a dial offering no protocol succeeded")
	}
	plain := startServer(t, map[string]ed25519.PublicKey{"client": key}, nil)
	if _, err := other.Get(ctxT(t), plain.addr, plain.key); !errors.Is(err, ErrALPN) {
		t.Fatalf("dial of a server selecting no protocol: %v, want ErrALPN", err)
	}
	same := newPool(t, cert, func(c *Config) { c.ALPN = "proto/2" })
	c, err := same.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echo(t, c, "ok")
	var _ net.Conn = c
}

// peekPool is a pool with a PeekAfter of a second on the clock *now, and
// a server admitting it.
func peekPool(t *testing.T) (*server, *Pool, *time.Time) {
	t.Helper()
	cert, key := newCert(t)
	srv := startServer(t, map[string]ed25519.PublicKey{"client": key}, nil)
	now := time.Unix(1000, 0)
	p := newPool(t, cert, func(c *Config) {
		c.PeekAfter = time.Second
		c.Now = func() time.Time { return now }
	})
	return srv, p, &now
}

// With PeekAfter, a connection put back within it is handed out without
// the peek (its peer's close is found by the exchange); one idle longer
// is peeked.
func TestPeekAfter(t *testing.T) {
	srv, p, now := peekPool(t)
	c, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, srv.peers, "the admitted peer")
	echo(t, c, "one")
	p.Put(c)
	closeFromServer(t, srv)
	c2, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	if c2 != c {
		t.Fatal("a connection idle less than PeekAfter was peeked")
	}
	p.Put(c2)
	*now = now.Add(time.Second)
	c3, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if c3 == c {
		t.Fatal("a closed connection idle PeekAfter was handed out")
	}
}

// closeFromServer has srv close every connection of peer "client" (once
// it tracks one as that peer's) and waits for its handler to end.
func closeFromServer(t *testing.T, srv *server) {
	t.Helper()
	deadlineAt := time.Now().Add(deadline)
	for srv.srv.ClosePeer("client") == 0 {
		if time.Now().After(deadlineAt) {
			t.Fatal("the server never tracked the connection as the peer's")
		}
		time.Sleep(time.Millisecond)
	}
	recv(t, srv.ended, "the handler's end")
}

// A connection handed out without the peek says so (Unchecked); found
// closed by its peer (Stale), it counts as dead and takes every idle
// connection to that peer with it, so that the next Get dials.
func TestStaleClosesThePeersIdle(t *testing.T) {
	srv, p, _ := peekPool(t)
	var cs []*Conn
	for i := range 2 {
		c, err := p.Get(ctxT(t), srv.addr, srv.key)
		if err != nil {
			t.Fatal(err)
		}
		if c.Unchecked() {
			t.Fatalf("dialed connection %d is unchecked", i)
		}
		recv(t, srv.peers, "the admitted peer")
		echo(t, c, "one")
		cs = append(cs, c)
	}
	for _, c := range cs {
		p.Put(c)
	}
	closeFromServer(t, srv)
	c, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Unchecked() || c.Alive() {
		t.Fatalf("a connection put back a moment ago and closed by its peer: unchecked %v, alive %v", c.Unchecked(), c.Alive())
	}
	if n := p.Stale(c); n != 1 {
		t.Fatalf("Stale closed %d idle connections, want the other one", n)
	}
	st := p.Stats()
	if st.Dead != 1 || st.Idle != 0 || st.Open != 0 {
		t.Fatalf("after Stale: %+v, want 1 dead and none open or idle", st)
	}
	c2, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	recv(t, srv.peers, "the admitted peer")
	if c2.Unchecked() || p.Stats().Dials != 3 {
		t.Fatalf("after Stale, Get did not dial: %+v", p.Stats())
	}
	echo(t, c2, "two")
}

// A dial that fails after ClosePeer gives its place back to the peer's
// connections it was counted among, not to those dialed since: the
// connection dialed meanwhile still counts as open.
func TestDialFailingAfterClosePeerFreesItsOwnPlace(t *testing.T) {
	cert, key := newCert(t)
	srv := startServer(t, map[string]ed25519.PublicKey{"client": key}, nil)
	mute, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := mute.Accept(); err == nil {
			accepted <- c
		}
	}()
	p := newPool(t, cert, nil)
	ctx, cancel := context.WithCancel(ctxT(t))
	failed := make(chan error, 1)
	go func() {
		_, err := p.Get(ctx, mute.Addr().String(), srv.key)
		failed <- err
	}()
	raw := recv(t, accepted, "the dial to the mute server")
	defer raw.Close()
	if n := p.ClosePeer(srv.key); n != 0 {
		t.Errorf("ClosePeer closed %d, want none (only a dial)", n)
	}
	c, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cancel()
	if err := recv(t, failed, "the dial's end"); err == nil {
		t.Fatal("the dial to the mute server succeeded")
	}
	if st := p.Stats(); st.Open != 1 {
		t.Fatalf("stats %+v, want the connection dialed after ClosePeer open", st)
	}
	echo(t, c, "one")
	p.Put(c)
	if st := p.Stats(); st.Open != 1 || st.Idle != 1 {
		t.Fatalf("stats %+v after Put, want one open and idle", st)
	}
}

// Connections given back or closed in any order leave ClosePeer the
// others to abort, each once: Put and Close take one out of those in use
// from the middle as from the end.
func TestClosePeerAbortsWhatIsLeftInAnyOrder(t *testing.T) {
	cert, key := newCert(t)
	srv := startServer(t, map[string]ed25519.PublicKey{"client": key}, nil)
	p := newPool(t, cert, nil)
	var cs []*Conn
	for range 4 {
		c, err := p.Get(ctxT(t), srv.addr, srv.key)
		if err != nil {
			t.Fatal(err)
		}
		echo(t, c, "one")
		cs = append(cs, c)
	}
	a, b, c, d := cs[0], cs[1], cs[2], cs[3]
	p.Put(a)      // the first of those in use: the last, d, takes its slot
	_ = d.Close() // the one moved
	recv(t, srv.ended, "the closed connection's end")
	if st := p.Stats(); st.Open != 3 || st.Idle != 1 {
		t.Fatalf("stats %+v, want 3 open, 1 idle", st)
	}
	if n := p.ClosePeer(srv.key); n != 3 {
		t.Fatalf("ClosePeer closed %d, want a (idle), b and c (in use)", n)
	}
	for _, c := range []*Conn{b, c} {
		_ = c.SetReadDeadline(time.Now().Add(deadline))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Error("read on a connection in use succeeded after ClosePeer")
		}
	}
	for range 3 {
		recv(t, srv.ended, "the end of a connection ClosePeer aborted")
	}
	p.Put(b)
	_ = c.Close()
	if st := p.Stats(); st.Open != 0 || st.Idle != 0 {
		t.Errorf("stats %+v after ClosePeer, want nothing open", st)
	}
}

// A connection in use when ClosePeer came is not given back to the
// peer's connections dialed since: Put aborts it and Close frees no
// place of theirs.
func TestConnOfAClosedPeerStaysOutOfItsNewConnections(t *testing.T) {
	cert, key := newCert(t)
	srv := startServer(t, map[string]ed25519.PublicKey{"client": key}, nil)
	p := newPool(t, cert, nil)
	old, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	if n := p.ClosePeer(srv.key); n != 1 {
		t.Fatalf("ClosePeer closed %d, want 1", n)
	}
	c, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, c, "new")
	p.Put(old)
	_ = old.Close()
	if st := p.Stats(); st.Open != 1 || st.Idle != 0 {
		t.Fatalf("stats %+v after putting the old one back, want only the new one open", st)
	}
	p.Put(c)
	c2, err := p.Get(ctxT(t), srv.addr, srv.key)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if c2 != c {
		t.Fatal("Get did not take the new connection back")
	}
	echo(t, c2, "again")
}
