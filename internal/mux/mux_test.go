package mux

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// echo serves server: every accepted stream gets back what it sent, then
// FIN.
func echo(g *group, server *Session) {
	g.Go(func() {
		for {
			st, err := server.Accept()
			if err != nil {
				return
			}
			g.Go(func() {
				defer st.Close()
				if _, err := io.Copy(st, st); err != nil {
					return
				}
				st.CloseWrite()
			})
		}
	})
}

// exchange writes req on a new stream, closes its write side and returns
// all that came back.
func exchange(client *Session, req []byte) ([]byte, error) {
	st, err := client.Open()
	if err != nil {
		return nil, err
	}
	defer st.Close()
	st.SetDeadline(time.Now().Add(testDeadline))
	errs := make(chan error, 1)
	go func() {
		_, err := st.Write(req)
		if err == nil {
			err = st.CloseWrite()
		}
		errs <- err
	}()
	got, err := io.ReadAll(st)
	if werr := <-errs; err == nil {
		err = werr
	}
	return got, err
}

func TestPingPong(t *testing.T) {
	for _, transport := range []string{"tcp", "tls"} {
		t.Run(transport, func(t *testing.T) {
			var c, s net.Conn
			if transport == "tcp" {
				c, s = tcpPair(t)
			} else {
				c, s = tlsPair(t, testTLSConfig(t))
			}
			client, server := sessionPair(t, c, s, Config{})
			g := newGroup(t, client, server)
			echo(g, server)
			for i := range 10 {
				req := []byte("ping " + strconv.Itoa(i))
				got, err := exchange(client, req)
				if err != nil {
					t.Fatalf("exchange %d: %v", i, err)
				}
				if !bytes.Equal(got, req) {
					t.Fatalf("exchange %d: got %q, want %q", i, got, req)
				}
			}
			if n := client.Streams(); n != 0 {
				t.Errorf("client has %d streams open after closing them all", n)
			}
		})
	}
}

