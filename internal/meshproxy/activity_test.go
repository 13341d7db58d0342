package meshproxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/proxy/proxytest"
	"github.com/nodeld/nodeld/internal/table"
)

// TestActivityCountedWhereServed: the registration of b's instance
// counts a request in flight while it streams and as answered once it is,
// for a request on b's own role port (the
// proxy's local path) and for a's request served to a over a real mesh
// link (the serve side): what the host reports so that a controller
// unloads an idle on-demand instance, peers' use included, and never one
// with a request in flight.
func TestActivityCountedWhereServed(t *testing.T) {
	gate := make(chan struct{})
	streaming := make(chan struct{}, 1)
	up := proxytest.New(t, proxytest.Options{Model: "served-model", Chunks: 2, Hooks: proxytest.Hooks{
		AfterChunk: func(_ context.Context, i int) {
			if i == 0 {
				streaming <- struct{}{}
			}
		},
		BeforeChunk: func(ctx context.Context, i int) {
			if i == 1 {
				select {
				case <-gate:
				case <-ctx.Done():
				}
			}
		},
	}})
	nodes := newMeshNodes(t, "a", "b")
	a, b := nodes[0], nodes[1]
	slot, err := b.Table.RegisterLocal(table.OriginAdopted, "chat", up.URL, "served-model", "openai", "llama.cpp")
	if err != nil {
		t.Fatal(err)
	}
	b.Table.ExposeToMesh("chat", true)
	b.Table.AllowMeshPeer("chat", a.ID(), true)
	a.Table.AllowRemoteNode("chat", b.ID(), true)
	a.start(Deps{}, b)
	b.start(Deps{})
	b.admitLater(a)
	a.resolvesTo(b)
	if got := slot.Activity(); got != (table.Activity{}) {
		t.Fatalf("before any request: %+v", got)
	}

	var done uint64
	for _, via := range []struct {
		name string
		h    *harness
	}{{"local", b.h}, {"peer over the mesh", a.h}} {
		req, err := http.NewRequest(http.MethodPost, via.h.url("chat")+"/v1/chat/completions", strings.NewReader(chatBody(true)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		res, err := via.h.client.Do(req.WithContext(ctx))
		if err != nil {
			cancel()
			t.Fatalf("%s: %v", via.name, err)
		}
		wait(t, streaming, via.name+": the first chunk streamed")
		if got := slot.Activity(); got != (table.Activity{InFlight: 1, Done: done}) {
			t.Errorf("%s, streaming: %+v, want 1 in flight and %d done", via.name, got, done)
		}
		gate <- struct{}{}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		cancel()
		if err != nil || res.StatusCode != http.StatusOK || !strings.Contains(string(body), "[DONE]") {
			t.Fatalf("%s: %d %q %v", via.name, res.StatusCode, body, err)
		}
		meshtest.WaitFor(t, via.name+": the request no longer in flight", func() bool { return slot.Activity().InFlight == 0 })
		done++
		if got := slot.Activity(); got != (table.Activity{Done: done}) {
			t.Errorf("%s, answered: %+v, want %d done", via.name, got, done)
		}
	}
}
