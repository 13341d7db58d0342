//go:build linux

package httpfast

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// rawPair returns a loopback TCP connection pair, the first RawIO's.
func rawPair(t *testing.T) (raw net.Conn, peer *net.TCPConn) {
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
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	p, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	raw = RawIO(c)
	if _, ok := raw.(*rawConn); !ok {
		t.Fatalf("RawIO(%T) = %T, want its own", c, raw)
	}
	t.Cleanup(func() { raw.Close(); p.Close() })
	return raw, p.(*net.TCPConn)
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRawIOPassesOtherConnsThrough(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := RawIO(a); got != a {
		t.Fatalf("RawIO(pipe) = %T, want the pipe itself", got)
	}
}

// transfer runs write on its own goroutine while it reads len(want)
// bytes from r, and fails t unless write wrote them all and r read them.
func transfer(t *testing.T, write func() (int64, error), r io.Reader, want []byte) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		n, err := write()
		if err == nil && n != int64(len(want)) {
			err = io.ErrShortWrite
		}
		errc <- err
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes read differ from bytes written")
	}
}

// A write far larger than the socket buffers must wait for the reader
// (EAGAIN, then the poller) and resume where it stopped, both ways.
func TestRawIOWholeWritesAndReadsThroughFullBuffers(t *testing.T) {
	raw, peer := rawPair(t)
	out := randomBytes(t, 16<<20)
	writeAll := func(w io.Writer) func() (int64, error) {
		return func() (int64, error) { n, err := w.Write(out); return int64(n), err }
	}
	transfer(t, writeAll(raw), peer, out)
	// The other way: RawIO's Read reassembles what the peer wrote.
	transfer(t, writeAll(peer), raw, out)
}

// writeBuffers writes more buffers than one writev takes, some empty,
// some larger than the socket buffers, in order, and consumes them.
func TestRawIOWriteBuffers(t *testing.T) {
	raw, peer := rawPair(t)
	parts := [][]byte{
		randomBytes(t, 10), nil, randomBytes(t, 3<<20), randomBytes(t, 1),
		{}, randomBytes(t, 5<<20), randomBytes(t, 7), randomBytes(t, 100),
	}
	v := net.Buffers(append([][]byte(nil), parts...))
	transfer(t, func() (int64, error) { return writeBuffers(raw, &v) }, peer, bytes.Join(parts, nil))
	if len(v) != 0 {
		t.Fatalf("%d buffers left, want all consumed", len(v))
	}
}

// Reads and writes from two goroutines at once, as the mesh's watcher
// and relay do.
func TestRawIOConcurrentReadAndWrite(t *testing.T) {
	raw, peer := rawPair(t)
	out := randomBytes(t, 4<<20)
	errc := make(chan error, 2)
	go func() { _, err := raw.Write(out); errc <- err }()
	go func() { _, err := peer.Write(out); errc <- err }()
	fromPeer := make([]byte, len(out))
	readErr := make(chan error, 1)
	go func() { _, err := io.ReadFull(raw, fromPeer); readErr <- err }()
	fromRaw := make([]byte, len(out))
	if _, err := io.ReadFull(peer, fromRaw); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-readErr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fromPeer, out) || !bytes.Equal(fromRaw, out) {
		t.Fatal("bytes differ")
	}
}

// The end of the stream, a deadline and a closed connection read as
// they do on net's connections.
func TestRawIOErrorsAsNet(t *testing.T) {
	raw, peer := rawPair(t)

	if err := raw.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := raw.Read(make([]byte, 8))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" {
		t.Fatalf("read past the deadline: %#v, want a *net.OpError of op read", err)
	}
	_ = raw.SetReadDeadline(time.Time{})

	if _, err := peer.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	_ = peer.CloseWrite()
	got, err := io.ReadAll(raw)
	if err != nil || string(got) != "last" {
		t.Fatalf("read to the end: %q, %v; want \"last\" and io.EOF", got, err)
	}
	if n, err := raw.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("read after the end: %d, %v; want io.EOF", n, err)
	}

	// A write to a peer gone: the kernel's error, as net reports it.
	_ = peer.SetLinger(0)
	_ = peer.Close()
	deadline := time.Now().Add(testDeadline)
	for {
		_, err = raw.Write(make([]byte, 64<<10))
		if err != nil || time.Now().After(deadline) {
			break
		}
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write to a reset connection: %v, want ECONNRESET or EPIPE", err)
	}
	if !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("write error %#v, want a *net.OpError of op write", err)
	}

	_ = raw.Close()
	if _, err := raw.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v, want net.ErrClosed", err)
	}
	if _, err := raw.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after Close: %v, want net.ErrClosed", err)
	}
}

