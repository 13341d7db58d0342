package meshproxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/httpfast"
	"github.com/nodeld/nodeld/internal/httpfast/httpfasttest"
	"github.com/nodeld/nodeld/internal/mesh"
)

// TestWatchResetAllocatesNothing: a forward on the fast reader's context
// registers its stream for the reset, no closure or stop function made.
func TestWatchResetAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ctx := httpfast.NewContext()
	s := &tcpClientStream{}
	n := testing.AllocsPerRun(100, func() {
		if w := watchReset(ctx, s); !w.stop() {
			t.Fatal("stop: the context ended")
		}
	})
	if n != 0 {
		t.Errorf("watching a forward's context allocates %v times", n)
	}
}

// TestServedExchangeAllocations: the serving side of an exchange on a
// kept connection, a small held request to an instance on the pooled
// client, costs at most the allocations counted here: each cut lowers
// the bound. The consumer is the test,
// over plain TCP, and the instance answers from a buffer: neither
// allocates.
func TestServedExchangeAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	one := servedExchanges(t)
	const want = 5
	if n := testing.AllocsPerRun(200, one); n > want {
		t.Errorf("a served exchange allocates %v times, want at most %d", n, want)
	}
}

// BenchmarkServedExchange measures the serving side of an exchange on a
// kept connection, as TestServedExchangeAllocations counts it (the
// consumer's writes and reads, over loopback TCP, included).
func BenchmarkServedExchange(b *testing.B) {
	one := servedExchanges(b)
	b.ReportAllocs()
	for b.Loop() {
		one()
	}
}

// servedExchanges serves a connection from tb's client, a small held
// request to an instance on the pooled client that answers from a
// buffer, and returns a function that sends the request and reads the
// whole answer, once the first exchange is done.
func servedExchanges(tb testing.TB) func() {
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
	body := []byte(`{"model":"x","messages":[]}`)
	fwd := servingForwarderOn(tb, "http://"+httpfasttest.Start(tb, answer))
	watches := runningWatchList(tb)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		fwd.serveConnOn(context.Background(), mesh.PeerInfo{ID: servedPeer}, c, c, watches)
	}()
	cli, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cli.Close()
		<-served
	})
	req := appendRequestHeadFrame(nil, meshRequestHead{V: MeshWireVersion, Role: "chat", Method: "POST",
		Path: "/v1/chat/completions", ContentType: "application/json", BodyBytes: int64(len(body))})
	req = appendBodyFrames(req, frameReqBody, body)
	req = mesh.AppendFrameHeader(req, frameReqEnd, 0)
	_ = cli.SetDeadline(time.Now().Add(time.Hour))
	// The first exchange finds the answer's length: its frames up to the
	// end frame.
	if _, err := cli.Write(req); err != nil {
		tb.Fatal(err)
	}
	var hdr [mesh.FrameHeaderSize]byte
	buf := make([]byte, 4096)
	size := 0
	for {
		ft, n, err := mesh.ReadFrameHeaderInto(cli, MeshChunkBytes, hdr[:])
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := io.ReadFull(cli, buf[:n]); err != nil {
			tb.Fatal(err)
		}
		size += mesh.FrameHeaderSize + n
		if ft == frameRefusal {
			tb.Fatalf("refused: %s", buf[:n])
		}
		if ft == frameRespEnd {
			break
		}
	}
	return func() {
		if _, err := cli.Write(req); err != nil {
			tb.Fatal(err)
		}
		if _, err := io.ReadFull(cli, buf[:size]); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestHeadsDecodeOnTheStack: decoding a head of the common form
// allocates nothing for the head itself (only encoding/json, for other
// forms, takes the address of one).
func TestHeadsDecodeOnTheStack(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	req := []byte(`{"v":1,"role":"chat","method":"POST","path":"/v1/chat/completions","content_type":"application/json","body_bytes":93}`)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := decodeRequestHead(req, "chat"); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("a request head decodes with %v allocations", n)
	}
	// Common values, and a header that is not relayed: no string made.
	resp := []byte(`{"v":1,"status":200,"headers":{"Content-Type":"text/event-stream","Cache-Control":"no-cache","X-Other":"1"}}`)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := decodeResponseHead(resp); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("a response head decodes with %v allocations", n)
	}
}

// TestResponseHeadManyFields: a head of more fields than the fast parser
// reads is read all the same (by encoding/json), its relayed headers kept.
func TestResponseHeadManyFields(t *testing.T) {
	many := []byte(`{"v":1,"status":200,"headers":{"A":"1","B":"2","C":"3","D":"4","E":"5","F":"6","Content-Type":"text/plain"}}`)
	if _, ok := parseResponseHeadFast(many); ok {
		t.Fatalf("the fast parser read a head of more than %d fields", maxFastHeadFields)
	}
	want := responseHead{V: 1, Status: 200, Headers: relayedHeaders{hdrContentType: "text/plain"}}
	if h, err := decodeResponseHead(many); err != nil || h != want {
		t.Fatalf("head of many fields %+v, %v; want %+v", h, err, want)
	}
}

// TestRelayResponseAllocations: the consumer's relay of a small answer
// that is not a stream allocates the backing array of its header values
// and its Content-Length's string, nothing more.
func TestRelayResponseAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	body := []byte(`{"ok":true}`)
	in := smallAnswer(body)
	fb := newFramePools().bufFor(false, len(body))
	defer fb.release()
	w := &discardWriter{h: http.Header{}}
	r := bytes.NewReader(in)
	n := testing.AllocsPerRun(100, func() {
		r.Reset(in)
		clear(w.h)
		if err := relayResponse(r, w, &fb); err != nil {
			t.Fatal(err)
		}
	})
	if n > 2 {
		t.Errorf("a small answer is relayed with %v allocations, want at most 2", n)
	}
	if w.status != 200 || len(w.h) != 3 || w.h.Get("Content-Length") != "11" || w.h.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("relayed %d %v", w.status, w.h)
	}
}
