package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nodeld/nodeld/internal/proxy/proxytest"
	"github.com/nodeld/nodeld/internal/table"
)

// TestLocalForwardHoldsTheRegistration: a request forwarded to a local
// instance holds the instance's registration until its answer has been
// relayed, so a registration released meanwhile (a stop of the instance)
// is drained only after the request is answered, while new requests
// already go to the registration standing by. Without the hold the host
// had nothing to wait for and stopped the instance under the request.
func TestLocalForwardHoldsTheRegistration(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 1)
	placed := proxytest.New(t, proxytest.Options{Hooks: proxytest.Hooks{
		OnRequest: func(ctx context.Context, r *http.Request) {
			arrived <- struct{}{}
			<-release
		},
	}})
	standby := proxytest.New(t, proxytest.Options{})
	tb := table.New("n-self", table.Options{})
	slot, err := tb.RegisterLocal(table.OriginPlaced, "chat", placed.URL, "", "openai", "openai")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.RegisterLocal(table.OriginAdopted, "chat", standby.URL, "", "openai", "openai"); err != nil {
		t.Fatal(err)
	}
	p, stop, done := runProxy(t, Config{Roles: []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0"}}, DrainTimeout: testDeadline}, tb)
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer func() {
		unblock() // a failed check must not leave the upstream waiting
		stop()
		if err := wait(t, done, "Run to return"); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	addr, _ := p.Addr("chat")
	url := "http://" + addr.String() + "/v1/chat/completions"
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	post := func() (int, string) {
		r, err := (&http.Client{Transport: tr}).Post(url, "application/json", strings.NewReader(chatBody(false)))
		if err != nil {
			return -1, err.Error()
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	status := make(chan int, 1)
	go func() {
		s, _ := post()
		status <- s
	}()
	wait(t, arrived, "the request at the placed instance")
	if n := slot.Holds(); n != 1 {
		t.Fatalf("placed registration holds = %d with a request in flight, want 1", n)
	}
	slot.Release()
	if s, body := post(); s != http.StatusOK || standby.Count() != 1 {
		t.Fatalf("a request after the release: %d %s, standby hits %d; want it answered by the standby", s, body, standby.Count())
	}
	select {
	case <-slot.Drained():
		t.Fatal("drained while a request to the instance was in flight")
	default:
	}
	unblock()
	if s := wait(t, status, "the held request's answer"); s != http.StatusOK {
		t.Fatalf("held request answered %d, want 200", s)
	}
	wait(t, slot.Drained(), "the registration drained")
}