// A Read blocked waiting for bytes ends when the connection is closed.
func TestRawIOCloseEndsABlockedRead(t *testing.T) {
	raw, _ := rawPair(t)
	errc := make(chan error, 1)
	go func() { _, err := raw.Read(make([]byte, 1)); errc <- err }()
	_ = raw.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("blocked read after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(testDeadline):
		t.Fatal("a blocked read outlived Close")
	}
}

// ConnAlive on a RawIO connection peeks through its own RawConn: alive
// while idle and silent, not once the peer sent bytes nobody asked for or
// closed its end; and the check allocates nothing.
func TestRawIOConnAlive(t *testing.T) {
	raw, peer := rawPair(t)
	if !ConnAlive(raw) {
		t.Fatal("an idle, silent connection is not alive")
	}
	if n := testing.AllocsPerRun(100, func() { ConnAlive(raw) }); n != 0 {
		t.Errorf("ConnAlive of a RawIO connection allocates %v times", n)
	}
	if _, err := peer.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the unasked byte to make the connection unusable", func() bool { return !ConnAlive(raw) })

	raw2, peer2 := rawPair(t)
	_ = peer2.Close()
	waitUntil(t, "the peer's close to make the connection unusable", func() bool { return !ConnAlive(raw2) })
}

// waitUntil polls cond every millisecond for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// sendFunc is a Sender of a function.
type sendFunc func() error

func (f sendFunc) Send() error { return f() }

