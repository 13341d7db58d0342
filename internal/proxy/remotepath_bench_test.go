package proxy

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/activity"
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
	contentType, length := []string{"application/json"}, []string{strconv.Itoa(len(body))}
	remote := remoteFunc(func(_ context.Context, _, _ string, _ *http.Request, _ []byte, w http.ResponseWriter) error {
		w.Header()["Content-Type"], w.Header()["Content-Length"] = contentType, length
		_, err := w.Write(body)
		return err
	})
	res := newResolver()
	res.set("chat", table.Target{Kind: table.TargetRemote, NodeID: "n-b", Model: "bench"})
	p, err := New(Config{Roles: []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0", Concurrency: 256}}},
		Deps{Resolver: res, Remote: remote, Logger: zap.NewNop(), Registerer: prometheus.NewRegistry(),
			Activity: activity.New(0, nil)})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run: %v", err)
		}
	}()
	<-p.Ready()
	addr, _ := p.Addr("chat")
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReaderSize(c, 8<<10)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(localPathRequest); err != nil {
			b.Fatal(err)
		}
		n, err := httpfasttest.ReadHead(br)
		if err == nil {
			_, err = br.Discard(n)
		}
		if err != nil || n != len(body) {
			b.Fatalf("answer of %d bytes, %v", n, err)
		}
	}
}
