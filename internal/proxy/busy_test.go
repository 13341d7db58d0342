package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/proxy/proxytest"
	"github.com/nodeld/nodeld/internal/table"
)

// TestHeldWaitsForTheRolesOwnSlot: a held request released while its
// role has all its concurrency in flight here waits for a slot (as one
// refused by a busy peer does) and is sent once when one frees; an
// ordinary request keeps the immediate 429 over_capacity.
func TestHeldWaitsForTheRolesOwnSlot(t *testing.T) {
	gate := proxytest.NewGate("/v1/embeddings", 1)
	up := proxytest.New(t, proxytest.Options{Hooks: proxytest.Hooks{OnRequest: gate.Hook}})
	defer gate.Open()
	tb := table.New("n-self", table.Options{})
	h := &holdHarness{tb: tb, harness: startProxy(t, Config{Hold: HoldConfig{MaxWait: testDeadline},
		Roles: []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0", Concurrency: 1}}},
		Deps{Resolver: tb, Holds: &expectAll{maxWait: testDeadline}})}
	slot, err := tb.RegisterLocal(table.OriginPlaced, "chat", up.URL, "", "openai", "openai")
	if err != nil {
		t.Fatal(err)
	}
	blocker := make(chan int, 1)
	go func() {
		res, _ := h.post("chat", "/v1/embeddings", `{"input":"x"}`)
		blocker <- res.StatusCode
	}()
	wait(t, gate.Entered, "the blocking request upstream")

	res, body := h.post("chat", "/v1/chat/completions", chatBody(false))
	if res.StatusCode != http.StatusTooManyRequests || apiError(t, res, body).Code != CodeOverCapacity {
		t.Fatalf("an ordinary request past the role's concurrency: %d %s, want 429 over_capacity", res.StatusCode, body)
	}

	slot.Release() // the route goes; the blocker keeps its registration held
	got := make(chan int, 1)
	go func() {
		res, err := h.client.Post(h.url("chat")+"/v1/chat/completions", "application/json", strings.NewReader(chatBody(false)))
		if err != nil {
			got <- -1
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		got <- res.StatusCode
	}()
	h.waitDepth("chat", 1)
	if _, err := tb.RegisterLocal(table.OriginPlaced, "chat", up.URL, "", "openai", "openai"); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, "the held request waiting for the role's slot", func() bool {
		v, _ := metricValue(t, h.reg, "nodeld_proxy_hold_busy_retries_total", map[string]string{"role": "chat"})
		return v >= 2
	})
	select {
	case s := <-got:
		t.Fatalf("the held request was answered %d with the role's slot taken", s)
	default:
	}
	gate.Open()
	if s := wait(t, blocker, "the blocking request"); s != http.StatusOK {
		t.Fatalf("the blocking request: %d", s)
	}
	if s := wait(t, got, "the held request"); s != http.StatusOK {
		t.Fatalf("the held request: %d, want 200", s)
	}
	if chats := up.CountPath("/v1/chat/completions"); chats != 1 {
		t.Errorf("the instance got %d chat requests, want 1 (the held one, once)", chats)
	}
}