// TestManyStreamsEcho runs streams at once, each echoing random sizes,
// some past several windows, and checks every byte both ways.
func TestManyStreamsEcho(t *testing.T) {
	c, s := tlsPair(t, testTLSConfig(t))
	cfg := Config{Window: 16 << 10, MaxFrame: 1 << 10, WriteQueue: 8 << 10}
	client, server := sessionPair(t, c, s, cfg)
	g := newGroup(t, client, server)
	echo(g, server)
	const streams = 48
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 1))
			req := make([]byte, r.IntN(100<<10))
			for j := range req {
				req[j] = byte(r.Uint32())
			}
			got, err := exchange(client, req)
			if err != nil {
				errs <- fmt.Errorf("stream %d: %w", i, err)
				return
			}
			if !bytes.Equal(got, req) {
				errs <- fmt.Errorf("stream %d: %d bytes back, want the %d sent", i, len(got), len(req))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestSlowReaderDoesNotStall fills one stream's window with nobody
// reading it; another stream still works.
func TestSlowReaderDoesNotStall(t *testing.T) {
	c, s := tcpPair(t)
	cfg := Config{Window: 16 << 10}
	client, server := sessionPair(t, c, s, cfg)
	g := newGroup(t, client, server)

	stalled, err := client.Open()
	if err != nil {
		t.Fatal(err)
	}
	stalled.Write([]byte("x"))
	sst, err := server.Accept()
	if err != nil {
		t.Fatal(err)
	}
	// The server fills the stalled stream's window and more; the client
	// never reads it.
	blocked := make(chan error, 1)
	g.Go(func() {
		_, err := sst.Write(make([]byte, 3*cfg.Window))
		blocked <- err
	})
	waitUntil(t, "the server's writer to reach the end of its window", func() bool {
		server.mu.Lock()
		defer server.mu.Unlock()
		return sst.sendWin == 0
	})
	echo(g, server)
	for i := range 5 {
		got, err := exchange(client, []byte("still here"))
		if err != nil || string(got) != "still here" {
			t.Fatalf("exchange %d beside a stalled stream: %q, %v", i, got, err)
		}
	}
	select {
	case err := <-blocked:
		t.Fatalf("write past the window returned (%v) with nobody reading", err)
	default:
	}
	stalled.Close()
	if err := <-blocked; !errors.Is(err, ErrReset) {
		t.Errorf("blocked write after the peer's Close: %v, want ErrReset", err)
	}
}

// TestWriterWaitsForWindow checks that a Write stops at the window and
// resumes on the reader's WINDOW frames.
func TestWriterWaitsForWindow(t *testing.T) {
	c, s := tcpPair(t)
	cfg := Config{Window: 16 << 10, MaxFrame: 1 << 10}
	client, server := sessionPair(t, c, s, cfg)
	g := newGroup(t, client, server)
	st, err := client.Open()
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 5*cfg.Window+123)
	for i := range want {
		want[i] = byte(i * 7)
	}
	wrote := make(chan error, 1)
	g.Go(func() {
		_, err := st.Write(want)
		if err == nil {
			err = st.CloseWrite()
		}
		wrote <- err
	})
	sst, err := server.Accept()
	if err != nil {
		t.Fatal(err)
	}
	// Until the server reads, the client has sent exactly one window and
	// its Write waits (reading the connection for WINDOW frames).
	waitUntil(t, "the writer to use up its window", func() bool {
		client.mu.Lock()
		defer client.mu.Unlock()
		return st.sendWin == 0 && client.reader == st
	})
	select {
	case err := <-wrote:
		t.Fatalf("Write returned (%v) with the window full", err)
	default:
	}
	got, err := io.ReadAll(sst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want %d", len(got), len(want))
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}

func TestCloseWriteEOF(t *testing.T) {
	c, s := tcpPair(t)
	client, server := sessionPair(t, c, s, Config{})
	st, _ := client.Open()
	st.Write([]byte("hello"))
	if err := st.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte("more")); !errors.Is(err, errWriteClosed) {
		t.Errorf("Write after CloseWrite: %v, want errWriteClosed", err)
	}
	sst, err := server.Accept()
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(sst)
	if err != nil || string(got) != "hello" {
		t.Fatalf("ReadAll: %q, %v; want hello and EOF", got, err)
	}
	// The other direction still works, then ends the same way.
	sst.Write([]byte("back"))
	sst.CloseWrite()
	got, err = io.ReadAll(st)
	if err != nil || string(got) != "back" {
		t.Fatalf("client ReadAll: %q, %v", got, err)
	}
	// Both FINs seen: Close sends no RESET.
	before := client.wqEpoch
	st.Close()
	sst.Close()
	if client.wqEpoch != before {
		t.Errorf("Close after both FINs queued a frame")
	}
}

// TestEndSendsNothing checks that a clean exchange ended with End costs
// no frame beyond its data, and that a late frame for it is discarded.
func TestEndSendsNothing(t *testing.T) {
	c, s := tcpPair(t)
	cc := &countingConn{Conn: c}
	sc := &countingConn{Conn: s}
	client, server := sessionPair(t, cc, sc, Config{})
	req, resp := []byte("request"), []byte("response!")
	for i := range 3 {
		st, _ := client.Open()
		st.Write(req)
		sst, err := server.Accept()
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(req))
		if _, err := io.ReadFull(sst, buf); err != nil {
			t.Fatal(err)
		}
		sst.Write(resp)
		sst.End()
		buf = make([]byte, len(resp))
		if _, err := io.ReadFull(st, buf); err != nil {
			t.Fatal(err)
		}
		st.End()
		if got, want := cc.written.Load(), int64((i+1)*(headerLen+len(req))); got != want {
			t.Errorf("exchange %d: client wrote %d bytes, want %d (its DATA frames alone)", i, got, want)
		}
		if got, want := sc.written.Load(), int64((i+1)*(headerLen+len(resp))); got != want {
			t.Errorf("exchange %d: server wrote %d bytes, want %d", i, got, want)
		}
		if client.Streams() != 0 || server.Streams() != 0 {
			t.Errorf("streams open after End: client %d, server %d", client.Streams(), server.Streams())
		}
		if _, err := st.Read(buf); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Read after End: %v, want net.ErrClosed", err)
		}
	}
}

