//go:build linux

package httpfast

import (
	"bufio"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawListener hands out RawIO connections and keeps them.
type rawListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*rawConn
}

func (l *rawListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	rc := RawIO(c).(*rawConn)
	l.mu.Lock()
	l.conns = append(l.conns, rc)
	l.mu.Unlock()
	return rc, nil
}

// serveFast serves h on a loopback fast reader; it returns the address
// and the listener.
func serveFast(t *testing.T, h http.Handler) (string, *rawListener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := &rawListener{Listener: ln}
	fs := NewServer(h, ln.Addr(), 5*time.Second, log.New(io.Discard, "", 0))
	done := make(chan struct{})
	go func() { defer close(done); _ = fs.Serve(rl) }()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		fs.Shutdown(t.Context())
	})
	return ln.Addr().String(), rl
}

// TestWholeAnswerLeavesWithTheWait: a whole answer the handler flushed
// leaves when it returned, in the window of the wait for the next
// request, so the read of that request finds it rather than nothing;
// an answer on a connection that closes, and an event stream's chunks
// (but its last), leave at once.
func TestWholeAnswerLeavesWithTheWait(t *testing.T) {
	const body = `{"ok":true}`
	addr, rl := serveFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			for range 3 {
				_, _ = io.WriteString(w, "data: x\n\n")
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Header().Set("Content-Length", "11")
		_, _ = io.WriteString(w, body)
		w.(http.Flusher).Flush() // as the proxy does after each write
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	ask := func(path, extra string) *http.Response {
		t.Helper()
		req := "POST " + path + " HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n" + extra + "\r\n{}"
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	const rounds = 20
	for i := range rounds {
		res := ask("/v1/chat/completions", "")
		got, err := io.ReadAll(res.Body)
		if err != nil || string(got) != body || res.StatusCode != http.StatusOK {
			t.Fatalf("round %d: %d %q, %v", i, res.StatusCode, got, err)
		}
	}
	res := ask("/stream", "")
	got, err := io.ReadAll(res.Body)
	if err != nil || strings.Count(string(got), "data: x") != 3 {
		t.Fatalf("stream: %q, %v", got, err)
	}
	rl.mu.Lock()
	sc := rl.conns[0]
	rl.mu.Unlock()
	// The first request may come after the server's first read.
	if n := sc.empty.Load(); n > 1 {
		t.Fatalf("%d reads of the next request found nothing in %d exchanges, want at most 1", n, rounds+1)
	}

	// Asked to close: the answer still arrives whole, then the end.
	res = ask("/v1/chat/completions", "Connection: close\r\n")
	got, err = io.ReadAll(res.Body)
	if err != nil || string(got) != body {
		t.Fatalf("closing: %q, %v", got, err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after a closing answer: %v, want io.EOF", err)
	}
}

// TestReadDeadlineCoarse: a connection's idle deadline, wanted anew after
// each request, is applied as CoarseDeadline decides: the first exact, a
// later one within the slack left as it is.
func TestReadDeadlineCoarse(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	fc := &fastConn{c: c1}
	now := time.Now()
	apply := func(want time.Time) time.Time {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		fc.rdWant = want
		fc.applyDeadlineLocked()
		return fc.rdSet
	}
	first := now.Add(clientIdleTimeout)
	if got := apply(first); !got.Equal(first) {
		t.Fatalf("first deadline %v, want %v exactly", got, first)
	}
	second := first.Add(200 * time.Millisecond)
	set := apply(second)
	if !set.Equal(second.Add(DeadlineSlack)) {
		t.Fatalf("second deadline %v, want %v", set, second.Add(DeadlineSlack))
	}
	if got := apply(second.Add(700 * time.Millisecond)); !got.Equal(set) {
		t.Fatalf("a deadline within the slack moved the socket's: %v -> %v", set, got)
	}
	if got := apply(time.Time{}); !got.IsZero() {
		t.Fatalf("a cleared deadline left %v", got)
	}
}