// TestSendAwaitSavesTheEmptyRead: a request written by SendAwait and its
// answer read after it take no read that finds nothing, whether the
// answer comes at once (before the wait begins, often) or later; written
// and read plainly, the read finds nothing first (the peer answers only
// once it did).
func TestSendAwaitSavesTheEmptyRead(t *testing.T) {
	raw, peer := rawPair(t)
	rc := raw.(*rawConn)
	req, answer := []byte("ping"), []byte("pong")
	// serve answers each request once ready() says so.
	serve := func(n int, ready func() bool) <-chan error {
		done := make(chan error, 1)
		go func() {
			buf := make([]byte, len(req))
			for range n {
				if _, err := io.ReadFull(peer, buf); err != nil {
					done <- err
					return
				}
				for !ready() {
					time.Sleep(100 * time.Microsecond)
				}
				if _, err := peer.Write(answer); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		return done
	}
	exchange := func(await bool) {
		t.Helper()
		send := sendFunc(func() error { _, err := raw.Write(req); return err })
		if await {
			if err := SendAwait(raw, send); err != nil {
				t.Fatal(err)
			}
		} else if err := send(); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(answer))
		if _, err := io.ReadFull(raw, got); err != nil || !bytes.Equal(got, answer) {
			t.Fatalf("read %q, %v; want %q", got, err, answer)
		}
	}
	_ = raw.SetReadDeadline(time.Now().Add(10 * time.Second)) // a hang fails, not hangs

	// The answer at once, many times: whenever it lands, the wait ends.
	const rounds = 200
	done := serve(rounds, func() bool { return true })
	for range rounds {
		exchange(true)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The answer later.
	var later atomic.Bool
	done = serve(1, later.Load)
	time.AfterFunc(5*time.Millisecond, func() { later.Store(true) })
	exchange(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := rc.empty.Load(); n != 0 {
		t.Fatalf("%d reads after SendAwait found nothing, want 0", n)
	}

	// Plainly: the peer answers once the read found nothing.
	done = serve(1, func() bool { return rc.empty.Load() > 0 })
	exchange(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := rc.empty.Load(); n != 1 {
		t.Fatalf("%d plain reads found nothing, want 1", n)
	}
}

// TestSendAwaitEnds: the wait ends with the read deadline and with the
// connection's close, and a failed send does not wait.
func TestSendAwaitEnds(t *testing.T) {
	raw, _ := rawPair(t)
	write := sendFunc(func() error { _, err := raw.Write([]byte("x")); return err })
	_ = raw.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if err := SendAwait(raw, write); err != nil {
		t.Fatalf("SendAwait = %v, want the send's nil", err)
	}
	if _, err := raw.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read after the deadline = %v, want os.ErrDeadlineExceeded", err)
	}
	_ = raw.SetReadDeadline(time.Time{})

	failed := errors.New("send failed")
	if err := SendAwait(raw, sendFunc(func() error { return failed })); err != failed {
		t.Fatalf("SendAwait = %v, want the send's error", err)
	}

	ended := make(chan error, 1)
	go func() { ended <- SendAwait(raw, write) }()
	time.AfterFunc(5*time.Millisecond, func() { _ = raw.Close() })
	select {
	case err := <-ended:
		// nil, or the send's failure when the close came first.
		if err != nil && !errors.Is(err, net.ErrClosed) {
			t.Fatalf("SendAwait = %v, want nil or net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SendAwait still waits after the connection closed")
	}
	if _, err := raw.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close = %v, want net.ErrClosed", err)
	}

	// Not a RawIO connection: send only.
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if err := SendAwait(a, sendFunc(func() error { return failed })); err != failed {
		t.Fatalf("SendAwait on a pipe = %v, want the send's error", err)
	}
}

// TestPoolHeldRequestSavesTheEmptyRead: the pool sends a held request
// with SendAwait, so the read of an answer that takes a while finds it
// at once.
func TestPoolHeldRequestSavesTheEmptyRead(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(2 * time.Millisecond) // an instance at work
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	up := NewPool(nil)
	key := PoolKey{Role: "chat", Addr: srv.Listener.Addr().String()}
	for i := range 3 {
		body := []byte(`{"model":"m"}`)
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		uc, res, stop, err := up.RoundTrip(context.Background(), key, &Request{R: r, Host: key.Addr, Body: body, InMem: true})
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(res.Body)
		stop()
		if err != nil || string(got) != `{"ok":true}` {
			t.Fatalf("exchange %d: %q, %v", i, got, err)
		}
		if n := uc.conn.(*rawConn).empty.Load(); n != 0 {
			t.Fatalf("exchange %d: %d reads of the answer found nothing, want 0", i, n)
		}
		up.Put(uc, 4)
	}
}

// queued reports whether the peer has bytes to read, without waiting:
// on loopback a write is in the peer's queue when it returns.
func queued(t *testing.T, peer *net.TCPConn) bool {
	t.Helper()
	rc, err := peer.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var e syscall.Errno
	if err := rc.Control(func(fd uintptr) { e = sysPeek(fd, make([]byte, 1)) }); err != nil {
		t.Fatal(err)
	}
	return e != syscall.EAGAIN
}

// WriteCorked holds what is written to the socket until its write
// returns, then writes all of it, in order; through a wrapper that names
// its connection (NetConn) too, and with writeBuffers' writes.
func TestWriteCorkedHoldsWritesUntilTheEnd(t *testing.T) {
	raw, peer := rawPair(t)
	wrapped := struct {
		net.Conn
		netConn
	}{raw, netConn{raw}}
	a, b := randomBytes(t, 40<<10), randomBytes(t, 100<<10) // past the pooled buffer's size
	c := []byte("tail")
	got := make(chan []byte, 1)
	go func() {
		all, _ := io.ReadAll(io.LimitReader(peer, int64(len(a)+len(b)+len(c))))
		got <- all
	}()
	err := WriteCorked(wrapped, func() error {
		if _, err := raw.Write(a); err != nil {
			return err
		}
		v := net.Buffers{b}
		if _, err := writeBuffers(raw, &v); err != nil {
			return err
		}
		if queued(t, peer) {
			t.Error("a corked write reached the socket before the end")
		}
		_, err := raw.Write(c)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if all := <-got; !bytes.Equal(all, append(append(append([]byte(nil), a...), b...), c...)) {
		t.Fatalf("peer read %d bytes, not the three writes in order", len(all))
	}
	// Uncorked again: a write goes out at once.
	if _, err := raw.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if !queued(t, peer) {
		t.Fatal("a write after WriteCorked is held")
	}
}

// write's error is WriteCorked's, and what it wrote before failing still
// leaves.
func TestWriteCorkedReturnsWritesError(t *testing.T) {
	raw, peer := rawPair(t)
	boom := errors.New("boom")
	if err := WriteCorked(raw, func() error {
		_, _ = raw.Write([]byte("part"))
		return boom
	}); err != boom {
		t.Fatalf("WriteCorked = %v, want write's error", err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(peer, buf); err != nil || string(buf) != "part" {
		t.Fatalf("peer read %q, %v", buf, err)
	}
}

type netConn struct{ c net.Conn }

func (n netConn) NetConn() net.Conn { return n.c }