// TestCloseSendsReset checks both sides of a RESET: the peer's blocked
// Read fails at once with ErrReset, and its Write too.
func TestCloseSendsReset(t *testing.T) {
	c, s := tcpPair(t)
	client, server := sessionPair(t, c, s, Config{})
	st, _ := client.Open()
	st.Write([]byte("x"))
	sst, err := server.Accept()
	if err != nil {
		t.Fatal(err)
	}
	sst.Read(make([]byte, 1))
	read := make(chan error, 1)
	go func() {
		_, err := sst.Read(make([]byte, 1))
		read <- err
	}()
	st.Close()
	st.Close() // idempotent
	err = <-read
	if !errors.Is(err, ErrReset) || !strings.Contains(err.Error(), "cancel") {
		t.Errorf("peer's Read after Close: %v, want ErrReset (cancel)", err)
	}
	if _, err := sst.Write([]byte("y")); !errors.Is(err, ErrReset) {
		t.Errorf("peer's Write after Close: %v, want ErrReset", err)
	}
	if sst.Alive() || st.Alive() {
		t.Error("a reset stream is alive")
	}
	if server.Err() != nil || client.Err() != nil {
		t.Errorf("a RESET ended a session: %v, %v", server.Err(), client.Err())
	}
}

func TestReadDeadline(t *testing.T) {
	c, s := tlsPair(t, testTLSConfig(t))
	client, server := sessionPair(t, c, s, Config{})
	st, _ := client.Open()
	st.Write([]byte("x"))
	sst, err := server.Accept()
	if err != nil {
		t.Fatal(err)
	}
	// A passed deadline fails at once.
	st.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := st.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("Read past its deadline: %v, want a timeout", err)
	}
	// A deadline set while the Read is blocked (and holds the read token,
	// being the only reader) wakes it.
	st.SetReadDeadline(time.Time{})
	read := make(chan error, 1)
	go func() {
		_, err := st.Read(make([]byte, 1))
		read <- err
	}()
	waitUntil(t, "the Read to hold the read token", func() bool {
		client.mu.Lock()
		defer client.mu.Unlock()
		return client.reader == st
	})
	st.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if err := <-read; !isTimeout(err) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blocked Read after SetReadDeadline: %v, want os.ErrDeadlineExceeded", err)
	}
	// The stream and the session are still good.
	st.SetReadDeadline(time.Time{})
	sst.Write([]byte("answer"))
	buf := make([]byte, 6)
	if _, err := io.ReadFull(st, buf); err != nil || string(buf) != "answer" {
		t.Fatalf("Read after a timeout: %q, %v", buf, err)
	}
	if client.Err() != nil {
		t.Fatalf("a timeout failed the session: %v", client.Err())
	}
}

func TestWriteDeadline(t *testing.T) {
	c, s := tcpPair(t)
	cfg := Config{Window: 16 << 10}
	client, server := sessionPair(t, c, s, cfg)
	st, _ := client.Open()
	wrote := make(chan error, 1)
	var n int
	go func() {
		var err error
		n, err = st.Write(make([]byte, 2*cfg.Window))
		wrote <- err
	}()
	sst, err := server.Accept()
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the writer to reach the end of its window", func() bool {
		client.mu.Lock()
		defer client.mu.Unlock()
		return st.sendWin == 0 && client.reader == st
	})
	st.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	if err := <-wrote; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blocked Write after SetWriteDeadline: %v, want os.ErrDeadlineExceeded", err)
	}
	if n != cfg.Window {
		t.Errorf("Write reported %d bytes, want the %d of the window", n, cfg.Window)
	}
	// The stream still works once the peer reads.
	st.SetWriteDeadline(time.Time{})
	buf := make([]byte, cfg.Window)
	if _, err := io.ReadFull(sst, buf); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte("more")); err != nil {
		t.Fatalf("Write after a timeout: %v", err)
	}
	if _, err := io.ReadFull(sst, buf[:4]); err != nil || string(buf[:4]) != "more" {
		t.Fatalf("peer read %q, %v", buf[:4], err)
	}
	if client.Err() != nil {
		t.Fatal(client.Err())
	}
}

