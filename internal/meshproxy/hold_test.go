package meshproxy

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/nodeld/nodeld/internal/proxy/proxytest"
	"github.com/nodeld/nodeld/internal/table"
)

// TestMeshServeHoldsTheRegistration: a peer's request served to a local
// instance holds the instance's registration until the answer has been
// relayed, as the local path does: a stop of the instance (its
// registration released) waits for the request in flight. Without the
// hold the registration drained at once and the host stopped the instance
// under the peer's request.
func TestMeshServeHoldsTheRegistration(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 1)
	placed := proxytest.New(t, proxytest.Options{Hooks: proxytest.Hooks{
		OnRequest: func(ctx context.Context, r *http.Request) {
			arrived <- struct{}{}
			<-release
		},
	}})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // a failed check must not leave the upstream waiting
	nodes := newMeshNodes(t, "a", "b")
	a, b := nodes[0], nodes[1]
	slot, err := b.Table.RegisterLocal(table.OriginPlaced, "chat", placed.URL, "", "openai", "openai")
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

	status := make(chan int, 1)
	go func() {
		res, _ := a.h.post("chat", "/v1/chat/completions", chatBody(false))
		status <- res.StatusCode
	}()
	wait(t, arrived, "the peer's request at the placed instance")
	if n := slot.Holds(); n != 1 {
		t.Fatalf("placed registration holds = %d with a peer's request in flight, want 1", n)
	}
	slot.Release()
	select {
	case <-slot.Drained():
		t.Fatal("drained while a peer's request to the instance was in flight")
	default:
	}
	unblock()
	if s := wait(t, status, "the held request's answer"); s != http.StatusOK {
		t.Fatalf("held request answered %d, want 200", s)
	}
	wait(t, slot.Drained(), "the registration drained")
}
