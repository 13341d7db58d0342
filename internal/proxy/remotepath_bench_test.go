package proxy

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/activity"
	"github.com/nodeld/nodeld/internal/httpfast"
	"github.com/nodeld/nodeld/internal/httpfast/httpfasttest"
	"github.com/nodeld/nodeld/internal/table"
)

// BenchmarkRemotePath measures the consumer's side of the mesh hop in
// process: a raw HTTP/1.1 keep-alive client sends the benchmark's chat
// request through a role port whose role a peer serves, and a
// RemoteForwarder answers it from memory with the upstream's answer. What
// it measures is the proxy's own work on a remote forward (admission, the
// request's state, the recorder, metrics, usage and the activity log,
// which nodeld always keeps), not the mesh's.
//
//	go test -run '^$' -bench BenchmarkRemotePath -benchmem ./internal/proxy/
func BenchmarkRemotePath(b *testing.B) {
	_, body, _ := bytes.Cut(localPathAnswer, []byte("\r\n\r\n"))
	p := remoteAnswering(b, body, false, 256, activity.New(0, nil))
	one := remoteExchange(b, p, len(body))
	b.ReportAllocs()
	for b.Loop() {
		one()
	}
}

// remoteAnswering returns a proxy whose role "chat" forwards to a peer
// that answers answer from memory (a RemoteForwarder; writeHeader: with
// an explicit WriteHeader), with concurrency and act (nil: none) as its
// role's and activity log.
func remoteAnswering(tb testing.TB, answer []byte, writeHeader bool, concurrency int, act *activity.Log) *Proxy {
	tb.Helper()
	contentType, length := []string{"application/json"}, []string{strconv.Itoa(len(answer))}
	remote := remoteFunc(func(_ context.Context, _, _ string, _ *http.Request, _ []byte, w http.ResponseWriter) error {
		w.Header()["Content-Type"], w.Header()["Content-Length"] = contentType, length
		if writeHeader {
			w.WriteHeader(http.StatusOK)
		}
		_, err := w.Write(answer)
		return err
	})
	res := newResolver()
	res.set("chat", table.Target{Kind: table.TargetRemote, NodeID: "n-b", Model: "bench"})
	deps := Deps{Resolver: res, Remote: remote, Logger: zap.NewNop(), Registerer: prometheus.NewRegistry()}
	if act != nil {
		deps.Activity = act
	}
	p, err := New(Config{Roles: []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0", Concurrency: concurrency}}}, deps)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// remoteExchange runs p until the test ends and returns one exchange on a
// keep-alive connection to its role "chat": localPathRequest sent, an
// answer of n body bytes read whole.
func remoteExchange(tb testing.TB, p *Proxy, n int) func() {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Run: %v", err)
		}
	})
	<-p.Ready()
	addr, _ := p.Addr("chat")
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	br := bufio.NewReaderSize(c, 8<<10)
	return func() {
		if _, err := c.Write(localPathRequest); err != nil {
			tb.Fatal(err)
		}
		got, err := httpfasttest.ReadHead(br)
		if err == nil {
			_, err = br.Discard(got)
		}
		if err != nil || got != n {
			tb.Fatalf("answer of %d bytes, %v", got, err)
		}
	}
}

// BenchmarkRemoteHandler is BenchmarkRemotePath without the sockets: the
// role handler serves the request in the benchmark's goroutine, into a
// ResponseWriter that keeps nothing, so what it measures is the proxy's
// own CPU on a remote forward. The request's context is an exchange
// context off the fast reader (its watchdog takes a timer of its own).
//
//	go test -run '^$' -bench BenchmarkRemoteHandler -benchmem ./internal/proxy/
func BenchmarkRemoteHandler(b *testing.B) {
	_, answer, _ := bytes.Cut(localPathAnswer, []byte("\r\n\r\n"))
	p := remoteAnswering(b, answer, true, 256, activity.New(0, nil))
	h := &roleHandler{p: p, rs: p.roles["chat"]}
	_, body, _ := bytes.Cut(localPathRequest, []byte("\r\n\r\n"))
	src := &resetBody{}
	u, _ := url.ParseRequestURI("/v1/chat/completions")
	r := (&http.Request{Method: http.MethodPost, URL: u, RequestURI: u.Path, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Host: "127.0.0.1", Header: http.Header{"Content-Type": {"application/json"}}, ContentLength: int64(len(body)),
		Body: src}).WithContext(httpfast.NewContext())
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		src.Reset(body)
		clear(w.h)
		w.code = 0
		h.ServeHTTP(w, r)
		if w.code != http.StatusOK {
			b.Fatalf("status %d", w.code)
		}
	}
}

// resetBody is a request body read again after Reset.
type resetBody struct{ bytes.Reader }

func (*resetBody) Close() error { return nil }

// discardWriter is a ResponseWriter that keeps the status and its header
// map, and nothing written; it sets read deadlines as the fast reader's
// does (net/http's ResponseController builds an error for one that
// cannot).
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) Flush()                      {}

func (w *discardWriter) SetReadDeadline(time.Time) error { return nil }