func TestSessionCloseFailsBlockedCalls(t *testing.T) {
	c, s := tcpPair(t)
	cfg := Config{Window: 16 << 10}
	client, server := sessionPair(t, c, s, cfg)
	reader, _ := client.Open()
	reader.Write([]byte("r"))
	writer, _ := client.Open()
	writer.Write(make([]byte, cfg.Window)) // the window is used up
	for range 2 {
		if _, err := server.Accept(); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 3)
	go func() { _, err := reader.Read(make([]byte, 1)); errs <- err }()
	go func() { _, err := writer.Write([]byte("w")); errs <- err }()
	go func() { _, err := server.Accept(); errs <- err }()
	waitUntil(t, "a reader to hold the client's token", func() bool {
		client.mu.Lock()
		defer client.mu.Unlock()
		return client.reader != nil
	})
	client.Close()
	server.Close()
	for range 3 {
		if err := <-errs; !errors.Is(err, ErrSessionClosed) {
			t.Errorf("blocked call after Close: %v, want ErrSessionClosed", err)
		}
	}
	<-client.Done()
	if _, err := client.Open(); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("Open after Close: %v", err)
	}
}

func TestMaxStreams(t *testing.T) {
	c, s := tcpPair(t)
	client, err := Client(c, Config{MaxStreams: 4})
	if err != nil {
		t.Fatal(err)
	}
	server, err := Server(s, Config{MaxStreams: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	defer server.Close()
	var sts []*Stream
	for i := range 4 {
		st, err := client.Open()
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		sts = append(sts, st)
	}
	if _, err := client.Open(); !errors.Is(err, ErrTooManyStreams) {
		t.Fatalf("Open past MaxStreams: %v, want ErrTooManyStreams", err)
	}
	// The server's Accept loop reads the connection (a session reads only
	// while someone waits): it takes two streams and refuses the third.
	accepted := make(chan *Stream, 4)
	g := newGroup(t, client, server)
	g.Go(func() {
		for {
			st, err := server.Accept()
			if err != nil {
				return
			}
			accepted <- st
		}
	})
	for _, st := range sts[:3] {
		st.Write([]byte("x"))
	}
	_, err = sts[2].Read(make([]byte, 1))
	if !errors.Is(err, ErrReset) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("third stream: %v, want ErrReset (refused)", err)
	}
	if n := client.Streams(); n != 3 {
		t.Errorf("client has %d streams open, want 3 (the refused one forgotten)", n)
	}
	// Once the server ends one, a new stream is taken.
	first := <-accepted
	second := <-accepted
	first.Close()
	sts[3].Write([]byte("y"))
	third := <-accepted
	if first.ID() != 1 || second.ID() != 3 || third.ID() != 7 {
		t.Errorf("accepted ids %d, %d and %d, want 1, 3 and 7", first.ID(), second.ID(), third.ID())
	}
}

func TestWriteErrorFailsSession(t *testing.T) {
	c, s := tcpPair(t)
	cc := &countingConn{Conn: c}
	client, server := sessionPair(t, cc, s, Config{})
	a, _ := client.Open()
	b, _ := client.Open()
	a.Write([]byte("a"))
	if _, err := server.Accept(); err != nil {
		t.Fatal(err)
	}
	cc.failWrite.Store(true)
	if _, err := b.Write([]byte("b")); err == nil {
		t.Fatal("Write on a failing connection succeeded")
	}
	if err := client.Err(); !errors.Is(err, ErrSessionClosed) || !errors.Is(err, errTestWrite) {
		t.Fatalf("session error %v, want ErrSessionClosed wrapping the write error", err)
	}
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("another stream's Read: %v, want ErrSessionClosed", err)
	}
	if a.Alive() {
		t.Error("a stream of a failed session is alive")
	}
}

