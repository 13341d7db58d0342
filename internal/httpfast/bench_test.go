package httpfast

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"
)

// benchRequest is a chat request as a load generator sends it, the head
// of the hop's consumer node.
const benchRequest = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8090\r\n" +
	"User-Agent: bench/1.0\r\nAccept: application/json\r\nContent-Type: application/json\r\n" +
	"Authorization: Bearer sk-local\r\nX-Trace: abc\r\nContent-Length: 33\r\n\r\n" +
	`{"model":"m","messages":[],"n":1}`

// benchAnswer is an instance's answer to it, as a Python server writes
// its head (lower-case names).
const benchAnswer = "HTTP/1.1 200 OK\r\ndate: Tue, 01 Dec 2026 20:00:00 GMT\r\nserver: uvicorn\r\n" +
	"content-length: 11\r\ncontent-type: application/json\r\nx-request-id: 42\r\n\r\n{\"ok\":true}"

// BenchmarkReadHead reads a chat request's head on a connection that
// read one before (its header map reused).
func BenchmarkReadHead(b *testing.B) {
	head := []byte(benchRequest)
	src := bytes.NewReader(head)
	fc := &fastConn{remote: "127.0.0.1:1"}
	fc.br = bufio.NewReaderSize(src, fastHeadBytes)
	b.ReportAllocs()
	for b.Loop() {
		src.Reset(head)
		fc.br.Reset(src)
		if r, _, err := fc.readHead(); r == nil || err != nil {
			b.Fatal("not read")
		}
	}
}

// BenchmarkAnswer writes a relayed answer as the proxy does (its headers,
// a Content-Length, the body) on the fast reader and ends it.
func BenchmarkAnswer(b *testing.B) {
	fc := &fastConn{fs: &Server{}, bw: bufio.NewWriterSize(io.Discard, fastWriteBytes)}
	h := make(http.Header, 8)
	r := &http.Request{Method: http.MethodPost}
	body := []byte(`{"ok":true}`)
	fb := &fastBody{}
	ct, id, route, cl := []string{"application/json"}, []string{"42"}, []string{"local"}, []string{"11"}
	b.ReportAllocs()
	for b.Loop() {
		clear(h)
		fc.w = fastWriter{fc: fc, req: r, body: fb, header: h, contentLength: -1}
		w := &fc.w
		h["Content-Type"], h["X-Request-Id"], h["X-Nodeld-Route"], h["Content-Length"] = ct, id, route, cl
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
		if !w.finish() {
			b.Fatal(w.err)
		}
		fc.bw.Reset(io.Discard)
	}
}

// BenchmarkParseResponseHead reads an instance's answer head into a
// connection's slot (the local path: HeaderDone).
func BenchmarkParseResponseHead(b *testing.B) {
	data := []byte(benchAnswer)
	src := bytes.NewReader(data)
	br := bufio.NewReaderSize(src, upstreamReadBufferBytes)
	req := &http.Request{Method: http.MethodPost}
	slot := &responseSlot{headerDone: true}
	b.ReportAllocs()
	for b.Loop() {
		src.Reset(data)
		br.Reset(src)
		_, _ = br.Peek(len(data))
		if parseResponseHead(br, req, slot) == nil {
			b.Fatal("not parsed")
		}
	}
}

// BenchmarkAppendRequestHead writes the head forwarded to an instance.
func BenchmarkAppendRequestHead(b *testing.B) {
	r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader([]byte(benchRequest))))
	if err != nil {
		b.Fatal(err)
	}
	req := &Request{R: r, Host: "127.0.0.1:8090", Body: []byte(`{"model":"m","messages":[],"n":1}`), InMem: true}
	buf := make([]byte, 0, 2048)
	b.ReportAllocs()
	for b.Loop() {
		buf = appendRequestHead(buf[:0], req)
	}
}

// idleConn is a connection the pool keeps without using it.
type idleConn struct{ net.Conn }

func (idleConn) Close() error { return nil }

// BenchmarkPoolGetPut takes a kept connection and puts it back, as an
// exchange on the local path does around its request.
func BenchmarkPoolGetPut(b *testing.B) {
	up := NewPool(nil)
	key := PoolKey{Role: "chat", Addr: "127.0.0.1:8090"}
	for range 4 {
		up.Put(&Conn{key: key, conn: idleConn{}, born: time.Now()}, 4)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		uc, err := up.get(ctx, key, true)
		if err != nil || !uc.reused {
			b.Fatal("not reused", err)
		}
		up.Put(uc, 4)
	}
}

// pipelineConn is a client connection that sends n requests, each read
// whole by one Read, and drops what it is sent. The one-byte read of an
// exchange's watch of the client waits, as on a socket, until a read
// deadline in the past ends it.
type pipelineConn struct {
	req  []byte
	left int
	cut  chan struct{}
}

func (c *pipelineConn) Read(p []byte) (int, error) {
	if len(p) == 1 {
		<-c.cut
		return 0, os.ErrDeadlineExceeded
	}
	if c.left == 0 {
		return 0, io.EOF
	}
	c.left--
	return copy(p, c.req), nil
}

func (c *pipelineConn) Write(p []byte) (int, error)   { return len(p), nil }
func (c *pipelineConn) Close() error                  { return nil }
func (c *pipelineConn) LocalAddr() net.Addr           { return &net.TCPAddr{} }
func (c *pipelineConn) RemoteAddr() net.Addr          { return &net.TCPAddr{} }
func (c *pipelineConn) SetDeadline(t time.Time) error { return nil }
func (c *pipelineConn) SetReadDeadline(t time.Time) error {
	if !t.IsZero() && t.Before(time.Now()) {
		select {
		case c.cut <- struct{}{}:
		default:
		}
	}
	return nil
}
func (c *pipelineConn) SetWriteDeadline(t time.Time) error { return nil }

// BenchmarkServe serves chat requests on one connection of the fast
// reader, without sockets: each exchange's head, body, handler and
// answer, and the connection's loop around them.
func BenchmarkServe(b *testing.B) {
	answer := []byte(`{"ok":true}`)
	length := strconv.Itoa(len(answer))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf [64]byte
		if _, err := io.ReadFull(r.Body, buf[:r.ContentLength]); err != nil {
			panic(err)
		}
		wh := w.Header()
		wh["Content-Type"] = []string{"application/json"}
		wh["Content-Length"] = []string{length}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(answer)
	})
	fs := NewServer(h, &net.TCPAddr{}, 5*time.Second, log.New(io.Discard, "", 0))
	b.ReportAllocs()
	b.ResetTimer()
	fc := &fastConn{fs: fs, c: &pipelineConn{req: []byte(benchRequest), left: b.N, cut: make(chan struct{}, 1)}}
	fs.conns[fc] = false
	fs.wg.Add(1)
	fc.serve()
}

// BenchmarkWatchdogStart starts and stops a forward's Watchdog on its
// connection's timer, with the timer's clock read as time.Now (what a
// connection that sets no base reads) and from the connection's start
// (the fast reader's).
func BenchmarkWatchdogStart(b *testing.B) {
	for _, based := range []bool{false, true} {
		name := "time.Now"
		if based {
			name = "base"
		}
		b.Run(name, func(b *testing.B) {
			ct := &ConnTimer{}
			defer ct.Stop()
			if based {
				ct.base = time.Now()
			}
			ec := newExchangeCtx()
			ec.ct = ct
			var w Watchdog
			b.ReportAllocs()
			for b.Loop() {
				w.Start(time.Minute, time.Hour, nil, ec)
				w.Stop()
			}
		})
	}
}