// goid returns the current goroutine's id, from its stack's header.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// readerConn records which goroutines read the connection.
type readerConn struct {
	net.Conn
	mu      sync.Mutex
	readers map[uint64]int
}

func (c *readerConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	c.readers[goid()]++
	c.mu.Unlock()
	return c.Conn.Read(p)
}

// TestOneStreamReadsItself is the c=1 property: with one exchange in
// flight, the goroutine that waits for the answer is the one that reads
// it from the connection; no other goroutine touches it, so there is no
// hand-off.
func TestOneStreamReadsItself(t *testing.T) {
	c, s := tcpPair(t)
	rc := &readerConn{Conn: c, readers: map[uint64]int{}}
	client, server := sessionPair(t, rc, s, Config{})
	g := newGroup(t, client, server)
	g.Go(func() {
		for {
			st, err := server.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 150)
			if _, err := io.ReadFull(st, buf); err != nil {
				return
			}
			st.Write(make([]byte, 400))
			st.End()
		}
	})
	me := goid()
	for range 100 {
		st, err := client.Open()
		if err != nil {
			t.Fatal(err)
		}
		st.Write(make([]byte, 150))
		if _, err := io.ReadFull(st, make([]byte, 400)); err != nil {
			t.Fatal(err)
		}
		st.End()
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.readers) != 1 || rc.readers[me] == 0 {
		t.Fatalf("the connection was read by goroutines %v, want only this test's (%d)", rc.readers, me)
	}
	// One read per answer: a 400-byte answer is one frame, read at once.
	if n := rc.readers[me]; n != 100 {
		t.Errorf("%d connection reads for 100 answers, want 100", n)
	}
}

// TestIdleStreamsMemory opens 1,000 streams, each sent and read a window's
// worth, and checks that what they keep once drained stays small.
func TestIdleStreamsMemory(t *testing.T) {
	c, s := tcpPair(t)
	cfg := Config{MaxStreams: 1000, Window: 64 << 10}
	client, server := sessionPair(t, c, s, cfg)
	payload := make([]byte, cfg.Window)
	var sts []*Stream
	for range 1000 {
		st, err := client.Open()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Write(payload); err != nil {
			t.Fatal(err)
		}
		sst, err := server.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(sst, make([]byte, len(payload))); err != nil {
			t.Fatal(err)
		}
		sts = append(sts, sst)
	}
	held := 0
	server.mu.Lock()
	for _, st := range sts {
		held += cap(st.rbuf)
	}
	server.mu.Unlock()
	if held > 1000*keepRecvBuf {
		t.Errorf("1,000 drained streams hold %d bytes, want at most %d", held, 1000*keepRecvBuf)
	}
	if server.Streams() != 1000 {
		t.Errorf("%d streams open, want 1000", server.Streams())
	}
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name string
		give Config
		want []string // substrings of the error; none: valid
	}{
		{name: "defaults", give: Config{}},
		{name: "bounds", give: Config{MaxStreams: 4096, Window: 16 << 20, MaxFrame: 65535, WriteQueue: 65535 + 8}},
		{name: "all wrong", give: Config{MaxStreams: 5000, Window: 1000, MaxFrame: 100, WriteQueue: 50},
			want: []string{"MaxStreams 5000", "Window 1000", "MaxFrame 100", "WriteQueue 50"}},
		{name: "negative", give: Config{MaxStreams: -1}, want: []string{"MaxStreams -1"}},
		{name: "queue under a frame", give: Config{WriteQueue: 1 << 10}, want: []string{"WriteQueue 1024"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := net.Pipe()
			defer c.Close()
			_, err := Client(c, tt.give)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
